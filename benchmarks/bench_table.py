"""Build the result tables of docs/benchmarks.md and docs/models.md from the committed result files.

    python benchmarks/bench_table.py            # print every table
    python benchmarks/bench_table.py --check    # exit 1 if a doc differs from what the files say
    python benchmarks/bench_table.py --write    # rewrite the tables in the docs

A doc marks each table with `<!-- table:NAME -->` ... `<!-- /table -->`; everything between the two
markers is generated from `benchmarks/results/**.json` (and the published figures below), so a
number in a table always has a file behind it. Benchmark runs are kept with `keep_run.py`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCS = (ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "models.md")
MARKER = re.compile(r"(<!-- table:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)

# Published figures (the papers') and this project's own goals; everything else comes from files.
PUBLISHED = {"jsb": ("RNN-NADE", 5.19), "nottingham": ("RNN-NADE", 2.31), "musedata": ("RNN-NADE", 5.60),
             "piano": ("RNN-NADE", 7.05), "jsb16": ("Music Transformer (valid split)", 0.335)}
OTHERS = {"jsb": {"TCN (Bai et al. 2018)": 8.10, "LSTM (Bai et al. 2018)": 8.45},
          "nottingham": {"TCN (Bai et al. 2018)": 3.07, "LSTM (Bai et al. 2018)": 3.29}}
LABELS = {"jsb": "JSB Chorales", "nottingham": "Nottingham", "musedata": "MuseData", "piano": "Piano-midi",
          "jsb16": "JSB Chorales 16th"}
UNITS = {"jsb16": "nats/token"}
TOKENIZE_GOAL = 20.0          # x MidiTok on the Bach chorales
TRAIN_GOALS = {"fp32": 1.2, "bf16": 1.5}  # rope vs HF GPT-2
MEMORY_GOAL = 1.2             # relative peak memory vs rope
GENERATE_GOAL = 4.0           # x HF generate, batch 1 and 8


def fmt(key: str, x: float) -> str:
    return f"{x:.3f}" if key == "jsb16" else f"{x:.2f}"


def load(sub: str) -> list[tuple[Path, dict]]:
    folder = RESULTS / sub
    return [(p, json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def newest(sub: str) -> tuple[Path, dict] | None:
    """The last result file of a speed benchmark (sorted by name), or None."""
    files = load(sub)
    return files[-1] if files else None


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def cpu(r: dict) -> str:
    c = r.get("cpu", {})
    isa = [f for f in c.get("isa", []) if f.startswith(("avx", "amx"))]
    threads = r.get("torch_threads", r.get("torch_threads_per_job"))
    threads = f"{threads} torch thread" + ("" if threads == 1 else "s")
    return f"{c.get('model', '?')}, {c.get('cores', '?')} cores ({', '.join(isa) or 'no AVX'}), {threads}"


def provenance(path: Path, r: dict) -> str:
    return (f"<sub>`{r.get('command', '?')}` · {cpu(r)} · commit {str(r.get('code_commit') or '?')[:7]} · "
            f"[{path.name}]({'../' + rel(path)})</sub>")


def met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def missing(what: str) -> list[str]:
    return [f"*No result file yet ({what}).*"]


def tokenize_table() -> list[str]:
    files = load("tokenize")
    if not files:
        return missing("benchmarks/results/tokenize/")
    out = ["| files | tokenizer | files/s | notes/s | vs MidiTok MIDILike |", "|---|---|---:|---:|---:|"]
    for _, r in files:
        for i, row in enumerate(r["rows"]):
            first = f"{r['label']}, {r['files']:,} files, {r['notes']:,} notes" if i == 0 else ""
            out.append(f"| {first} | {row['tokenizer']} | {row['files_per_s']:,.0f} | {row['notes_per_s']:,.0f} | "
                       f"{row['vs_miditok']:.1f}x |")
    out.append("")
    out += [provenance(p, r) + "<br>" for p, r in files]
    bach = [r for _, r in files if "Bach" in r["label"]]
    if bach:
        ratio = max(row["vs_miditok"] for row in bach[0]["rows"])
        out += ["", f"Goal: >= {TOKENIZE_GOAL:.0f}x MidiTok on the Bach chorales: {met(ratio >= TOKENIZE_GOAL)} "
                    f"({ratio:.1f}x)."]
    return out


def train_table() -> list[str]:
    if (found := newest("train")) is None:
        return missing("benchmarks/results/train/")
    path, r = found
    out = ["| precision | model | tokens/s | vs HF | MFU |", "|---|---|---:|---:|---:|"]
    hf = {row["precision"]: row["tokens_per_s"] for row in r["rows"] if row["model"].startswith("HF")}
    for row in r["rows"]:
        # An LSTM's FLOP count is not comparable with a transformer's, so it gets no MFU.
        mfu = f"{row['mfu'] * 100:.0f}%" if row.get("mfu") and "lstm" not in row["model"].lower() else ""
        out.append(f"| {row['precision']} | {row['model']} | {row['tokens_per_s']:,.0f} | "
                   f"{row['tokens_per_s'] / hf[row['precision']]:.2f}x | {mfu} |")
    out += ["", provenance(path, r), ""]
    peaks = sorted({(row["precision"], row["peak_gflops"]) for row in r["rows"] if row.get("peak_gflops")})
    if peaks:
        out.append("Matmul peak measured in the same run: " + ", ".join(f"{p} {g:,.0f} GFLOP/s" for p, g in peaks)
                   + f"; batch {r['batch']}, context {r['context']}, median of {r['steps']} steps.")
    for prec, goal in TRAIN_GOALS.items():
        rope = [row for row in r["rows"] if row["precision"] == prec and "rope" in row["model"]]
        if rope:
            ratio = rope[0]["tokens_per_s"] / hf[prec]
            out.append(f"Goal: rope >= {goal}x HF in {prec}: {met(ratio >= goal)} ({ratio:.2f}x).")
        else:
            why = "; ".join(s for s in r.get("skipped", []) if s.startswith(prec)) or "not run"
            out.append(f"Goal: rope >= {goal}x HF in {prec}: not measured here ({why}).")
    return out


def memory_table() -> list[str]:
    files = [(p, r) for p, r in load("train") if r.get("memory", {}).get("rows")]
    if not files:
        return missing("the memory rows of benchmarks/results/train/")
    path, r = files[-1]
    m = r["memory"]
    rope = next(x["peak_mb"] for x in m["rows"] if x["attention"] == "rope")
    out = [f"One training step at context {m['context']}, batch {m['batch']}, fp32, each in a fresh process:", "",
           "| attention | peak MB | vs rope |", "|---|---:|---:|"]
    out += [f"| {x['attention']} | {x['peak_mb']:,.0f} | {x['peak_mb'] / rope:.2f}x |" for x in m["rows"]]
    ratio = next(x["peak_mb"] for x in m["rows"] if x["attention"] == "relative") / rope
    out += ["", provenance(path, r), "", f"Goal: relative within {MEMORY_GOAL}x of rope: {met(ratio <= MEMORY_GOAL)} "
                                         f"({ratio:.2f}x)."]
    return out


def generate_table(vocab: str = "performance") -> list[str]:
    """The newest generate run on `vocab` (files from before `--vocab` ran the performance one)."""
    runs = [(p, r) for p, r in load("generate")
            if r.get("benchmark", "generate") == "generate" and r.get("vocab", "performance") == vocab]
    if not runs:
        return missing(f"benchmarks/results/generate/, --vocab {vocab}")
    path, r = runs[-1]
    batches = [str(b) for b in r["batches"]]
    out = ["| generator | " + " | ".join(f"batch {b} tok/s | vs HF" for b in batches) + " |",
           "|---|" + "---:|---:|" * len(batches)]
    for row in r["rows"]:
        out.append(f"| {row['generator']} | " + " | ".join(
            f"{row['tokens_per_s'][b]:,.0f} | {row['vs_hf'][b]:.2f}x" for b in batches) + " |")
    # The goal is the fast path's, judged for each attention it serves (the shipped models use
    # relative attention), not for the best row alone.
    fast = [row for row in r["rows"] if row["generator"].startswith("cadenza") and "compiled" in row["generator"]
            and not row["generator"].endswith("Inductor attention")]  # the kernel's ablation is not judged
    fast = fast or [row for row in r["rows"] if row["generator"].startswith("cadenza")]  # files from before it
    verdict = "; ".join(f"batch {b}: " + ", ".join(
        f"{row['generator'].removeprefix('cadenza ')} {met(row['vs_hf'][b] >= GENERATE_GOAL)} ({row['vs_hf'][b]:.2f}x)"
        for row in fast) for b in batches)
    named = f"The {vocab} vocabulary ({r['vocab_size']} ids), " if "vocab" in r else ""
    out += ["", provenance(path, r), "", f"{named}{r['new_tokens']} new tokens, median of {r['repeats']} repeats. "
            f"Goal: >= {GENERATE_GOAL:.0f}x HF at batch " + " and ".join(batches) + f". {verdict}."]
    if r.get("load_average"):  # files from before it do not say
        out[-1] += (" Load average (1 min) before and after each batch size: "
                    + ", ".join(f"{x:.2f}" for x in r["load_average"]) + ".")
    if r.get("compile"):
        out += ["", "Compiled step, first token (build, load, prompt, one step): "
                + "; ".join(f"{k}: {c['first_token_cold_s']:.0f} s with an empty cache, "
                            f"{c['first_token_warm_s']:.2f} s from the disk cache in a new process"
                            for k, c in r["compile"].items()) + "."]
    if r.get("step_profile"):
        p = r["step_profile"]
        read = p.get("cache_read_ms", {})  # files from before it have only the step
        out += ["", "Compiled step alone" + (" (in brackets: reading its filled KV cache once with a plain sum)"
                                             if read else "") + ": "
                + "; ".join(f"{k}: {v:.2f} ms" + (f" ({read[k]:.2f} ms)" if k in read else "")
                            for k, v in p["step_ms"].items())
                + f". Memory bandwidth (a 64 MB copy, bytes read and written): {p['copy_gb_per_s']:.1f} GB/s."]
    return out


def onnx_table() -> list[str]:
    if (found := newest("onnx")) is None:
        return missing("benchmarks/results/onnx/")
    path, r = found
    names = list(r["results"][0]["rows"][0]["ms"])
    out = ["| step | " + " | ".join(f"{n}, ms" for n in names) + " | largest logit error (ONNX Runtime) |",
           "|---|" + "---:|" * len(names) + "---:|"]
    for res in r["results"]:
        for row in res["rows"]:
            err = max(v for k, v in row["max_abs_error"].items() if k.startswith("onnx"))
            out.append(f"| {res['attention']}, batch {res['batch']}, {row['cached']} cached | "
                       + " | ".join(f"{row['ms'][n]:.2f}" for n in names) + f" | {err:.1e} |")
    return out + ["", f"ONNX Runtime {r['onnxruntime']}, median of 5 x 40 calls.", "", provenance(path, r)]


def serve_table() -> list[str]:
    if (found := newest("serve")) is None:
        return missing("benchmarks/results/serve/")
    path, r = found
    s, c = r["solo"], r["crowd"]
    rss = c["rss_mb_before_and_after_each_round"]
    out = ["| measure | value |", "|---|---:|",
           f"| server start (process to first answer) | {r['server_start_seconds']:.1f} s |",
           f"| batch 1: time to first note, median | {s['first_note_median'] * 1000:,.0f} ms |",
           f"| batch 1: music seconds per wall second, median | {s['realtime_factor_median']:.1f}x |",
           f"| {c['jobs']:,} jobs from {r['clients']} clients: latency p50 / p95 | {c['latency_p50']:.2f} s / "
           f"{c['latency_p95']:.2f} s |",
           f"| throughput | {c['jobs_per_s']:.2f} jobs/s |",
           f"| errors | {c['errors']} |"]
    if mem := c.get("memory"):  # a long run: the resident level and how fast it still grows
        out += [f"| server RSS at start / after the first round / at the end | {rss[0]:,.1f} / {rss[1]:,.1f} / "
                f"{rss[-1]:,.1f} MB |",
                f"| RSS over the last half ({mem['last_half_rounds']} rounds): level, median | "
                f"{mem['level_mb']:,.1f} MB |",
                f"| RSS over the last half: growth | {mem['last_half_slope_kb_per_job']:+.2f} KB a job, "
                f"{mem['last_half_added_mb']:+.2f} MB in all |"]
    else:
        out.append(f"| server RSS before and after each round | {' / '.join(f'{x:,.1f}' for x in rss)} MB |")
    return out + ["", f"Model `{r['model']}`, {r['seconds_per_job']:g} s of music per job.", "", provenance(path, r)]


def kept_runs() -> dict[str, list[tuple[Path, dict]]]:
    return {key: load(key) for key in PUBLISHED if load(key)}


def recipe(r: dict) -> str:
    """A run's command without its seed and output folder: runs that share it are seeds of one recipe."""
    cmd = re.sub(r"--(seed|out) \S+", "", r.get("command", ""))
    return re.sub(r"\s+", " ", re.sub(r"--data \S+", "", cmd)).strip()


