"""`cadenza train`: parse flags into a RunConfig and call `cadenza.trainer.train`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EPILOG = """examples:
  cadenza train --data data/bach --out runs/bach --preset tiny --max-minutes 3
  cadenza train --data data/bach --out runs/bach --resume max_steps=4000
  cadenza train --data data/maestro --out runs/m --preset base --precision bf16 --grad-checkpoint
  torchrun --standalone --nproc_per_node 8 -m cadenza train --data data/maestro --out runs/m --preset base
settings not covered by a flag: key=value (model.d_model=384, lr=3e-4, batch_size=32, ...);
see `cadenza train --show-config` for all of them."""


def register(sub) -> None:
    p = sub.add_parser("train", help="train a model on a token store (CPU, GPU, or many GPUs via torchrun)",
                       description="Train a model on a token store made by `cadenza prepare`. The device and "
                                   "precision are chosen automatically unless given; checkpoints go to "
                                   "RUN/checkpoints, TensorBoard logs to RUN/tb.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="token store folder (from `cadenza prepare`)")
    p.add_argument("--out", help="run folder to write (checkpoints, logs, config)")
    p.add_argument("--preset", default=None, help="model/training preset: tiny (default), small, base, large")
    p.add_argument("--model", choices=["transformer", "lstm"], default=None)
    p.add_argument("--attention", choices=["relative", "rope", "absolute"], default=None,
                   help="relative = Music Transformer (default), rope = rotary on fused attention kernels")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default=None)
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
    p.add_argument("--config", default=None, help="a TOML or JSON file with [model] and [train] tables")
    p.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="any other setting")
    p.set_defaults(func=run)


def resolve_args(a: argparse.Namespace):
    from cadenza import config

    direct = {"model": a.model, "attention": a.attention, "precision": a.precision, "device": a.device,
              "max_steps": a.max_steps, "max_minutes": a.max_minutes, "batch_size": a.batch_size,
              "context": a.context, "grad_checkpoint": a.grad_checkpoint, "compile": a.compile,
              "deterministic": a.deterministic, "seed": a.seed}
    if a.resume:
        saved = Path(a.out or ".") / "config.json"
        if not saved.exists():
            raise FileNotFoundError(f"{saved}: not found; --resume needs a run folder made by `cadenza train`")
        base = json.loads(saved.read_text())
        d = config.apply_overrides(base, [f"{k}={json.dumps(v)}" for k, v in direct.items() if v is not None])
        d = config.apply_overrides(d, a.overrides)
        return config.RunConfig.from_dict(d).validate()
    return config.resolve(a.preset or "tiny", a.config, a.overrides, **direct)


def run(a: argparse.Namespace) -> int:
    cfg = resolve_args(a)
    if a.show_config:
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    if not a.data or not a.out:
        raise SystemExit("cadenza train: --data and --out are required (see --help)")
    from cadenza.trainer import train

    res = train(cfg, a.data, a.out, resume=a.resume, progress=not a.quiet)
    return 0 if res.step > 0 else 1
