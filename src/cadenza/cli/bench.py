"""`cadenza bench polyphonic|jsb16`: train on the official split, select on valid, score test once."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_verb
from cadenza.env import PRECISIONS

EPILOG = """examples:
  cadenza bench polyphonic --dataset jsb --data JSB_Chorales.mat --out runs/jsb --max-minutes 20
  cadenza bench polyphonic --dataset jsb --data JSB_Chorales.mat --evaluate runs/jsb
  cadenza bench jsb16 --data Jsb16thSeparated.npz --out runs/jsb16
  cadenza bench jsb16 --data Jsb16thSeparated.npz --out runs/jsb16 --resume   (after an interruption)
data: the .mat files of Boulanger-Lewandowski et al. (2012) and Jsb16thSeparated.npz of Coconet;
see docs/benchmarks.md for where to get them."""

DIRECT = ("max_minutes", "max_steps", "transpose", "seed", "precision")


def register(sub) -> argparse.ArgumentParser:
    p = add_verb(sub, "bench", "reproduce the published polyphonic-music benchmarks",
                 "Train on a benchmark's official training split, select on its validation split, and report the "
                 "test NLL beside the published table.", epilog=EPILOG)
    p.add_argument("task", choices=["polyphonic", "jsb16"])
    p.add_argument("--dataset", choices=["jsb", "nottingham", "musedata", "piano"],
                   help="polyphonic: which data set (default: from the file name)")
    p.add_argument("--data", required=True, help="the benchmark's .mat / .npz file")
    p.add_argument("--out", help="run folder (its store, checkpoints and bench.json)")
    p.add_argument("--resume", action="store_true",
                   help="continue the interrupted run in --out from its last checkpoint, then score it")
    p.add_argument("--evaluate", metavar="RUN", help="score RUN's best checkpoint on the test split; no training")
    p.add_argument("--preset", default=None, help="default: the benchmark's 2-core CPU recipe (bench-<dataset>); "
                   "bench-jsb-lstm: JSB's headline LSTM; bench-gpu (piano rolls) and bench-jsb16-gpu are the "
                   "one-GPU recipes")
    p.add_argument("--config", default=None)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--transpose", type=int, default=None, help="+- semitones of augmentation (0 = none)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default=None, help="auto (cuda > mps > cpu), cpu, cuda, ... for training and scoring")
    p.add_argument("--precision", choices=PRECISIONS, default=None)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.set_defaults(func=run)
    return p


def run(a: argparse.Namespace) -> int:
    # lazy: benchmarks train and score with torch, which `cadenza --help` and the other verbs must not wait for
    from cadenza.bench.run import benchmark, task_module

    result = benchmark(a.task, a.data, a.out, evaluate=a.evaluate, dataset=a.dataset, preset=a.preset,
                       config_file=a.config, overrides=a.overrides, device=a.device, resume=a.resume,
                       progress=not a.quiet,
                       **{k: getattr(a, k) for k in DIRECT})
    mod, key = task_module(a.task), result["dataset"]
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