def headline(runs: list[dict]) -> tuple[str, list[dict]]:
    """The recipe with the lowest mean validation NLL (the selection never looks at test)."""
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(recipe(r), []).append(r)
    best = min(groups, key=lambda k: (-min(len(groups[k]), 2), statistics.mean(x["valid"] for x in groups[k])))
    return best, groups[best]


def mean_sd(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}"


def summary_table() -> list[str]:
    runs = kept_runs()
    out = ["| data set | to beat | cadenza test NLL | valid NLL | seeds | goal | recipe |",
           "|---|---|---:|---:|---:|---|---|"]
    for key, (name, target) in PUBLISHED.items():
        if key not in runs:
            out.append(f"| {LABELS[key]} | {name} {fmt(key, target)} | - | - | 0 | no kept run | |")
            continue
        rec, group = headline([r for _, r in runs[key]])
        test = [r["test"] for r in group]
        gap = statistics.mean(test) - target
        verdict = met(gap < 0) + (f" ({-gap:.3f} below)" if gap < 0 else f" ({gap:.3f} above)")
        unit = UNITS.get(key, "nats/frame")
        out.append(f"| {LABELS[key]} | {name} {fmt(key, target)} {unit} | **{mean_sd(test)}** | "
                   f"{mean_sd([r['valid'] for r in group])} | {len(group)} | {verdict} | `{rec}` |")
    out += ["", "Each row is the recipe with the lowest mean validation NLL among the kept runs (recipes with two "
            "or more seeds first); the test split is scored once per run. Other published figures: "
            + "; ".join(f"{LABELS[k]}: " + ", ".join(f"{n} {v:.2f}" for n, v in o.items()) for k, o in OTHERS.items())
            + "."]
    return out


