"""The models a studio offers: the shipped ones and the runs found under `--runs`, each by an id.

A client names a model by its id only; the id is looked up in this registry, never joined to a
path, so nothing a client sends reaches the filesystem. Loaded models are kept (the two most
recently used) so a job does not pay for loading.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cadenza.models import checkpoint as ckpt


class UnknownModel(KeyError):
    pass


@dataclass
class ModelEntry:
    id: str
    name: str
    kind: str  # shipped | run
    path: Path = field(repr=False)
    styles: list[str]
    step: int
    valid_loss: float | None

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "kind": self.kind, "styles": self.styles, "step": self.step,
                "valid_loss": self.valid_loss}


class Registry:
    def __init__(self, runs: Path | None = None, keep_loaded: int = 2, device: str = "cpu"):
        self.runs, self.keep, self.device = runs, keep_loaded, device
        self._loaded: OrderedDict[str, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def entries(self) -> list[ModelEntry]:
        """Scanned afresh each time: a run that finishes while the server runs appears."""
        from cadenza.models.zoo import list_models

        out = [ModelEntry(m["name"], m["name"], "shipped", Path(m["path"]), m["styles"], m["step"], m["valid_loss"])
               for m in list_models()]
        for run in sorted(self.runs.rglob("checkpoints")) if self.runs and self.runs.is_dir() else []:
            step_dir = ckpt.best_checkpoint(run.parent) or ckpt.latest_checkpoint(run.parent)
            if step_dir is None:
                continue
            meta = ckpt.read_meta(step_dir)
            name = run.parent.relative_to(self.runs).as_posix()
            out.append(ModelEntry(f"run:{name}", name, "run", step_dir, meta["tokenizer"].get("styles", []),
                                  meta["step"], meta.get("best_valid_loss")))
        return out

    def get(self, model_id: str) -> ModelEntry:
        for e in self.entries():
            if e.id == model_id:
                return e
        raise UnknownModel(model_id)

    def load(self, model_id: str):
        """(model, meta) of a model id, loaded once and kept while it is among the recently used."""
        entry = self.get(model_id)
        key = f"{entry.id}@{entry.path}"
        with self._lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            loaded = ckpt.load_model(entry.path, self.device)
            self._loaded[key] = loaded
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
            return loaded
