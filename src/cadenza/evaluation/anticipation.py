"""An old model beside a new one on the same held-out pieces: what a vocabulary whose notes carry
their lengths, trained with anticipation, is judged by (`benchmarks/bench_anticipation.py`).

1. Durations: per style, `samples` x `seconds` from each model (seeded); the share of generated
   notes longer than the style's real 99.9th percentile (the real notes: the split's pieces of the
   style, in the old store, whose notes are not cut at the note vocabulary's 10 s), and the share a
   model's grammar closed at its length cap (a note exactly the cap long).
2. Likelihood: nats per note on the split, the token NLL summed over its pieces (each model on its
   own store) over the pieces' notes: a number that compares models whose vocabularies differ.
3. Infilling (the new model): held-out spans, their NLL given prefix and suffix vs given the prefix
   alone, and the model's fills beside the real spans (`evaluation.spans`).
4. Accompaniment (the new model): the top line of held-out pieces of one style (Bach chorales)
   harmonised in that style: whether the melody comes back note for note, what the style classifier
   calls the results, how consonant the bass is under the melody and how many voices sound there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cadenza.atomic import atomic_path
from cadenza.data.anticipation import melody
from cadenza.data.store import SPLITS, TokenStore
from cadenza.env.device import pick_device
from cadenza.evaluation.classifier import StyleClassifier
from cadenza.evaluation.features import excerpt, style_features
from cadenza.evaluation.harmony import fit
from cadenza.evaluation.metrics import mean_overlap
from cadenza.evaluation.nll import token_nll
from cadenza.evaluation.spans import draw_spans, encodings, infill, span_nll
from cadenza.evaluation.styles import classifier_report
from cadenza.generation.generate import sample, sampling_config
from cadenza.generation.prompt import Accompany, Task
from cadenza.models import checkpoint as ckpt
from cadenza.settings import setting, validate

PARTS = ("durations", "likelihood", "infilling", "accompaniment")


@dataclass
class AnticipationEvalConfig:
    samples: int = setting(8, ge=1, le=1000, doc="samples per style and model for the durations")
    seconds: float = setting(30.0, gt=0, le=600, doc="music per sample, and per excerpt the classifier reads")
    spans: int = setting(100, ge=1, le=10_000, doc="held-out spans to score and infill")
    pieces: int = setting(32, ge=1, le=10_000, doc="held-out pieces of `accompany_style` to harmonise")
    accompany_style: str = setting("bach", doc="the style whose held-out pieces are harmonised, in that style")
    split: str = setting("valid", choices=SPLITS, doc="the held-out pieces measured")
    guidance: float = setting(1.0, ge=0, le=20, doc="the guidance of every generation")
    seed: int = setting(0, ge=0)
    compile: bool = setting(True, doc="decode with the compiled step where it applies")


@dataclass
class Model:
    """A loaded checkpoint (`name`: as it was asked for, a run, a checkpoint or a shipped model's
    name) and the store of the held-out pieces in its vocabulary."""

    name: str
    checkpoint: ckpt.Checkpoint
    store: TokenStore

    @classmethod
    def load(cls, checkpoint, data, device) -> Model:
        loaded = ckpt.load(checkpoint, device)
        store = TokenStore(data)
        if not store.tokenizer.same_as(loaded.meta["tokenizer"]):
            raise ValueError(f"{data} was tokenized differently from {checkpoint}'s training data")
        return cls(str(checkpoint), loaded, store)

    @property
    def model(self):
        return self.checkpoint.model

    @property
    def meta(self) -> dict[str, Any]:
        return self.checkpoint.meta

    @property
    def tok(self):
        return self.checkpoint.tokenizer

    def describe(self) -> dict[str, Any]:
        return {"checkpoint": self.name, "step": self.meta["step"], "tokenizer": self.tok.name,
                "vocab_size": self.tok.vocab_size, "parameters": self.meta.get("parameters"),
                "data_fingerprint": self.meta.get("data_fingerprint")}

    def generate(self, cfg: AnticipationEvalConfig, prompt: Task | None = None, **settings):
        base = {"seed": cfg.seed, "compile": cfg.compile, "guidance": cfg.guidance if settings.get("style") else 1.0}
        return sample(self.checkpoint, sampling_config(base, **settings), prompt)


# -- 1. durations ----------------------------------------------------------------------------------

def duration_shares(durations: np.ndarray, longest: float, cap: float | None, step: float) -> dict[str, Any]:
    """The share of `durations` (seconds) longer than `longest`, and the share exactly `cap` long
    (within half a `step`): the notes a grammar closed at its cap."""
    n = max(durations.size, 1)
    capped = np.count_nonzero(np.abs(durations - cap) < step / 2) if cap else 0
    return {"notes": int(durations.size), "longer_than_real_p999": float(np.count_nonzero(durations > longest) / n),
            "closed_by_cap": float(capped / n)}


def style_durations(store: TokenStore, style: str, split: str) -> np.ndarray:
    """The note durations (seconds) of the split's pieces of `style`."""
    parts = [store.tokenizer.to_notes(store[p.index]) for p in store.split(split) if p.style == style]
    return np.concatenate([n.end - n.start for n in parts]) if parts else np.zeros(0)