def runs_table() -> list[str]:
    runs = kept_runs()
    if not runs:
        return missing("benchmarks/results/<dataset>/")
    out = ["| data set | test NLL | valid NLL | model | seed | best step (of) | wall | CPU | command | file |",
           "|---|---:|---:|---|---:|---:|---:|---|---|---|"]
    for key, files in runs.items():
        for path, r in sorted(files, key=lambda pr: pr[1]["valid"]):
            c = r.get("config", {})
            extra = ", ".join(f"{k} {v}" for k, v in (("dropout", c.get("model", {}).get("dropout")),
                                                      ("transpose ±", c.get("train", {}).get("transpose"))) if v)
            model = r["model"] + (", " + extra if extra else "")
            out.append(f"| {LABELS[key]} | {r['test']:.3f} | {r['valid']:.3f} | {model}"
                       f" | {r['seed']} | {r['step']} ({r.get('steps', '?')}) | {r.get('train_minutes', 0):.0f} min | "
                       f"{cpu(r)} | `{r['command']}` | [{path.name}]({'../' + rel(path)}) |")
    notes = [f"* {r['run']}: {r['note']}." for files in runs.values() for _, r in files if r.get("note")]
    return out + (["", *notes] if notes else [])


TABLES = {"tokenize": tokenize_table, "train": train_table, "train-memory": memory_table,
          "generate": generate_table, "generate-notes": lambda: generate_table("notes"), "onnx": onnx_table,
          "serve": serve_table, "polyphonic-summary": summary_table, "polyphonic-runs": runs_table}


