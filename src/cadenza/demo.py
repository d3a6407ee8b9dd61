"""`make demo` / `cadenza demo`: music out of the box, then the whole pipeline, offline.

First the shipped style model plays each of its styles (no training; each sample rendered to WAV
and a piano roll, classified by the model's style classifier, and measured beside the real pieces of
its style), then continues a held-out chorale, rewrites a span in its middle and harmonises its
melody. Then the pipeline on the Bach chorales: prepare the corpus -> train the tiny preset for a
few minutes -> generate four chorales (two free, two continuing held-out openings) -> render ->
evaluate -> a short table with the paths of everything written.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cadenza.data.midi import read_notes
from cadenza.data.prepare import prepare
from cadenza.data.store import StoreError, TokenStore
from cadenza.evaluation.classifier import StyleClassifier
from cadenza.evaluation.features import style_features
from cadenza.evaluation.memorisation import RunFinder
from cadenza.evaluation.metrics import compare_sets, compute_all
from cadenza.evaluation.report import reference_notes
from cadenza.generation.generate import generate, read_notes_for
from cadenza.generation.prompt import Accompany, Continue, Infill
from cadenza.listen.render import render_file
from cadenza.models.zoo import DEFAULT, list_models, resolve_model
from cadenza.settings import setting, validate
from cadenza.training.config import resolve
from cadenza.training.trainer import train


def _say(msg: str) -> None:
    print(f"\n== {msg}", flush=True)


METRICS = ("pitch_range", "n_pitch_classes_used", "scale_consistency", "polyphony", "note_density",
           "mean_note_duration", "pitch_class_entropy")
# Chorale-shaped decoding: at most 5 voices, no note held past 4 s (a fermata is ~2 s).
CHORALE = {"max_polyphony": 5, "max_note_seconds": 4.0, "stop_at_eos": False, "top_p": 0.95}


@dataclass
class DemoConfig:
    minutes: float = setting(4.0, gt=0, le=600, doc="training time budget")
    seconds: float = setting(24.0, gt=0, le=600, doc="music per sample")
    seed: int = setting(0, ge=0)


def run_demo(out: str | Path = "runs/demo", minutes: float = 4.0, seconds: float = 24.0, seed: int = 0) -> int:
    """The whole pipeline on the Bach chorales; returns 0 when the model beats the unigram baseline."""
    validate(DemoConfig(minutes, seconds, seed))
    t0 = time.time()
    out = Path(out)
    data, run, samples = out / "data", out / "run", out / "samples"
    _say("1/7 listen: the shipped style model plays each of its styles (no training needed)")
    card = shipped_card()
    shipped = play_shipped(card, out / "shipped", seconds, seed)
    _say("2/7 prepare: the Bach chorales from music21's bundled corpus (no download)")
    store = _bach_store(data)
    _say("3/7 play along: the shipped model continues, fills in and harmonises a held-out chorale")
    shipped += play_with_a_chorale(card, store, out / "shipped", seed)
    _say(f"4/7 train your own: the tiny Music Transformer on the chorales for {minutes:g} minutes")
    shutil.rmtree(run, ignore_errors=True)  # a demo always starts from scratch
    cfg = resolve("tiny", None, [f"seed={seed}"], max_minutes=minutes)
    result = train(cfg, data, run, command=f"cadenza demo --out {out} --minutes {minutes:g}")
    _say("5/7 generate: 2 free chorales and 2 continuations of held-out chorale openings")
    free, continued = _chorales(run, store, samples, seconds, seed)
    _say("6/7 render: WAV and piano rolls")
    rendered = [render_file(p, wav=True, png=True) for p in free + continued]
    _say("7/7 evaluate")
    print(f"\nvalid NLL {result.valid_loss:.3f} nats/token vs unigram baseline {result.unigram_nll:.3f} "
          f"({result.step} steps, best {result.best_valid_loss:.3f})")
    _report(store, free, continued)
    print("\nwrote:")
    for files in shipped:
        print("  " + "  ".join(str(p) for p in files.values()))
    print(f"  token store   {data}")
    print(f"  run           {run}  (tensorboard --logdir {run / 'tb'})")
    for files in rendered:
        print("  " + "  ".join(str(p) for p in files.values()))
    print(f"\ndemo finished in {(time.time() - t0) / 60:.1f} minutes")
    return 0 if result.valid_loss is not None and result.valid_loss < result.unigram_nll else 1


def shipped_card() -> dict | None:
    """The shipped model's card (its style classifier, real metric means and guidance), or None
    where this installation has no shipped model."""
    if DEFAULT not in [m["name"] for m in list_models()]:
        print("no shipped model in this installation: skipping")
        return None
    return json.loads((resolve_model(DEFAULT) / "classifier.json").read_text())


def play_shipped(card: dict | None, out: Path, seconds: float, seed: int) -> list[dict]:
    """One sample per style of the shipped model, rendered, classified and measured. -> rendered files."""
    if card is None:
        return []
    clf = StyleClassifier.from_dict(card)
    rendered, rows = [], []
    for style in clf.styles:
        g = generate(DEFAULT, style=style, guidance=card.get("guidance", 2.0), seconds=seconds, seed=seed,
                     stop_at_eos=False, out=out / style)
        path = g.paths[0].rename(out / f"{style}.mid")
        rendered.append(render_file(path, wav=True, png=True))
        notes = read_notes(path)[0]
        heard = clf.predict(style_features(notes)[None])[0]
        rows.append((style, heard, compute_all(notes, METRICS[:5]), card["reference"].get(style, {})))
    print(f"\n| {'style':<11} | {'sounds like':<11} | " + " | ".join(f"{m:>20}" for m in METRICS[:5]) + " |")
    print(f"|{'-' * 13}|{'-' * 13}|" + "|".join("-" * 22 for _ in METRICS[:5]) + "|")
    for style, heard, got, ref in rows:
        cells = " | ".join(f"{got[m]:>8.2f} (real {ref.get(m, float('nan')):>6.2f})" for m in METRICS[:5])
        print(f"| {style:<11} | {heard:<11} | {cells} |")
    print("\n(sounds like: the style classifier's verdict; real: the mean over the style's real pieces)")
    return rendered


def play_with_a_chorale(card: dict | None, store, out: Path, seed: int) -> list[dict]:
    """The shipped model with a held-out chorale: continued from its first 8 s, its notes starting
    in 4-8 s rewritten (the rest kept exactly), its melody harmonised. -> rendered files."""
    if card is None or not store.split("test"):
        return []
    chorale = store.split("test")[0].source
    notes = read_notes_for(DEFAULT, chorale)
    asks = {"continued": (Continue(notes, 8.0, source=chorale), {"seconds": 16.0, "stop_at_eos": False}),
            "infilled": (Infill(notes, 4.0, 8.0, source=chorale), {}),
            "harmonised": (Accompany(notes, source=chorale), {})}
    rendered = []
    for name, (task, ask) in asks.items():
        g = generate(DEFAULT, prompt=task, style="bach", guidance=card.get("guidance", 2.0), seed=seed,
                     out=out / name, **ask)
        path = g.paths[0].rename(out / f"chorale-{name}.mid")
        rendered.append(render_file(path, wav=True, png=True))
        print(f"  {name:<10} {_what_changed(name, g)}")
    return rendered


def _what_changed(name: str, g) -> str:
    """One line on what the model kept of the chorale and what it wrote."""
    total = len(g.notes[0])
    if name == "continued":
        return f"{total} notes: the first 8 s of the chorale, then the model's"
    kept = int(g.given[0].sum())  # the notes given back exactly
    if name == "infilled":
        return f"{kept} notes outside 4-8 s kept exactly, {total - kept} new notes inside it"
    return f"the melody's {kept} notes kept, {total - kept} notes written under it"


def _bach_store(data: Path):
    try:
        store = TokenStore(data)
        print(f"using the existing store in {data}")
        return store
    except StoreError:
        res = prepare(out=data, corpus="bach")
        print(res.summary())
        return res.store


def _chorales(run: Path, store, samples: Path, seconds: float, seed: int) -> tuple[list[Path], list[Path]]:
    """Two free chorales, and continuations of the openings of two held-out (test) chorales."""
    free = generate(run, num_samples=2, seconds=seconds, seed=seed, out=samples / "free", **CHORALE).paths
    continued = []
    for i, piece in enumerate(store.split("test")[:2]):
        primer = Continue(read_notes_for(run, piece.source), 8.0, source=piece.source)
        continued += generate(run, prompt=primer, num_samples=1, seconds=seconds,
                              seed=seed + 1 + i, out=samples / f"continued-{i}", **CHORALE).paths
    return free, continued


def _report(store, free: list[Path], continued: list[Path]) -> None:
    """Musical metrics of the samples against the training chorales, and the longest copied run."""
    metrics = compare_sets([read_notes(p)[0] for p in free + continued], reference_notes(store, "train"),
                           names=METRICS)
    finder = RunFinder([store[p.index] for p in store.split("train")])
    longest = max(finder.longest_common_run(store.tokenizer.encode(p).ids).length for p in free)
    print(f"\n| {'metric':<22} | {'samples':>9} | {'Bach':>9} | {'overlap':>7} |")
    print(f"|{'-' * 24}|{'-' * 11}|{'-' * 11}|{'-' * 9}|")
    for name, m in metrics.items():
        print(f"| {name:<22} | {m['generated_mean']:>9.3f} | {m['reference_mean']:>9.3f} | {m['overlap']:>7.2f} |")
    print(f"\nlongest token run a free sample copies from a training chorale: {longest} tokens")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_demo(Path("runs/demo")))
