"""The model card's tables (docs/models.md), from the shipped model's own files and its evaluation
results in benchmarks/results/styles/. Used by bench_table.py; not run on its own."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "src" / "cadenza" / "models" / "shipped" / "styles"
RESULTS = ROOT / "benchmarks" / "results" / "styles"
CLASSIFIER_GOAL, STYLE_GOAL, OVERLAP_GOAL = 0.85, 0.80, 0.80
SOURCES = {"bach": "Bach chorales (`bach`)", "palestrina": "Palestrina masses (`palestrina`)",
           "irish": "O'Neill's 1850 Irish tunes (`irish`)", "german": "German folk songs, Essen (`german`)",
           "chinese": "Chinese folk songs, Essen (`chinese`)"}


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _missing(what: str) -> list[str]:
    return [f"*No result file yet ({what}).*"]


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def _source(r: dict, path: Path) -> str:
    cpu = r.get("cpu", {})
    isa = ", ".join(f for f in cpu.get("isa", []) if f.startswith(("avx", "amx"))) or "no AVX"
    return (f"<sub>`{r.get('command', '?')}` · {cpu.get('model', '?')} ({isa}) · commit "
            f"{str(r.get('code_commit') or '?')[:7]} · [{path.name}](../{path.relative_to(ROOT).as_posix()})</sub>")


def data_table() -> list[str]:
    data = _read(SHIPPED / "data.json")
    if data is None:
        return _missing("src/cadenza/models/shipped/styles/data.json")
    out = ["| style | source (music21 corpus) | pieces train / valid / test | tokens | hours | skipped |",
           "|---|---|---:|---:|---:|---:|"]
    for style, s in data["styles"].items():
        p = s["pieces"]
        out.append(f"| {style} | {SOURCES.get(style, style)} | {p['train']:,} / {p['valid']:,} / {p['test']:,} | "
                   f"{s['tokens']:,} | {s['hours']:.1f} | {s['skipped']} |")
    t = data["totals"]
    out += [f"| all | `cadenza prepare --corpus {data['corpus']}` | {t['pieces']:,} | {t['tokens']:,} | "
            f"{t['seconds'] / 3600:.1f} | {t['skipped']} |"]
    return out


def training_table() -> list[str]:
    meta, run, data = (_read(SHIPPED / f) for f in ("checkpoint.json", "run.json", "data.json"))
    if meta is None or run is None:
        return _missing("src/cadenza/models/shipped/styles/")
    m, t = meta["config"]["model"], meta["config"]["train"]
    log = [json.loads(line) for line in (SHIPPED / "metrics.jsonl").read_text().splitlines() if line.strip()]
    speed = statistics.median(r["tokens_per_s"] for r in log if "tokens_per_s" in r)
    env, machine = run["environment"], (data or {}).get("machine", {})
    rows = [("model", f"Music Transformer, {m['attention']} attention, {m['n_layers']} layers x d {m['d_model']}, "
                      f"{m['n_heads']} heads, context {m['context']}, {meta['parameters'] / 1e6:.2f}M parameters"),
            ("command", f"`{run['command']}`"),
            ("steps", f"{meta['step']:,} (best validation of {t['max_steps']:,}), batch {t['batch_size']}"),
            ("validation loss at that step", f"{meta['valid_loss']:.3f} nats/token (windows; the full split is below)"),
            ("training speed", f"{speed:,.0f} tokens/s (median), {run['precision']}, "
                               f"{env['torch_threads']} torch thread(s)"),
            ("wall time", f"{machine['wall_hours']:.1f} h" if machine.get("wall_hours") else "-"),
            ("machine", f"{machine.get('cpu', {}).get('model', '?')}, {env.get('cpu_count')} cores "
                        f"({', '.join(machine.get('cpu', {}).get('isa', [])) or '?'}), {run['device']}"),
            ("software", f"torch {env.get('torch')}, python {env.get('python')}, cadenza {env.get('cadenza')}"),
            ("code commit", f"`{env.get('git_commit', '?')[:12]}`"),
            ("data fingerprint", f"`{run['data_fingerprint'][:16]}`"),
            ("shipped weights", f"fp16, {(SHIPPED / 'model.safetensors').stat().st_size / 1e6:.1f} MB")]
    return ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]


def eval_table() -> list[str]:
    nll_path, ev_path = RESULTS / "valid-nll.json", RESULTS / "styles-eval.json"
    nll, ev = _read(nll_path), _read(ev_path)
    if nll is None or ev is None:
        return _missing("benchmarks/results/styles/valid-nll.json and styles-eval.json")
    n, s = nll["nll"], ev["styles"]
    clf, g = s["classifier"], s["settings"]["guidance"]
    out = [f"| style | valid NLL (nats/token) | classifier on real test pieces | style accuracy, guidance {g:g} | "
           "without guidance | overlap with real | real-vs-real ceiling | longest copied run (median / max tokens) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for style, r in s["styles"].items():
        mem = r["memorisation"]
        out.append(f"| {style} | {n['per_style'][style]:.3f} | {clf['per_style'][style]:.0%} | "
                   f"{r['accuracy_guided']:.0%} | {r['accuracy_plain']:.0%} | {r['overlap']:.2f} | "
                   f"{r['ceiling']:.2f} | "
                   f"{mem['median']} / {mem['max']} |")
    out.append(f"| **all** | **{n['nll_nats']:.3f}** ({n['tokens']:,} tokens) | **{clf['accuracy']:.1%}** "
               f"(balanced {clf['balanced_accuracy']:.1%}) | **{s['style_accuracy_guided']:.1%}** | "
               f"{s['style_accuracy_plain']:.1%} | | {s['overlap_vs_ceiling']:.0%} of the ceiling | |")
    out += ["", _source(nll, nll_path) + "<br>", _source(ev, ev_path), "",
            f"{s['settings']['per_style']} samples of {s['settings']['seconds']:g} s per style and guidance; the "
            f"classifier was trained on {clf['train_excerpts']:,} excerpts of training pieces and tested on "
            f"{clf['test_pieces']:,} test pieces.", "",
            f"* Classifier accuracy on real test pieces >= {CLASSIFIER_GOAL:.0%}: "
            f"{_met(clf['accuracy'] >= CLASSIFIER_GOAL)} ({clf['accuracy']:.1%}).",
            f"* Style accuracy of generated samples, averaged over styles, with guidance >= {STYLE_GOAL:.0%}: "
            f"{_met(s['style_accuracy_guided'] >= STYLE_GOAL)} ({s['style_accuracy_guided']:.1%}; without guidance "
            f"{s['style_accuracy_plain']:.1%}).",
            f"* Generated-vs-real overlap >= {OVERLAP_GOAL:.0%} of the real-vs-real ceiling on average: "
            f"{_met(s['overlap_vs_ceiling'] >= OVERLAP_GOAL)} ({s['overlap_vs_ceiling']:.0%})."]
    return out


def anticipation_table() -> list[str]:
    path = ROOT / "benchmarks" / "results" / "anticipation" / "anticipation.json"
    if (r := _read(path)) is None:
        return _missing("benchmarks/results/anticipation/anticipation.json")
    out = ["| style | real p99.9 duration | notes longer, old | notes longer, new | closed by the cap, old | "
           "nats per note, old | nats per note, new |", "|---|---:|---:|---:|---:|---:|---:|"]
    like = r.get("likelihood", {})
    for style, d in r.get("durations", {}).items():
        nats = [f"{like[m]['per_style'].get(style, float('nan')):.2f}" if m in like else "-" for m in ("old", "new")]
        out.append(f"| {style} | {d['real_p999_seconds']:.2f} s | {d['old']['longer_than_real_p999']:.1%} | "
                   f"{d['new']['longer_than_real_p999']:.1%} | {d['old']['closed_by_cap']:.1%} | {' | '.join(nats)} |")
    if like:
        old, new = like["old"]["nats_per_note"], like["new"]["nats_per_note"]
        out.append(f"| **all** | | | | | **{old:.3f}** | **{new:.3f}** |")
    out += ["", _source(r, path), ""]
    out += [f"* {name.replace('_', ' ')}: {_met(g['met'])} ({short_value(g['value'])}; goal: {g['goal']})."
            for name, g in r.get("goals", {}).items()]
    return out


def short_value(v) -> str:
    """A goal's value for a line of text: a number to 3 digits, a pair as "a vs b"."""
    if isinstance(v, list):
        return " vs ".join(short_value(x) for x in v)
    return f"{v:.3g}" if isinstance(v, float) else str(v)


