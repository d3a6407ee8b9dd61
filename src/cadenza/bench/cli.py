"""`cadenza bench polyphonic|jsb16`: train on the official split, select on valid, score test once."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

EPILOG = """examples:
  cadenza bench polyphonic --dataset jsb --data JSB_Chorales.mat --out runs/jsb --max-minutes 20
  cadenza bench polyphonic --dataset jsb --data JSB_Chorales.mat --evaluate runs/jsb
  cadenza bench jsb16 --data Jsb16thSeparated.npz --out runs/jsb16
data: the .mat files of Boulanger-Lewandowski et al. (2012) and Jsb16thSeparated.npz of Coconet;
see docs/benchmarks.md for where to get them."""


def register(sub) -> None:
    p = sub.add_parser("bench", help="reproduce the published polyphonic-music benchmarks",
                       description="Train on a benchmark's official training split, select on its validation "
                                   "split, and report the test NLL beside the published table.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", choices=["polyphonic", "jsb16"])
    p.add_argument("--dataset", choices=["jsb", "nottingham", "musedata", "piano"],
                   help="polyphonic: which data set (default: from the file name)")
    p.add_argument("--data", required=True, help="the benchmark's .mat / .npz file")
    p.add_argument("--out", help="run folder (its store, checkpoints and bench.json)")
    p.add_argument("--evaluate", metavar="RUN", help="score RUN's best checkpoint on the test split; no training")
    p.add_argument("--preset", default=None, help="default: the benchmark's 2-core CPU recipe (bench-<dataset>); "
                   "bench-gpu (piano rolls) and bench-jsb16-gpu are the one-GPU recipes")
    p.add_argument("--config", default=None)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--transpose", type=int, default=None, help="+- semitones of augmentation (0 = none)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--precision", default=None)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.set_defaults(func=run)


def _module(task: str):
    from cadenza.bench import jsb16, polyphonic

    return polyphonic if task == "polyphonic" else jsb16


def run(a: argparse.Namespace) -> int:
    mod = _module(a.task)
    key = (a.dataset or mod.dataset_key(a.data)) if a.task == "polyphonic" else "jsb16"
    run_dir = Path(a.evaluate or a.out or "")
    if not (a.evaluate or a.out):
        raise SystemExit("cadenza bench: give --out RUN (train and score) or --evaluate RUN (score only)")
    store_dir = run_dir / "store"
    from cadenza.store import StoreError, TokenStore

    try:
        store = TokenStore(store_dir)
    except StoreError:
        store = mod.build_store(a.data, store_dir)
    t0 = time.time()
    train_info = {}
    if not a.evaluate:
        from cadenza.config import resolve
        from cadenza.trainer import train

        cfg = resolve(a.preset or f"bench-{key}", a.config, a.overrides, max_minutes=a.max_minutes,
                      max_steps=a.max_steps, transpose=a.transpose, seed=a.seed, device=a.device,
                      precision=a.precision)
        res = train(cfg, store_dir, run_dir, progress=not a.quiet, command=" ".join(["cadenza", *sys.argv[1:]]))
        train_info = {"steps": res.step, "stopped_by": res.stopped_by, "train_minutes": (time.time() - t0) / 60}
    result = score(run_dir, store, mod, key)
    result.update(train_info)
    result.update(evidence(run_dir))
    result["command"] = " ".join(["cadenza", *sys.argv[1:]])
    from cadenza.atomic import write_json

    write_json(run_dir / ("bench.json" if not a.evaluate else "bench-evaluate.json"), result)
    unit = "frame" if a.task == "polyphonic" else "token"
    print(f"\n{key}: test NLL {result['test']:.4f} nats/{unit} (valid {result['valid']:.4f}); "
          f"checkpoint step {result['step']}, seed {result['seed']}")
    row = {"model": f"cadenza ({result['model']})", key: result["test"]}
    if a.task == "jsb16":
        row.update({"valid": result["valid"], "test": result["test"]})
        print(mod.format_table([row]))
    else:
        print(mod.format_table([row], datasets=[key]))
    return 0


def score(run_dir: Path, store, mod, key: str, device: str = "cpu") -> dict:
    """Best checkpoint (by validation loss) scored on valid and test, each exactly once."""
    import torch

    from cadenza import checkpoint as ckpt
    from cadenza.evaluate import token_nll

    dev = "cuda" if torch.cuda.is_available() else device
    model, meta = ckpt.load_model(run_dir, dev, prefer="best")
    out = {"dataset": key, "checkpoint": meta["path"], "step": meta["step"],
           "seed": meta["config"]["train"]["seed"], "transpose": meta["config"]["train"]["transpose"],
           "model": _describe(meta["config"]["model"]), "hardware": _hardware(dev)}
    for split in ("valid", "test"):
        nll = token_nll(model, store, split, device=dev)
        s = mod.score_split(store, nll.per_piece, split)
        out[split] = s.nll
        out[f"{split}_token_nll"] = nll.nll
    return out


def evidence(run_dir: Path) -> dict:
    """What a reader needs to trust and re-run a result: the validation curve the checkpoint was
    selected on, the code commit, the CPU with its instruction-set flags, threads and versions."""
    import torch

    from cadenza.env import cpu_info, git_commit, library_versions

    curve = []
    log = run_dir / "metrics.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a crash
                continue
            if "valid_loss" in rec:
                curve.append([rec["step"], round(rec["valid_loss"], 5)])
    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    env = run.get("environment", {})
    return {"valid_curve": curve, "code_commit": env.get("git_commit") or git_commit(),
            "cpu": cpu_info(), "torch_threads": torch.get_num_threads(),
            "versions": library_versions(("cadenza", "torch", "numpy"))}


def _describe(m: dict) -> str:
    if m["model"] == "lstm":
        return f"lstm {m['lstm_layers']}x{m['lstm_hidden']}"
    return f"{m['attention']} transformer {m['n_layers']}x{m['d_model']}"


def _hardware(dev: str) -> str:
    import os

    import torch

    if dev.startswith("cuda"):
        return torch.cuda.get_device_name(0)
    # Two runs sharing a machine each get fewer threads, and the wall time depends on it.
    return (f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores, "
            f"{torch.get_num_threads()} torch threads")


def load_results(paths) -> list[dict]:
    return [json.loads(Path(p).read_text()) for p in paths]
