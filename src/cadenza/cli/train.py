"""`cadenza train`: flags -> a RunConfig -> `cadenza.train`."""

from __future__ import annotations

import argparse
import json
import signal
import sys

from cadenza.cli.common import add_settings, add_verb

EPILOG = """examples:
  cadenza train --data data/bach --out runs/bach --preset tiny --max-minutes 3
  cadenza train --out runs/bach --resume max_steps=4000
  cadenza train --init styles --data data/mine --out runs/mine --preset finetune   # your style, in minutes
  cadenza train --data data/maestro --out runs/m --preset base --precision bf16 --grad-checkpoint
  torchrun --standalone --nproc_per_node 8 -m cadenza train --data data/maestro --out runs/m --preset base
every setting is also key=value (model.d_model=384, lr=3e-4, ...), applied after the flags;
`cadenza train --show-config` prints the resolved config."""


def register(sub) -> argparse.ArgumentParser:
    p = add_verb(sub, "train", "train a model on a token store (CPU, GPU, or many GPUs via torchrun)",
                 "Train a model on a token store made by `cadenza prepare`. The device and precision are chosen "
                 "automatically unless given; checkpoints go to RUN/checkpoints, TensorBoard logs to RUN/tb.",
                 epilog=EPILOG, settings=_settings)
    p.add_argument("--data", help="token store folder (from `cadenza prepare`; with --resume: the run's own)")
    p.add_argument("--out", help="run folder to write (checkpoints, logs, config)")
    p.add_argument("--preset", default=None, help="model/training preset: tiny (default), small, base, large")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--config", default=None, help="a TOML or JSON file with [model] and [train] tables")
    p.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="any setting (model.d_model=384, lr=3e-4)")
    p.set_defaults(func=run)
    return p


def _settings(p: argparse.ArgumentParser) -> None:
    """The flags of every model and training setting, added when `cadenza train` is parsed."""
    # lazy: the models package imports torch, which `cadenza --help` and the other verbs must not wait for
    from cadenza.models.config import ModelConfig
    from cadenza.training.config import TrainConfig

    add_settings(p, ModelConfig, "model settings", "Model and training settings override the preset (or the resumed "
                 "run's config);\na default shown is what applies where the preset says nothing.")
    add_settings(p, TrainConfig, "training settings")


def run(a: argparse.Namespace) -> int:
    # lazy: they import torch, which `cadenza --help` and the other verbs must not wait for
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
        print(f"stopped by {signal.Signals(res.signal).name} after saving step {res.step} ({res.checkpoint}); "
              f"continue with: cadenza train --out {a.out} --resume", file=sys.stderr)
        return 128 + res.signal
    return 0 if res.step > 0 else 1
