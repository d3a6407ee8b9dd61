"""The pieces a shipped model was measured on: kept in its folder (``pieces.json``) when it is
shipped, and rebuilt from music21's corpus so anyone can reproduce its model card's figure."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cadenza.data.prepare import prepare
from cadenza.data.tokenizers import tokenizer_from_dict
from cadenza.models.zoo import resolve_model


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


def held_out_of(source: str | os.PathLike) -> dict[str, str]:
    """The pieces a model or a store holds out, as origin -> split: a shipped model's name (its
    pieces.json), or a store folder (its manifest). What `prepare(held_out=...)` takes, so a new
    model is measured on the pieces an older one was."""
    store = Path(source) / "manifest.json"
    if store.is_file():
        pieces = json.loads(store.read_text())["pieces"]
        return {p["origin"]: p["split"] for p in pieces if p.get("origin") and p["split"] in ("valid", "test")}
    kept = json.loads((resolve_model(str(source)) / "pieces.json").read_text())
    return {o: split for split in ("valid", "test") for o in kept[split]}