def durations_report(old: Model, new: Model, cfg: AnticipationEvalConfig) -> tuple[dict, dict]:
    """Per style: the real 99.9th percentile, and each model's shares (`duration_shares`) over its
    samples. Also returns every duration, for `durations_png`."""
    report, durations = {}, {}
    for style in new.store.styles:
        real = style_durations(old.store, style, cfg.split)
        if not real.size:
            continue
        p999 = float(np.percentile(real, 99.9))
        report[style], durations[style] = {"real_p999_seconds": p999, "real_notes": int(real.size)}, {"real": real}
        for name, m in (("old", old), ("new", new)):
            g = m.generate(cfg, style=style, seconds=cfg.seconds, num_samples=cfg.samples, batch_size=cfg.samples,
                           stop_at_eos=False)
            d = np.concatenate([n.end - n.start for n in g.notes])
            cap, sps = g.run["max_note_seconds"], m.tok.steps_per_second
            capped_at = max(1, round(cap * sps)) / sps if cap else None  # the grammar counts whole steps
            report[style][name] = {**duration_shares(d, p999, capped_at, 1 / sps), "cap_seconds": capped_at}
            durations[style][name] = d
    return report, durations


def durations_png(durations: dict, report: dict, path) -> None:
    """One panel per style: the share of notes per duration bin (log-spaced) of each model's
    samples and of the real pieces, the real 99.9th percentile dashed, the old model's cap dotted."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    edges = np.geomspace(0.01, 20.0, 49)
    cols = min(3, len(durations))
    rows = -(-len(durations) // cols)
    fig = Figure(figsize=(4.6 * cols, 3.6 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    for k, (style, ds) in enumerate(durations.items()):
        ax = fig.add_subplot(rows, cols, k + 1)
        r = report[style]
        for name, colour in (("real", "black"), ("old", "tab:red"), ("new", "tab:blue")):
            d = np.clip(ds.get(name, np.zeros(0)), edges[0], edges[-1])
            if d.size:
                ax.stairs(np.histogram(d, edges)[0] / d.size, edges, color=colour, label=f"{name} ({d.size:,} notes)")
        ax.axvline(r["real_p999_seconds"], color="black", ls="--", lw=0.8, label="real 99.9th percentile")
        if cap := r.get("old", {}).get("cap_seconds"):
            ax.axvline(cap, color="tab:red", ls=":", lw=0.8, label="old model's cap")
        longer = ", ".join(f"{m} {r[m]['longer_than_real_p999']:.1%}" for m in ("old", "new") if m in r)
        ax.set(xscale="log", yscale="log", ylim=(1e-5, 1), xlabel="note duration (s)",
               title=f"{style}: longer than real p99.9 ({r['real_p999_seconds']:.2g} s): {longer}")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7)
    for ax in fig.axes[::cols]:
        ax.set_ylabel("share of notes")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


# -- 2. likelihood ---------------------------------------------------------------------------------

def nats_per_note(m: Model, split: str) -> dict[str, Any]:
    """The token NLL of every piece of `split` summed, over the pieces' notes; overall and per style."""
    r = token_nll(m.model, m.store, split, tokenizer=m.tok, device=next(m.model.parameters()).device)
    pieces = m.store.split(split)
    notes = np.array([m.store.manifest["pieces"][p.index]["notes"] for p in pieces])
    nats = np.array([v.sum() for v in r.per_piece])
    out = {"nats_per_note": float(nats.sum() / notes.sum()), "nats_per_token": r.nll, "tokens": r.tokens,
           "notes": int(notes.sum()), "pieces": len(pieces), "per_style": {}}
    for style in m.store.styles:
        mine = np.array([p.style == style for p in pieces])
        if mine.any():
            out["per_style"][style] = float(nats[mine].sum() / notes[mine].sum())
    return out


