"""Self-describing checkpoints that never unpickle: safetensors weights + JSON + plain tensors.

``RUN/checkpoints/step-000500/`` holds

* ``model.safetensors``: the unwrapped module's weights (no DDP ``module.`` or compile
  ``_orig_mod.`` prefixes; tied weights stored once);
* ``checkpoint.json``: model, tokenizer and training config, step, valid and best valid loss,
  library versions, git commit, the data manifest hash and the environment;
* ``state.pt``: optimizer, grad scaler and RNG states, tensors and plain containers only,
  loaded with ``torch.load(weights_only=True)``, so a malicious file cannot run code.

A checkpoint folder is built under a temporary name and renamed into place, so one that exists
is complete. Anything that needs a model (generate, evaluate, benchmarks) calls `load_model` with
a run folder, a checkpoints folder or a step folder and gets the model without any flags.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model as st_load_model
from safetensors.torch import save_model as st_save_model

from cadenza.atomic import atomic_dir, write_json
from cadenza.models import build_model
from cadenza.models.config import ModelConfig

FORMAT = "cadenza-checkpoint"
FORMAT_VERSION = 1
CKPT = "checkpoints"


class CheckpointError(RuntimeError):
    pass


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The plain module under DDP and torch.compile wrappers."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def step_dir_name(step: int) -> str:
    return f"step-{step:07d}"


def save_checkpoint(run_dir: str | os.PathLike, step: int, model, meta: dict[str, Any],
                    state: dict[str, Any] | None = None, keep_last: int = 2) -> Path:
    """Write checkpoint `step` atomically, then prune to the last `keep_last` plus the best."""
    root = Path(run_dir) / CKPT
    dest = root / step_dir_name(step)
    with atomic_dir(dest) as tmp:
        st_save_model(unwrap(model), str(tmp / "model.safetensors"))
        if state is not None:
            torch.save(state, tmp / "state.pt")
        write_json(tmp / "checkpoint.json", {"format": FORMAT, "format_version": FORMAT_VERSION,
                                             "step": step, **meta})
    prune(run_dir, keep_last)
    return dest


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    root = Path(run_dir) / CKPT
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        if d.name.startswith("step-") and (d / "checkpoint.json").exists() and (d / "model.safetensors").exists():
            try:
                out.append((int(d.name[5:]), d))
            except ValueError:
                continue
    return sorted(out)


def read_meta(step_dir: str | os.PathLike) -> dict[str, Any]:
    p = Path(step_dir) / "checkpoint.json"
    try:
        meta = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{p}: unreadable checkpoint metadata ({e})") from None
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a cadenza checkpoint")
    return meta


def best_checkpoint(run_dir) -> Path | None:
    scored = [(read_meta(d).get("valid_loss"), s, d) for s, d in list_checkpoints(run_dir)]
    scored = [x for x in scored if x[0] is not None]
    return min(scored, key=lambda x: (x[0], -x[1]))[2] if scored else None


def latest_checkpoint(run_dir) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1][1] if ckpts else None


def prune(run_dir, keep_last: int) -> None:
    ckpts = list_checkpoints(run_dir)
    best = best_checkpoint(run_dir)
    for _, d in ckpts[:-keep_last] if keep_last > 0 else []:
        if d != best:
            shutil.rmtree(d, ignore_errors=True)


def resolve(path: str | os.PathLike, prefer: str = "best") -> Path:
    """A step folder from a run folder (its best, else latest checkpoint), a checkpoints folder,
    or a step folder itself."""
    p = Path(path)
    if (p / "checkpoint.json").exists():
        return p
    run = p.parent if p.name == CKPT else p
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such checkpoint or run folder")
    found = (best_checkpoint(run) if prefer == "best" else None) or latest_checkpoint(run)
    if found is None:
        raise CheckpointError(f"{p}: no complete checkpoint found (train with `cadenza train --out {run}`)")
    return found


def load_weights(model: torch.nn.Module, step_dir: str | os.PathLike) -> None:
    """Load a checkpoint's weights into `model`, every tensor's name and shape checked."""
    step_dir = Path(step_dir)
    missing, unexpected = st_load_model(model, str(step_dir / "model.safetensors"), strict=False)
    missing = [m for m in missing if not _is_tied(model, m)]
    if unexpected or missing:
        raise CheckpointError(f"{step_dir}: weights do not match the model config "
                              f"(missing {missing[:3]}, unexpected {unexpected[:3]})")


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu", prefer: str = "best"):
    """Rebuild the model of a checkpoint from its JSON and load its weights. -> (model, meta)."""
    step_dir = resolve(path, prefer)
    meta = read_meta(step_dir)
    model = build_model(ModelConfig(**meta["config"]["model"]))
    load_weights(model, step_dir)
    model.to(device).eval()
    meta["path"] = str(step_dir)
    return model, meta


def _is_tied(model, name: str) -> bool:
    return name == "head.weight" and getattr(model.config, "tie_weights", False)


def load_state(step_dir: str | os.PathLike) -> dict[str, Any]:
    """Optimizer/scaler/RNG state; `weights_only=True` refuses anything but tensors and plain data."""
    p = Path(step_dir) / "state.pt"
    if not p.exists():
        raise CheckpointError(f"{p}: missing; this checkpoint cannot resume training")
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # an UnpicklingError for anything that is not plain data
        raise CheckpointError(f"{p}: refused to load ({type(e).__name__}: {str(e).splitlines()[0]}); "
                              "checkpoint state files may only hold tensors and plain data") from None


def resume(run_dir: str | os.PathLike, model: torch.nn.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    """Everything a run needs to continue: the newest checkpoint's weights loaded into `model`
    (names and shapes checked), and its (meta, training state)."""
    last = latest_checkpoint(run_dir)
    if last is None:
        raise FileNotFoundError(f"{run_dir}: nothing to resume (no complete checkpoint)")
    meta = read_meta(last)
    load_weights(model, last)
    meta["path"] = str(last)
    return meta, load_state(last)
