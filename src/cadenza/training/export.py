"""A trained run's checkpoint as a shipped model folder (`cadenza.models.zoo`): what
tools/ship_model.py calls to put a model in the package."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from safetensors.torch import save_model

from cadenza.atomic import atomic_dir, write_json
from cadenza.models import checkpoint as ckpt


def export(checkpoint: str | os.PathLike, dest: str | os.PathLike, fp16: bool = True,
           extra_files: dict[str, dict] | None = None, meta: dict | None = None) -> Path:
    """A checkpoint as a self-contained model folder: weights (fp16 by default, half the size),
    ``checkpoint.json`` with their checksum, and the run's ``run.json`` and ``metrics.jsonl``;
    `extra_files` are JSON documents written beside them (e.g. the style classifier), `meta` entries
    added to ``checkpoint.json`` (e.g. data statistics a run made by an older cadenza lacks)."""
    extra_meta = meta or {}
    step_dir = ckpt.resolve(checkpoint)
    loaded = ckpt.load(step_dir)
    run_dir = step_dir.parent.parent
    meta = {**{k: v for k, v in loaded.meta.items() if k not in ("files", "path")}, **extra_meta}
    model = loaded.model
    with atomic_dir(dest) as tmp:
        save_model(model.half() if fp16 else model, str(tmp / "model.safetensors"))
        for name in ("run.json", "metrics.jsonl"):
            if (run_dir / name).is_file():
                shutil.copyfile(run_dir / name, tmp / name)
        for name, doc in (extra_files or {}).items():
            write_json(tmp / name, doc)
        meta.update({"dtype": "float16" if fp16 else "float32",
                     "exported_from": {"step": meta["step"], "checkpoint": step_dir.name},
                     "files": {"model.safetensors": ckpt.fingerprint(tmp / "model.safetensors")}})
        write_json(tmp / "checkpoint.json", meta)
    return Path(dest)
