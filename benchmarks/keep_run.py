"""Keep the evidence of finished `cadenza bench` runs: RUN/bench.json and the run's resolved config
go, as one small JSON file, to benchmarks/results/<dataset>/<run name>.json (commit it).

    python benchmarks/keep_run.py runs/nott-s0 runs/nott-s1
    python benchmarks/bench_table.py --write     # then rebuild the tables of docs/benchmarks.md

Weights, stores and logs stay in the run folder; the file keeps what a reader needs to trust and
re-run the result: command, seed, code commit, CPU and its flags, threads, wall time, the validation
curve the checkpoint was selected on, and the valid and test NLL.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def keep(run: Path, results: Path = RESULTS) -> Path:
    bench = run / "bench.json"
    if bench.exists():
        r = json.loads(bench.read_text())
    elif (run / "bench-evaluate.json").exists():
        r = interrupted(run)
    else:
        raise SystemExit(f"{run}: no bench.json (the run has not finished: continue it with its command plus "
                         "--resume, or score its best checkpoint with `cadenza bench TASK --evaluate RUN`)")
    started = run / "run.json"
    if started.exists():  # the command that started the run is the one to re-run; a resume's goes beside it
        meta = json.loads(started.read_text())
        r["command"] = meta["command"]
        if meta.get("resumes"):
            r["resume_command"] = meta["resumes"][-1]["command"]
    config = run / "config.json"
    if config.exists():
        r["config"] = json.loads(config.read_text())
    # Only the checkpoint's name: the folder it lived in belongs to the machine that ran it.
    r["checkpoint"] = Path(r.get("checkpoint", "")).name
    r["run"] = run.name
    for key in ("command", "evaluate_command", "resume_command"):
        if key in r:
            r[key] = portable(r[key])
    out = results / r["dataset"] / f"{run.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(r, indent=1) + "\n")
    tmp.replace(out)
    return out


def portable(command: str) -> str:
    """The command with absolute paths written relative to the repository (``../shared/data/...``):
    the record is read on other machines, and the docs never name this one's folders. `--quiet`
    (no progress bars, for the queue's log files) is left out: it changes nothing in the result."""
    from _record import portable as relative

    return " ".join(relative(w) for w in command.split(" ") if w != "--quiet")


def interrupted(run: Path) -> dict:
    """A run stopped before its last step (a machine reset) and then scored with `--evaluate`: its
    bench-evaluate.json, with the training command and what happened said in the record."""
    r = json.loads((run / "bench-evaluate.json").read_text())
    r["evaluate_command"] = r["command"]  # `keep` puts the training command in its place
    last = 0
    with open(run / "metrics.jsonl") as f:
        for line in f:
            last = max(last, json.loads(line).get("step", 0))
    config = json.loads((run / "config.json").read_text())
    r["steps"] = config["train"]["max_steps"]
    step_dir = run / "checkpoints" / Path(r["checkpoint"]).name
    # from the run's own files: config.json is written at the start, the checkpoint at its step
    r["train_minutes"] = ((step_dir / "checkpoint.json").stat().st_mtime - (run / "config.json").stat().st_mtime) / 60
    r["note"] = (f"stopped at step {last} of {r['steps']} (the machine was reset); the best checkpoint by "
                 f"validation, step {r['step']}, scored with --evaluate")
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="finished bench run folders")
    a = ap.parse_args(argv)
    for run in a.runs:
        print(f"{run} -> {keep(run).relative_to(RESULTS.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