sys.path.insert(0, str(Path(__file__).resolve().parent))  # the model card's tables live beside this file
from card_tables import TABLES as CARD_TABLES  # noqa: E402

TABLES.update(CARD_TABLES)


def fill(text: str) -> str:
    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise SystemExit(f"bench_table: unknown table {name!r} (known: {', '.join(TABLES)})")
        return m.group(1) + "\n".join(TABLES[name]()) + "\n" + m.group(4)
    return MARKER.sub(sub, text)


def stale_docs(docs=DOCS) -> list[Path]:
    """The docs whose tables differ from what the result files say."""
    return [d for d in docs if d.exists() and fill(d.read_text()) != d.read_text()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if a doc's tables are out of date")
    mode.add_argument("--write", action="store_true", help="rewrite the tables in the docs")
    a = ap.parse_args(argv)
    if a.check:
        stale = stale_docs()
        for d in stale:
            print(f"{rel(d)}: tables differ from benchmarks/results; run python benchmarks/bench_table.py --write")
        return 1 if stale else 0
    if a.write:
        for d in DOCS:
            if d.exists():
                d.write_text(fill(d.read_text()))
                print(f"wrote {rel(d)}")
        return 0
    for name, fn in TABLES.items():
        print(f"<!-- table:{name} -->\n" + "\n".join(fn()) + "\n<!-- /table -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