# -- 3. infilling ----------------------------------------------------------------------------------

def infilling_report(new: Model, cfg: AnticipationEvalConfig) -> dict[str, Any]:
    """The spans' NLL both ways, and per style the overlap of the fills' metrics with the real
    spans' beside that of real spans of the other held-out split (the ceiling)."""
    tok, context = new.tok, new.model.config.context
    spans = draw_spans(new.store, tok, cfg.split, cfg.spans, context, seed=cfg.seed)
    nll = {"plain": [], "anticipatory": []}
    for s in spans:
        for name, (ids, mask) in encodings(tok, s).items():
            nll[name].append(span_nll(new.model, ids, mask))
    plain, given = (np.array([v for v, _ in nll[k]]) for k in ("plain", "anticipatory"))
    fills = [infill(new.checkpoint, s, cfg.seed + i, cfg.compile) for i, s in enumerate(spans)]
    ceiling_split = "test" if cfg.split != "test" else "valid"
    others = draw_spans(new.store, tok, ceiling_split, cfg.spans, context, seed=cfg.seed)
    per_style = {}
    for style in dict.fromkeys(s.style for s in spans):
        real = [s.real(tok) for s in spans if s.style == style]
        gen = [f for f, s in zip(fills, spans) if s.style == style]
        other = [s.real(tok) for s in others if s.style == style]
        row = {"spans": len(real), "overlap": mean_overlap(gen, real),
               "ceiling": mean_overlap(other, real) if other else float("nan")}
        per_style[str(style)] = {**row, "share_of_ceiling": row["overlap"] / row["ceiling"]}
    shares = [v["share_of_ceiling"] for v in per_style.values() if np.isfinite(v["share_of_ceiling"])]
    return {"spans": len(spans), "span_seconds": [round((s.end - s.start) / tok.steps_per_second, 2) for s in spans],
            "styles": [s.style for s in spans], "nll_plain": plain.tolist(), "nll_anticipatory": given.tolist(),
            "tokens_plain": [n for _, n in nll["plain"]], "tokens_anticipatory": [n for _, n in nll["anticipatory"]],
            "mean_nll_plain": float(plain.mean()), "mean_nll_anticipatory": float(given.mean()),
            "share_lower_with_suffix": float(np.mean(given < plain)), "ceiling_split": ceiling_split,
            "notes_generated": [len(f) for f in fills], "per_style": per_style,
            "share_of_ceiling": float(np.mean(shares)) if shares else float("nan")}


# -- 4. accompaniment ------------------------------------------------------------------------------

