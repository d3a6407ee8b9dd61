"""Tokenizers: notes <-> ids. `performance` is the default; `miditok` wraps any MidiTok tokenizer.

This module is the registry: `get_tokenizer` builds one by name, `tokenizer_from_dict` rebuilds
one from the config a store, a checkpoint or a model card saved.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cadenza.data.tokenizers.base import (
    _REGISTRY,
    DecodeReport,
    Encoded,
    Styled,
    Tokenizer,
    TokenizerError,
    check_style_names,
)
from cadenza.data.tokenizers.frames import FrameTokenizer
from cadenza.data.tokenizers.metrical import MetricalTokenizer
from cadenza.data.tokenizers.notes import NoteTokenizer
from cadenza.data.tokenizers.performance import PerformanceTokenizer
from cadenza.data.tokenizers.satb import SATBTokenizer

__all__ = [
    "DecodeReport",
    "Encoded",
    "FrameTokenizer",
    "MetricalTokenizer",
    "NoteTokenizer",
    "PerformanceTokenizer",
    "SATBTokenizer",
    "Styled",
    "Tokenizer",
    "TokenizerError",
    "check_style_names",
    "get_tokenizer",
    "load_tokenizer",
    "tokenizer_from_dict",
]


def get_tokenizer(name: str = "performance", **params) -> Tokenizer:
    """Build a tokenizer by name: "performance", "notes", "metrical", or "miditok:REMI" / ... ."""
    if name.startswith("miditok"):
        # lazy: needs the optional MidiTok package
        from cadenza.data.tokenizers.miditok_adapter import MidiTokTokenizer

        _, _, kind = name.partition(":")
        return MidiTokTokenizer(kind or "REMI", **params)
    builtin = {"performance": PerformanceTokenizer, "notes": NoteTokenizer, "metrical": MetricalTokenizer,
               "frames": FrameTokenizer, "satb": SATBTokenizer}
    if name in builtin:
        return builtin[name](**params)
    raise TokenizerError(f"unknown tokenizer {name!r}; use one of {', '.join(builtin)} or "
                         "'miditok:<REMI|TSD|MIDILike|...>'")


def tokenizer_from_dict(config: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from `Tokenizer.to_dict()` output (e.g. a store's manifest)."""
    name = config.get("name")
    if name == "miditok" and name not in _REGISTRY:
        # lazy: needs the optional MidiTok package; importing the adapter registers it
        from cadenza.data.tokenizers import miditok_adapter  # noqa: F401
    if name not in _REGISTRY:
        raise TokenizerError(f"unknown tokenizer {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    tok = _REGISTRY[name].from_params(config.get("params", {})).with_styles(config.get("styles", ()))
    if "vocab_size" in config and config["vocab_size"] != tok.vocab_size:
        raise TokenizerError(
            f"tokenizer config says vocab_size {config['vocab_size']} but {name} with these params has "
            f"{tok.vocab_size}; the config was written by an incompatible version"
        )
    return tok


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    with open(path, encoding="utf-8") as f:
        return tokenizer_from_dict(json.load(f))
