"""Self-describing checkpoints that never unpickle: safetensors weights + JSON + plain tensors.

``RUN/checkpoints/step-000500/`` holds

* ``model.safetensors``: the unwrapped module's weights (no DDP ``module.`` or compile
  ``_orig_mod.`` prefixes; tied weights stored once);
* ``checkpoint.json``: model, tokenizer and training config, step, valid and best valid loss,
  library versions, git commit, the data manifest hash, the environment, and the size and
  sha256 of each file, so a truncated or replaced file is caught before it is read (`verify`);
* ``state.pt``: optimizer, grad scaler and RNG states, tensors and plain containers only,
  loaded with ``torch.load(weights_only=True)``, so a malicious file cannot run code.

A checkpoint folder is built under a temporary name and renamed into place, so one that exists
is complete. Anything that needs a model (generate, evaluate, benchmarks) calls `load` with a run
folder, a checkpoints folder, a step folder or a shipped model's name and gets a `Checkpoint`: the
model, its tokenizer and the metadata, without any flags.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import load_model as st_load_model
from safetensors.torch import save_model as st_save_model

from cadenza.atomic import atomic_dir, write_json
from cadenza.data.tokenizers import Tokenizer, tokenizer_from_dict
from cadenza.models import build_model
from cadenza.models.config import ModelConfig
from cadenza.models.zoo import resolve_model

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
        files = {f.name: fingerprint(f) for f in (tmp / "model.safetensors", tmp / "state.pt") if f.exists()}
        write_json(tmp / "checkpoint.json", {"format": FORMAT, "format_version": FORMAT_VERSION,
                                             "step": step, **meta, "files": files})
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


def fingerprint(path: Path) -> dict[str, Any]:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return {"bytes": path.stat().st_size, "sha256": h.hexdigest()}


def verify(step_dir: str | os.PathLike) -> str | None:
    """Why a checkpoint folder cannot be trusted (missing, truncated, changed since it was saved, not
    safetensors), or None when it verifies against the checksums recorded at save time."""
    step_dir = Path(step_dir)
    try:
        meta = read_meta(step_dir)
    except CheckpointError as e:
        return str(e).split(": ", 1)[-1]
    for name, want in meta.get("files", {}).items():
        f = step_dir / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != want["bytes"]:
            return f"{name} is {f.stat().st_size:,} bytes, {want['bytes']:,} when it was saved: truncated or replaced"
        if fingerprint(f)["sha256"] != want["sha256"]:
            return f"{name} does not match the checksum recorded when it was saved"
    if "files" not in meta:  # written before checksums were recorded: at least parse the header
        try:
            with safe_open(str(step_dir / "model.safetensors"), "pt") as f:
                f.keys()
        except Exception as e:  # SafetensorError, OSError: the message is the reason
            return f"model.safetensors is not readable ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    return None


def last_good(run_dir: str | os.PathLike, before: Path | None = None) -> Path | None:
    """The newest checkpoint of a run that verifies (other than `before`)."""
    for _, d in reversed(list_checkpoints(run_dir)):
        if d != before and verify(d) is None:
            return d
    return None


def invalid(step_dir: Path, reason: str) -> CheckpointError:
    """The one-line error for a checkpoint that does not verify, naming the last good one."""
    run = step_dir.parent.parent if step_dir.parent.name == CKPT else step_dir.parent
    good = last_good(run, before=step_dir)
    hint = f"the last good one is {good}" if good else f"no other checkpoint in {run} verifies"
    return CheckpointError(f"{step_dir} is not a valid checkpoint ({reason}); {hint}")


def best_checkpoint(run_dir) -> Path | None:
    scored = [(_meta_or_none(d).get("valid_loss"), s, d) for s, d in list_checkpoints(run_dir)]
    scored = [x for x in scored if x[0] is not None]
    return min(scored, key=lambda x: (x[0], -x[1]))[2] if scored else None


def _meta_or_none(step_dir: Path) -> dict[str, Any]:
    try:
        return read_meta(step_dir)
    except CheckpointError:  # `load_model` / `resume` say what is wrong with it
        return {}


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
    """A step folder from a run folder (its best, else latest checkpoint), a checkpoints folder or a
    step folder itself (`load` also takes a shipped model's name)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such run or checkpoint folder")
    if (p / "checkpoint.json").exists():
        return p
    run = p.parent if p.name == CKPT else p
    found = (best_checkpoint(run) if prefer == "best" else None) or latest_checkpoint(run)
    if found is None:
        raise CheckpointError(f"{p}: no complete checkpoint found (train with `cadenza train --out {run}`)")
    return found


def load_weights(model: torch.nn.Module, step_dir: str | os.PathLike) -> None:
    """Load a checkpoint's weights into `model`, every tensor's name and shape checked."""
    step_dir = Path(step_dir)
    try:
        missing, unexpected = st_load_model(model, str(step_dir / "model.safetensors"), strict=False)
    except RuntimeError as e:  # a tensor of another shape: the config does not match the weights
        raise CheckpointError(f"{step_dir}: weights do not match the model config ({str(e).splitlines()[0]})") from None
    except Exception as e:  # SafetensorError and the like: not a weights file at all
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise invalid(step_dir, f"model.safetensors: {why}") from None
    missing = [m for m in missing if not _is_tied(model, m)]
    if unexpected or missing:
        raise CheckpointError(f"{step_dir}: weights do not match the model config "
                              f"(missing {missing[:3]}, unexpected {unexpected[:3]})")


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (in eval mode, on its device), the tokenizer it was trained
    with, and ``checkpoint.json`` (configs, step, losses, data statistics, environment)."""

    model: torch.nn.Module
    tokenizer: Tokenizer
    meta: dict[str, Any]

    @property
    def path(self) -> str:
        return self.meta["path"]

    @property
    def step(self) -> int:
        return self.meta["step"]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def load(name_or_path: str | os.PathLike, device: str | torch.device = "cpu", prefer: str = "best") -> Checkpoint:
    """The checkpoint of a run folder (its best, else latest), a checkpoints folder, a step folder
    or a shipped model's name: its model rebuilt from the JSON with the weights loaded (each
    verified against its checksum), and its tokenizer."""
    step_dir = resolve(resolve_model(name_or_path), prefer)
    reason = verify(step_dir)
    if reason:
        raise invalid(step_dir, reason)
    meta = read_meta(step_dir)
    model = build_model(ModelConfig(**meta["config"]["model"]))
    load_weights(model, step_dir)
    model.to(device).eval()
    meta["path"] = str(step_dir)
    return Checkpoint(model, tokenizer_of(meta), meta)


def load_tokenizer(name_or_path: str | os.PathLike, prefer: str = "best") -> Tokenizer:
    """A checkpoint's tokenizer alone, from its JSON (no weights read)."""
    return tokenizer_of(read_meta(resolve(resolve_model(name_or_path), prefer)))