def harmonise(new: Model, cfg: AnticipationEvalConfig, index: int, seed: int) -> dict[str, Any]:
    """One held-out piece's melody harmonised by the model: the real and generated notes, split into
    melody and the rest, and whether every melody note came back as it went in."""
    tok = new.tok
    g = new.store.tokenizer.decode_grid(new.store[index], clock=0)[0]
    tune = melody(g)
    real, real_melody = tok.to_grid_notes(g), tok.to_grid_notes(g.take(tune))
    gen = new.generate(cfg, Accompany(real), style=cfg.accompany_style, seed=seed)
    result, mine = gen.notes[0], gen.given[0]
    kept, want = result.take(mine).by_time(), real_melody.by_time()
    returned = 0 < len(want) == len(kept) and all(np.array_equal(getattr(kept, f), getattr(want, f))
                                                   for f in ("start", "end", "pitch", "velocity"))
    return {"real": real, "real_melody": real_melody, "real_rest": tok.to_grid_notes(g.take(~tune)),
            "result": result, "melody": result.take(mine), "rest": result.take(~mine),
            "returned": returned}


def accompaniment_report(new: Model, cfg: AnticipationEvalConfig, clf: StyleClassifier | None) -> dict[str, Any]:
    """`pieces` held-out pieces of `accompany_style` (the split's first, then the other held-out
    split's), each harmonised (`harmonise`): the melody returned, the classifier's verdict on the
    first `seconds` of each result and of each real piece (with a classifier), and how each result
    and each real piece fits its melody (`harmony.fit`)."""
    style = cfg.accompany_style
    held = [p for split in dict.fromkeys((cfg.split, "valid", "test")) for p in new.store.split(split)
            if p.style == style][:cfg.pieces]
    rows, real, made = [], [], []
    for i, p in enumerate(held):
        h = harmonise(new, cfg, p.index, cfg.seed + i)
        row = {"piece": new.store.manifest["pieces"][p.index].get("origin"), "melody_returned": h["returned"]}
        if clf is not None:
            called = clf.predict(np.array([style_features(excerpt(n, 0.0, cfg.seconds))
                                           for n in (h["result"], h["real"])]))
            row.update(called=called[0], real_called=called[1])
        real.append(fit(h["real_melody"], h["real_rest"]))
        made.append(fit(h["melody"], h["rest"]))
        rows.append({**row, **made[-1]})
    keys = ("consonant", "voices_under", "above", "synchrony", "same_key")
    mean = {key: {k: float(np.nanmean([h[k] for h in hs])) for k in keys} for key, hs in (("generated", made),
                                                                                          ("real", real))}
    out = {"style": style, "pieces": len(rows), "melody_returned": sum(r["melody_returned"] for r in rows), **mean,
           "per_piece": rows}
    if clf is not None:
        out["called_style"] = float(np.mean([r["called"] == style for r in rows])) if rows else float("nan")
        out["real_called_style"] = float(np.mean([r["real_called"] == style for r in rows])) if rows else float("nan")
    return out


# -- all of it -------------------------------------------------------------------------------------

def evaluate_anticipation(old, new, old_data, new_data, *, parts=PARTS, out: str | os.PathLike | None = None,
                          device: str = "auto", on_part: Callable[[str, dict], None] | None = None,
                          **settings) -> dict[str, Any]:
    """The `parts` (of PARTS) of the module docstring for checkpoints `old` and `new`, each with the
    store of its vocabulary (the same pieces: `cadenza prepare` splits by content); with `out`,
    durations.png and infilling.png there; `on_part(part, report so far)` after each part.
    `settings`: `AnticipationEvalConfig` fields."""
    cfg = validate(AnticipationEvalConfig(**settings))
    if unknown := set(parts) - set(PARTS):
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    dev = pick_device(device)
    o, n = Model.load(old, old_data, dev), Model.load(new, new_data, dev)
    if [p.source for p in o.store.split(cfg.split)] != [p.source for p in n.store.split(cfg.split)]:
        raise ValueError(f"{old_data} and {new_data} hold different {cfg.split} pieces: prepare both from one corpus")
    report: dict[str, Any] = {"settings": asdict(cfg), "old": o.describe(), "new": n.describe()}
    out = Path(out) if out is not None else None
    for part in (p for p in PARTS if p in parts):
        if part == "durations":
            report["durations"], durations = durations_report(o, n, cfg)
            if out is not None:
                durations_png(durations, report["durations"], out / "durations.png")
        elif part == "likelihood":
            report["likelihood"] = {"old": nats_per_note(o, cfg.split), "new": nats_per_note(n, cfg.split)}
        elif part == "infilling":
            report["infilling"] = infilling_report(n, cfg)
            if out is not None:
                infilling_png(report["infilling"], out / "infilling.png")
        else:
            clf, real = classifier_report(n.store, cfg.seconds, cfg.seed)
            report["classifier"] = real["report"]
            report["accompaniment"] = accompaniment_report(n, cfg, clf)
        if on_part is not None:
            on_part(part, {**report, "goals": goals(report)})
    report["goals"] = goals(report)
    return report


