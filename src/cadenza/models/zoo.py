"""Models shipped inside the package, ready to sample without training (`cadenza models`).

Each is a checkpoint folder (fp16 ``model.safetensors`` + ``checkpoint.json``, which carries the
model and tokenizer configs and the styles) with the run's ``run.json`` beside it, and its training
log ``metrics.jsonl`` in the repository but not in the wheel; its model card is docs/models.md.
`cadenza.models.checkpoint.load` takes their names; `cadenza.training.export` makes them.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

DEFAULT = "styles"  # what `cadenza generate` plays without --checkpoint


def shipped_root() -> Path:
    return Path(str(resources.files("cadenza.models") / "shipped"))


def list_models() -> list[dict]:
    """Each shipped model: name, styles, parameters, steps, valid NLL, path."""
    out = []
    root = shipped_root()
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        meta_path = folder / "checkpoint.json"
        if not meta_path.is_file():
            continue
        meta = json.loads(meta_path.read_text())
        out.append({"name": folder.name, "styles": meta["tokenizer"].get("styles", []), "step": meta["step"],
                    "parameters": meta.get("parameters"), "valid_loss": meta.get("best_valid_loss"),
                    "path": str(folder)})
    return out


def resolve_model(name_or_path: str | os.PathLike) -> Path:
    """A path as it is; a shipped model's name as its folder."""
    p = Path(name_or_path)
    if p.exists():
        return p
    folder = shipped_root() / str(name_or_path)
    if (folder / "checkpoint.json").is_file():
        return folder
    names = [m["name"] for m in list_models()]
    raise FileNotFoundError(f"{name_or_path}: no such run or checkpoint folder, and not a shipped model "
                            f"({', '.join(names) or 'none shipped'}; see `cadenza models`)")