PILOTS = {"a": "notes, given notes 1 s early (today's)", "b": "notes, given notes 10 ms early (at their onset)",
          "c": "metrical, given notes at their position", "d": "metrical, + the next bar's given notes (lookahead)",
          "e": "d, + Bach transposed within its range (+-6)"}


def _infill_cell(inf: dict) -> str:
    if inf["spans"] < 30:  # too few spans could be cut to say anything
        return f"- ({inf['spans']} span{'s' * (inf['spans'] != 1)} scorable)"
    last = inf.get("last_bar")
    tail = f", last bar {last['share_lower_with_suffix']:.0%}" if last else ""
    return f"{inf['share_lower_with_suffix']:.0%} ({inf['unit']}{tail})"


def pilots_table() -> list[str]:
    """One row per pilot arm: accompaniment of held-out melodies (as written, then moved and played
    at another tempo), the teacher-forced melody gain, infilling."""
    folder = ROOT / "benchmarks" / "results" / "pilots"
    rows = []
    for arm, what in PILOTS.items():
        acc, inf = _read(folder / f"{arm}-accompany.json"), _read(folder / f"{arm}-infill.json")
        live = _read(folder / f"{arm}-accompany-live.json")
        if acc is None:
            continue
        by = acc["by_variation"]
        plain = by.get("+0 st, x1", acc["generated"])
        moved = [v for k, v in by.items() if k != "+0 st, x1"]
        moved_c = statistics.mean(v["consonant"] for v in moved) if moved else float("nan")
        follows = (inf or {}).get("follows", {}).get("mean_rise")
        live_c = "-" if live is None else f"{live['generated']['consonant']:.0%} / {acc['generated']['consonant']:.0%}"
        rows.append(f"| {arm} | {what} | {plain['consonant']:.0%} / {moved_c:.0%} | {live_c} | "
                    f"{plain['synchrony']:.0%} | "
                    f"{plain['same_key']:.0%} / {plain.get('piece_key', float('nan')):.0%} | "
                    f"{acc['melody_returned']}/{acc['accompaniments']} | "
                    f"{acc['melody_gain']['gain']:+.2f} | "
                    + (_infill_cell(inf) if inf else "-")
                    + f" | {'-' if follows is None else f'{follows:+.2f}'} |")
    if not rows:
        return _missing("benchmarks/results/pilots/")
    real = acc["real"]
    return ["| arm | vocabulary | consonance, as written / moved | consonance live / looking ahead | synchrony | "
            "key: the melody's / the piece's | "
            "melody returned | "
            "melody gain (nats/note) | infill: likelier with the suffix | fill follows a moved suffix |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|", *rows,
            f"| real | the held-out chorales | {real['consonant']:.0%} | | {real['synchrony']:.0%} | "
            f"{real['same_key']:.0%} / 100% | | | | |", "",
            f"<sub>`python benchmarks/bench_accompany.py ...` and `bench_infill.py ...` per arm (the commands are "
            f"in each file) · {acc.get('cpu', {}).get('model', '')} · "
            f"[benchmarks/results/pilots/](../benchmarks/results/pilots/)</sub>"]


TABLES = {"styles-data": data_table, "styles-training": training_table, "styles-eval": eval_table,
          "styles-anticipation": anticipation_table, "pilots": pilots_table}
