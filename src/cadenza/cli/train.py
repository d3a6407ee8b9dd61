"""`cadenza train`: flags -> a RunConfig -> `cadenza.train`."""

from __future__ import annotations

import argparse
import json
import sys

from cadenza.cli.common import add_verb
from cadenza.env import PRECISIONS

EPILOG = """examples:
  cadenza train --data data/bach --out runs/bach --preset tiny --max-minutes 3
  cadenza train --out runs/bach --resume max_steps=4000
  cadenza train --init styles --data data/mine --out runs/mine --preset finetune   # your style, in minutes
  cadenza train --data data/maestro --out runs/m --preset base --precision bf16 --grad-checkpoint
  torchrun --standalone --nproc_per_node 8 -m cadenza train --data data/maestro --out runs/m --preset base
settings not covered by a flag: key=value (model.d_model=384, lr=3e-4, batch_size=32, ...);
see `cadenza train --show-config` for all of them."""

def register(sub) -> argparse.ArgumentParser:
    p = add_verb(sub, "train", "train a model on a token store (CPU, GPU, or many GPUs via torchrun)",
                 "Train a model on a token store made by `cadenza prepare`. The device and precision are chosen "
                 "automatically unless given; checkpoints go to RUN/checkpoints, TensorBoard logs to RUN/tb.",
                 epilog=EPILOG)
    p.add_argument("--data", help="token store folder (from `cadenza prepare`; with --resume: the run's own)")
    p.add_argument("--out", help="run folder to write (checkpoints, logs, config)")
    p.add_argument("--preset", default=None, help="model/training preset: tiny (default), small, base, large")
    p.add_argument("--model", choices=["transformer", "lstm"], default=None)
    p.add_argument("--attention", choices=["relative", "rope", "absolute"], default=None,
                   help="relative = Music Transformer (default), rope = rotary on fused attention kernels")
    p.add_argument("--precision", choices=PRECISIONS, default=None)
    p.add_argument("--device", default=None, help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--max-minutes", type=float, default=None, help="stop (and save) after this much wall time")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--context", type=int, default=None, help="tokens per training window")
    p.add_argument("--grad-checkpoint", action="store_true", default=None, help="recompute activations per block")
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--deterministic", action="store_true", default=None,
                   help="PyTorch deterministic algorithms (slower; see docs/reproducibility.md)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--init", help="start from this model (a run, a checkpoint, or a shipped model's name such as "
                                  "styles): its architecture and weights; new styles get new style tokens")
    p.add_argument("--config", default=None, help="a TOML or JSON file with [model] and [train] tables")
    p.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="any other setting")
    p.set_defaults(func=run)
    return p


def run(a: argparse.Namespace) -> int:
    from cadenza.training.config import resolve, setting_names
    from cadenza.training.trainer import train

    if a.resume and not a.out:
        raise ValueError("--resume needs --out, the run folder to continue")
    # flags named after a model or training setting override it (key=value overrides come last)
    direct = {k: v for k, v in vars(a).items() if k in setting_names()}
    cfg = resolve(a.preset or "tiny", a.config, a.overrides, run_dir=a.out if a.resume else None, **direct)
    if a.show_config:
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    if not a.out or not (a.data or a.resume):
        raise ValueError("--data and --out are required (see --help)")
    res = train(cfg, a.data, a.out, resume=a.resume, progress=not a.quiet)
    if res.stopped_by == "signal":  # saved cleanly; the exit code tells a script it did not finish
        import signal

        print(f"stopped by {signal.Signals(res.signal).name} after saving step {res.step} ({res.checkpoint}); "
              f"continue with: cadenza train --out {a.out} --resume", file=sys.stderr)
        return 128 + res.signal
    return 0 if res.step > 0 else 1
