"""The interface every cadenza tokenizer implements, and the registry that rebuilds one from JSON."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

_REGISTRY: dict[str, type["Tokenizer"]] = {}


class TokenizerError(ValueError):
    """Bad ids or a bad tokenizer config; the message says which and why."""


@dataclass
class DecodeReport:
    """How many repairs decoding made. A model's raw output is never rejected, only repaired."""

    orphan_note_offs: int = 0  # note-off for a pitch that was not sounding: ignored
    restarted_notes: int = 0  # note-on for a sounding pitch: the earlier note ends there
    closed_at_end: int = 0  # notes still sounding when the ids ran out: closed at the end
    zero_length: int = 0  # note-on and note-off at the same instant: dropped
    special_tokens: int = 0  # pad / bos skipped
    after_eos: int = 0  # ids after the first eos: ignored
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def repairs(self) -> int:
        return self.orphan_note_offs + self.restarted_notes + self.closed_at_end + self.zero_length

    def as_dict(self) -> dict[str, int]:
        d = asdict(self)
        d.update(d.pop("extra"))
        d["repairs"] = self.repairs
        return d


@dataclass
class Encoded:
    ids: np.ndarray
    notes: int
    stats: dict[str, int] = field(default_factory=dict)


class Tokenizer(ABC):
    """Notes <-> integer ids. Subclasses register themselves by `name`."""

    name: ClassVar[str] = ""
    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name:
            _REGISTRY[cls.name] = cls

    # ---- encoding / decoding -------------------------------------------------------------
    @abstractmethod
    def encode(self, source: Any) -> Encoded:
        """Encode a MIDI path, MIDI bytes, symusic Score or `Notes` into ids (no bos/eos)."""

    @abstractmethod
    def decode(self, ids) -> tuple[Any, DecodeReport]:
        """Decode any id sequence into a symusic Score plus a report of the repairs made."""

    # ---- optional capabilities used by the dataset (augmentation) and the sampler ---------
    def transpose(self, ids: np.ndarray, semitones: int) -> np.ndarray:
        raise NotImplementedError(f"{self.name} does not support transposition")

    def pitch_range(self, ids: np.ndarray) -> tuple[int, int] | None:
        """(lowest, highest) pitch that ids mention, or None when they mention none."""
        raise NotImplementedError(f"{self.name} does not support transposition")

    def stretch(self, ids: np.ndarray, factor: float) -> np.ndarray:
        raise NotImplementedError(f"{self.name} does not support time stretching")

    @property
    def supports_transpose(self) -> bool:
        return type(self).transpose is not Tokenizer.transpose

    @property
    def supports_stretch(self) -> bool:
        return type(self).stretch is not Tokenizer.stretch

    def token_name(self, i: int) -> str:
        return str(int(i))

    # ---- config ----------------------------------------------------------------------------
    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this tokenizer."""

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> "Tokenizer":
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        from cadenza.env import library_versions

        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "params": self.params(),
            "versions": library_versions(("cadenza", "symusic")),
        }

    def save(self, path: str | os.PathLike) -> Path:
        from cadenza.atomic import write_json

        write_json(path, self.to_dict())
        return Path(path)

    def same_as(self, other_config: dict[str, Any]) -> bool:
        return other_config.get("name") == self.name and other_config.get("params") == self.params()

    def check_ids(self, ids) -> np.ndarray:
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise TokenizerError(f"ids must be one sequence (1-D), got shape {tuple(arr.shape)}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TokenizerError(f"ids must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        bad = np.flatnonzero((arr < 0) | (arr >= self.vocab_size))
        if bad.size:
            i = int(bad[0])
            raise TokenizerError(
                f"id {int(arr[i])} at position {i} is outside the vocabulary of {self.name} "
                f"(0..{self.vocab_size - 1}); {bad.size} id(s) out of range"
            )
        return arr


def tokenizer_from_dict(config: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from `Tokenizer.to_dict()` output (e.g. a store's manifest)."""
    import cadenza.tokenizers  # noqa: F401  (registers the built-in tokenizers)

    name = config.get("name")
    if name not in _REGISTRY:
        if name == "miditok":
            from cadenza.tokenizers import miditok_adapter  # noqa: F401
        if name not in _REGISTRY:
            raise TokenizerError(f"unknown tokenizer {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    tok = _REGISTRY[name].from_params(config.get("params", {}))
    if "vocab_size" in config and config["vocab_size"] != tok.vocab_size:
        raise TokenizerError(
            f"tokenizer config says vocab_size {config['vocab_size']} but {name} with these params has "
            f"{tok.vocab_size}; the config was written by an incompatible version"
        )
    return tok


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    with open(path, encoding="utf-8") as f:
        return tokenizer_from_dict(json.load(f))


def registered() -> list[str]:
    return sorted(_REGISTRY)
