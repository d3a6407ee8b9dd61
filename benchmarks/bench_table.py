"""Collect `cadenza bench` results (RUN/bench.json) into the markdown table of docs/benchmarks.md.

    python benchmarks/bench_table.py runs/jsb-* runs/nott-* runs/jsb16-*

One row per run: data set, test and valid NLL, the published number to beat, seed, steps,
wall time, hardware and the exact command that produced it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cadenza.bench import jsb16, polyphonic

_NADE = "RNN-NADE (Boulanger-Lewandowski et al. 2012)"
TARGET = {key: ("RNN-NADE", polyphonic.PUBLISHED[_NADE][key]) for key in polyphonic.DATASETS}
TARGET["jsb16"] = ("Music Transformer (valid)", jsb16.PUBLISHED["Music Transformer (Huang et al. 2018)"]["valid"])


def row(run: Path) -> str:
    r = json.loads((run / "bench.json").read_text())
    cfg = json.loads((run / "config.json").read_text())
    name, target = TARGET[r["dataset"]]
    unit = "token" if r["dataset"] == "jsb16" else "frame"
    label = polyphonic.LABELS.get(r["dataset"], "JSB 16th")
    minutes = r.get("train_minutes", float("nan"))
    t = cfg["train"]
    return (f"| {label} | **{r['test']:.3f}** | {r['valid']:.3f} | {name} {target} nats/{unit} | {r['model']}, "
            f"dropout {cfg['model']['dropout']}, transpose ±{t['transpose']} | {r['seed']} | {r['step']} "
            f"(of {r.get('steps', '?')}) | {minutes:.0f} min | {r['hardware']} | `{r['command']}` |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    a = ap.parse_args(argv)
    print("| data set | test NLL | valid NLL | to beat | model | seed | best step (of steps) | wall | hardware | command |")
    print("|---|---:|---:|---|---|---:|---:|---:|---|---|")
    for run in a.runs:
        if (run / "bench.json").exists():
            print(row(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
