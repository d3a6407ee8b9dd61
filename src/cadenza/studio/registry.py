"""The models a studio offers: the shipped ones and the runs found under `--runs`, each by an id.

A client names a model by its id only; the id is looked up in this registry, never joined to a
path, so nothing a client sends reaches the filesystem. The runs folder is walked again only when
one of its folders that could hold a new run or checkpoint changed. Loaded models are kept (the two
most recently used) so a job does not pay for loading.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cadenza.data.tokenizers import Tokenizer
from cadenza.models import checkpoint as ckpt
from cadenza.models.zoo import list_models


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
    @functools.cached_property
    def tokenizer(self) -> Tokenizer:
        """The checkpoint's tokenizer (from its JSON): how an upload is read for this model."""
        return ckpt.load_tokenizer(self.path)

    @functools.cached_property
    def tasks(self) -> list[str]:
        """What the model can do: every model generates and continues; one whose vocabulary knows
        given notes (trained on `--tokenizer notes`) also fills a span and accompanies a melody."""
        edits = self.tokenizer.anticipates
        return ["generate", "continue", *(("infill", "accompany") if edits else ())]

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "kind": self.kind, "styles": self.styles, "step": self.step,
                "valid_loss": self.valid_loss, "tasks": self.tasks}


# A folder changed less than this long before a scan may change again within the same tick of its
# timestamp, unseen: it is scanned again next time (file systems stamp in steps of up to 2 s).
SETTLED_NS = 2_000_000_000


class Registry:
    def __init__(self, runs: Path | None = None, keep_loaded: int = 2, device: str = "cpu"):
        self.runs, self.keep, self.device = runs, keep_loaded, device
        self._loaded: OrderedDict[str, ckpt.Checkpoint] = OrderedDict()
        self._lock = threading.Lock()
        self._runs: list[ModelEntry] = []
        self._seen: dict[Path, int | None] = {}  # folder -> its mtime when the runs were last scanned
        self._scanned_ns = 0
        self._scan_lock = threading.Lock()

    @functools.cached_property
    def shipped(self) -> list[ModelEntry]:
        return [ModelEntry(m["name"], m["name"], "shipped", Path(m["path"]), m["styles"], m["step"], m["valid_loss"])
                for m in list_models()]

    def entries(self) -> list[ModelEntry]:
        """The shipped models, then the runs: a run that appears (or saves a checkpoint) while the
        server runs is listed."""
        if self.runs is None:
            return list(self.shipped)
        with self._scan_lock:
            settled = self._scanned_ns - SETTLED_NS
            if not self._seen or any(t is None or t > settled or _mtime(d) != t for d, t in self._seen.items()):
                self._runs = self._scan(self.runs)
            return self.shipped + self._runs

    def _scan(self, runs: Path) -> list[ModelEntry]:
        """Every run under `runs` with a checkpoint. Remembers the mtimes of `runs` and of every folder
        on the way to a checkpoints folder, taken before reading them: a new run or step folder
        changes one of them."""
        self._scanned_ns, self._seen = time.time_ns(), {runs: _mtime(runs)}
        out = []
        for ckpts in sorted(runs.rglob("checkpoints")) if runs.is_dir() else []:
            folder = ckpts
            while folder != runs:
                self._seen[folder], folder = _mtime(folder), folder.parent
            step_dir = ckpt.best_checkpoint(ckpts.parent) or ckpt.latest_checkpoint(ckpts.parent)
            if step_dir is None:
                continue
            meta = ckpt.read_meta(step_dir)
            name = ckpts.parent.relative_to(runs).as_posix()
            out.append(ModelEntry(f"run:{name}", name, "run", step_dir, meta["tokenizer"].get("styles", []),
                                  meta["step"], meta.get("best_valid_loss")))
        return out

    def get(self, model_id: str) -> ModelEntry:
        for e in self.entries():
            if e.id == model_id:
                return e
        raise UnknownModel(model_id)

    def load(self, model_id: str) -> ckpt.Checkpoint:
        """The checkpoint of a model id, loaded once and kept while it is among the recently used."""
        entry = self.get(model_id)
        key = f"{entry.id}@{entry.path}"
        with self._lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            loaded = ckpt.load(entry.path, self.device)
            self._loaded[key] = loaded
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
            return loaded


def _mtime(folder: Path) -> int | None:
    try:
        return folder.stat().st_mtime_ns
    except OSError:  # gone
        return None