def goals(report: dict) -> dict[str, dict[str, Any]]:
    """Each measured goal of the issue: the value, the goal, and whether it is met."""
    out = {}

    def goal(name: str, value, target: str, met) -> None:
        out[name] = {"value": value, "goal": target, "met": bool(met)}

    if d := report.get("durations"):
        worst = max(v["new"]["longer_than_real_p999"] for v in d.values())
        goal("durations_longer_than_real_p999", worst, "<= 0.3% in every style (new)", worst <= 0.003)
        capped = max(v["new"]["closed_by_cap"] for v in d.values())
        goal("durations_closed_by_cap", capped, "no note closed by a cap (new)", capped == 0)
    if f := report.get("infilling"):
        goal("infilling_spans", f["spans"], ">= 100 held-out spans", f["spans"] >= 100)
        goal("infilling_nll", [f["mean_nll_anticipatory"], f["mean_nll_plain"]],
             "mean NLL given prefix and suffix < given the prefix alone",
             f["mean_nll_anticipatory"] < f["mean_nll_plain"])
        goal("infilling_overlap", f["share_of_ceiling"], ">= 80% of the real-vs-real ceiling",
             f["share_of_ceiling"] >= 0.8)
    if a := report.get("accompaniment"):
        n = a["pieces"]
        goal("accompaniment_pieces", n, ">= 30 held-out pieces", n >= 30)
        goal("accompaniment_melody_returned", a["melody_returned"], "every melody note for note",
             a["melody_returned"] == n)
        goal("accompaniment_style", a["called_style"], ">= 90% called the style", a["called_style"] >= 0.9)
        gen, real = a["generated"], a["real"]
        goal("accompaniment_consonance", [gen["consonant"], real["consonant"]], "within 10% of the real share",
             abs(gen["consonant"] - real["consonant"]) <= 0.1 * real["consonant"])
        goal("accompaniment_texture", [gen["voices_under"], real["voices_under"]],
             "voices under the melody within 1 of the real", abs(gen["voices_under"] - real["voices_under"]) <= 1)
    return out


def infilling_png(infilling: dict, path) -> None:
    """Each span's NLL given prefix and suffix against given the prefix alone (nats), by style:
    below the diagonal, knowing what comes next made the real span likelier."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    plain, given = np.array(infilling["nll_plain"]), np.array(infilling["nll_anticipatory"])
    styles = np.array([str(s) for s in infilling["styles"]])
    for style in dict.fromkeys(styles):
        ax.scatter(plain[styles == style], given[styles == style], s=12, label=style)
    top = float(max(plain.max(initial=1), given.max(initial=1)))
    ax.plot([0, top], [0, top], color="grey", lw=0.8)
    ax.set(xlabel="NLL of the span given the prefix (nats)", ylabel="NLL given prefix and suffix (nats)",
           title=f"{infilling['spans']} spans: lower with the suffix in "
                 f"{infilling['share_lower_with_suffix']:.0%}")
    ax.legend(fontsize=7)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