def tokenizer_of(meta: dict[str, Any]) -> Tokenizer:
    """The tokenizer a checkpoint's metadata (``checkpoint.json``) describes: the only place one is
    rebuilt from it."""
    return tokenizer_from_dict(meta["tokenizer"])


def _is_tied(model, name: str) -> bool:
    """The embedding and the output head are one tensor when tied; safetensors stores it once."""
    return name in ("head.weight", "tok_emb.weight") and getattr(model.config, "tie_weights", False)


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


def resume_point(run_dir: str | os.PathLike) -> Path:
    """The checkpoint a run continues from: its newest that verifies. A newer one that does not (a
    crash mid-write, a damaged disk) is skipped, saying so."""
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise FileNotFoundError(f"{run_dir}: nothing to resume (no complete checkpoint)")
    newest = ckpts[-1][1]
    reason = verify(newest)
    step_dir = newest if reason is None else last_good(run_dir, before=newest)
    if step_dir is None:
        raise invalid(newest, reason)
    if step_dir != newest:
        print(f"warning: {newest} is not a valid checkpoint ({reason}); resuming from {step_dir}",
              file=sys.stderr)
    return step_dir


def load_grown(model: torch.nn.Module, step_dir: str | os.PathLike) -> list[str]:
    """Load a checkpoint into a model whose vocabulary has grown (new style tokens): the rows of
    the embedding and the output head that the checkpoint has are copied, the new rows keep their
    fresh initialisation. Every other tensor must match in name and shape. Returns the grown names."""
    step_dir = Path(step_dir)
    reason = verify(step_dir)
    if reason:
        raise invalid(step_dir, reason)
    saved, own, grown = load_file(str(step_dir / "model.safetensors")), model.state_dict(), []
    for name, value in saved.items():
        target = own.get(name)
        if target is None or target.shape[1:] != value.shape[1:] or target.shape[0] < value.shape[0]:
            raise CheckpointError(f"{step_dir}: {name} {tuple(value.shape)} does not fit the model "
                                  f"({None if target is None else tuple(target.shape)}); only the vocabulary may grow")
        if target.shape[0] > value.shape[0]:
            value = torch.cat([value.to(target.dtype), target[value.shape[0]:]])
            grown.append(name)
        saved[name] = value
    missing, _ = model.load_state_dict(saved, strict=False)
    missing = [m for m in missing if not _is_tied(model, m)]
    if missing:
        raise CheckpointError(f"{step_dir}: weights do not match the model config (missing {missing[:3]})")
    return grown
