"""Models shipped inside the package, ready to sample without training (`cadenza models`).

Each is a checkpoint folder (fp16 ``model.safetensors`` + ``checkpoint.json``, which carries the
model and tokenizer configs and the styles) with the run's ``run.json`` beside it, and its training
log ``metrics.jsonl`` in the repository but not in the wheel; its model card is docs/models.md.
"""

from __future__ import annotations

import json
import os
import shutil
from importlib import resources
from pathlib import Path

from safetensors.torch import save_model

from cadenza.atomic import atomic_dir, write_json
from cadenza.data.prepare import prepare
from cadenza.data.tokenizers import tokenizer_from_dict
from cadenza.models import checkpoint as ckpt

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


def export(checkpoint: str | os.PathLike, dest: str | os.PathLike, fp16: bool = True,
           extra_files: dict[str, dict] | None = None, meta: dict | None = None) -> Path:
    """A checkpoint as a self-contained model folder: weights (fp16 by default, half the size),
    ``checkpoint.json`` with their checksum, and the run's ``run.json`` and ``metrics.jsonl``;
    `extra_files` are JSON documents written beside them (e.g. the style classifier), `meta` entries
    added to ``checkpoint.json`` (e.g. data statistics a run made by an older cadenza lacks)."""
    extra_meta = meta or {}
    step_dir = ckpt.resolve(checkpoint)
    model, meta = ckpt.load_model(step_dir)
    run_dir = step_dir.parent.parent
    meta = {**{k: v for k, v in meta.items() if k not in ("files", "path")}, **extra_meta}
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


def store_pieces(store) -> dict:
    """What a model card keeps of its training store: the corpus spec and the origin of every
    validation and test piece, enough to rebuild those pieces exactly (`rebuild_store`)."""
    out = {"corpus": store.manifest.get("corpus"), "tokenizer": store.manifest["tokenizer"]}
    for split in ("valid", "test"):
        out[split] = [store.manifest["pieces"][p.index].get("origin") for p in store.split(split)]
    return out


def rebuild_store(name: str, split: str, out: str | os.PathLike, workers: int | None = None,
                  progress: bool = True):
    """The `split` pieces a shipped model was measured on, rebuilt from music21's corpus into a store
    at `out` (all in that split), converting only those scores: `cadenza evaluate --checkpoint NAME
    --data OUT --split SPLIT` then reproduces the model card's figure."""
    folder = resolve_model(name)
    pieces = json.loads((folder / "pieces.json").read_text())
    return prepare(out=out, corpus=pieces["corpus"], origins=pieces[split], split=split,
                   tokenizer=tokenizer_from_dict(pieces["tokenizer"]), workers=workers, progress=progress)
