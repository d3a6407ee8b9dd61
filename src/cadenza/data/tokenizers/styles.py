"""Style tokens: any tokenizer plus one id per style and a "no style" id, appended to its vocabulary.

A styled model sees every training window as ``[STYLE] tokens...``: the style of the piece the
window comes from, or NO_STYLE (with a small probability, and for unlabelled pieces), so one model
samples both conditioned and unconditioned, which classifier-free guidance needs. Style ids come
after the base vocabulary, so a model fine-tuned with new styles keeps every old id.

==================  ===========================  ==========================================
token               ids (performance, 5 styles)  meaning
==================  ===========================  ==========================================
NO_STYLE            391                          no style asked for
STYLE s             392 .. 396                   the style named ``styles[s]``
==================  ===========================  ==========================================

Style ids are never stored in a token store (a piece's style is a label in the manifest) and are
never sampled; decoding skips them.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from cadenza.data.tokenizers.base import DecodeReport, Encoded, Tokenizer, TokenizerError

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


def check_style_names(styles: Sequence[str]) -> tuple[str, ...]:
    styles = tuple(styles)
    for s in styles:
        if not isinstance(s, str) or not _NAME.match(s):
            raise TokenizerError(f"style name {s!r} must be 1-40 lowercase letters, digits, - or _ "
                                 "(it becomes a token and a command-line value)")
    if len(set(styles)) != len(styles):
        raise TokenizerError(f"style names must be unique, got {', '.join(styles)}")
    return styles


class Styled(Tokenizer):
    """`base` with style tokens; everything else is the base tokenizer's."""

    def __init__(self, base: Tokenizer, styles: Sequence[str]):
        if isinstance(base, Styled):
            base = base.base
        self.base = base
        self.styles = check_style_names(styles)
        self.name = base.name
        self.no_style_id = base.vocab_size
        self._style_ids = {s: base.vocab_size + 1 + i for i, s in enumerate(self.styles)}
        self.vocab_size = base.vocab_size + 1 + len(self.styles)
        self.pad_id, self.bos_id, self.eos_id = base.pad_id, base.bos_id, base.eos_id

    def __getattr__(self, item: str):  # what a styled tokenizer does not change, the base answers
        if item == "base":
            raise AttributeError(item)
        return getattr(self.base, item)

    # ---- styles ----------------------------------------------------------------------------
    def style_id(self, style: str | None) -> int:
        if style is None:
            return self.no_style_id
        if style not in self._style_ids:
            raise TokenizerError(f"unknown style {style!r}; this model knows {', '.join(self.styles)}")
        return self._style_ids[style]

    def style_prefix(self, style: str | None) -> list[int]:
        return [self.style_id(style)]

    def with_styles(self, styles: Sequence[str]) -> Tokenizer:
        return Styled(self.base, styles) if styles else self.base

    @property
    def special_ids(self) -> tuple[int, ...]:
        return (*self.base.special_ids, self.no_style_id, *self._style_ids.values())

    def token_name(self, i: int) -> str:
        i = int(i)
        if i == self.no_style_id:
            return "NO_STYLE"
        if i > self.no_style_id and i < self.vocab_size:
            return f"STYLE_{self.styles[i - self.no_style_id - 1]}"
        return self.base.token_name(i)

    # ---- the base tokenizer's work, style ids set aside ---------------------------------------
    def _without_styles(self, ids) -> tuple[np.ndarray, int]:
        ids = self.check_ids(ids)
        keep = ids < self.no_style_id
        return ids[keep], int(ids.size - np.count_nonzero(keep))

    def encode(self, source: Any) -> Encoded:
        return self.base.encode(source)

    def decode(self, ids) -> tuple[Any, DecodeReport]:
        ids, styles = self._without_styles(ids)
        score, report = self.base.decode(ids)
        report.special_tokens += styles
        return score, report

    def to_notes(self, ids):
        return self.base.to_notes(self._without_styles(ids)[0])

    def token_seconds(self) -> np.ndarray | None:
        secs = self.base.token_seconds()
        return None if secs is None else np.concatenate([secs, np.zeros(self.vocab_size - secs.size)])

    def encode_primer(self, source, seconds: float | None = None) -> np.ndarray:
        return self.base.encode_primer(source, seconds)

    def grammar(self, batch: int, device, constrained: bool = True, max_polyphony: int | None = None,
                allow_eos: bool = True, max_note_seconds: float | None = None):
        # The base's grammar, built on this tokenizer: its mask spans the style ids too, and never
        # allows them (they are special ids).
        return type(self.base).grammar(self, batch, device, constrained, max_polyphony, allow_eos, max_note_seconds)

    # what `Tokenizer` defines for every tokenizer must still be the base's (`__getattr__` only sees
    # names the class does not have)
    def transpose(self, ids, semitones: int):
        return self.base.transpose(ids, semitones)

    def pitch_range(self, ids):
        return self.base.pitch_range(ids)

    def stretch(self, ids, factor: float):
        return self.base.stretch(ids, factor)

    supports_transpose = property(lambda self: self.base.supports_transpose)
    supports_stretch = property(lambda self: self.base.supports_stretch)
    window_align = property(lambda self: self.base.window_align)
    pitch_bounds = property(lambda self: self.base.pitch_bounds)

    # ---- config ----------------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        return self.base.params()

    def to_dict(self) -> dict[str, Any]:
        return {**self.base.to_dict(), "vocab_size": self.vocab_size, "styles": list(self.styles)}
