"""Tokenizers: notes <-> ids. `performance` is the default; `miditok` wraps any MidiTok tokenizer."""

from cadenza.data.tokenizers.base import (
    DecodeReport,
    Encoded,
    Tokenizer,
    TokenizerError,
    load_tokenizer,
    tokenizer_from_dict,
)
from cadenza.data.tokenizers.frames import FrameTokenizer
from cadenza.data.tokenizers.performance import PerformanceTokenizer
from cadenza.data.tokenizers.satb import SATBTokenizer

__all__ = [
    "DecodeReport",
    "Encoded",
    "FrameTokenizer",
    "SATBTokenizer",
    "PerformanceTokenizer",
    "Tokenizer",
    "TokenizerError",
    "get_tokenizer",
    "load_tokenizer",
    "tokenizer_from_dict",
]


def get_tokenizer(name: str = "performance", **params) -> Tokenizer:
    """Build a tokenizer by name: "performance", or "miditok:REMI" / "miditok:TSD" / ... ."""
    if name.startswith("miditok"):
        from cadenza.data.tokenizers.miditok_adapter import MidiTokTokenizer

        _, _, kind = name.partition(":")
        return MidiTokTokenizer(kind or "REMI", **params)
    builtin = {"performance": PerformanceTokenizer, "frames": FrameTokenizer, "satb": SATBTokenizer}
    if name in builtin:
        return builtin[name](**params)
    raise TokenizerError(f"unknown tokenizer {name!r}; use one of {', '.join(builtin)} or "
                         "'miditok:<REMI|TSD|MIDILike|...>'")
