"""The interface every cadenza tokenizer implements, its style tokens, and the registry that
rebuilds one from JSON.

Style tokens live here, beside `Tokenizer.with_styles`, which builds them: any tokenizer plus one
id per style and a "no style" id, appended to its vocabulary. A styled model sees every training
window as ``[STYLE] tokens...``: the style of the piece the window comes from, or NO_STYLE (with a
small probability, and for unlabelled pieces), so one model samples both conditioned and
unconditioned, which classifier-free guidance needs. Style ids come after the base vocabulary, so a
model fine-tuned with new styles keeps every old id.

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

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from cadenza.atomic import write_json
from cadenza.data.midi import Notes, notes_to_score, read_notes, score_to_notes
from cadenza.env.record import library_versions

_REGISTRY: dict[str, type[Tokenizer]] = {}


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
    seconds: float | None = None  # music spanned, for tokenizers without a clock (see Tokenizer.seconds)
    durations: np.ndarray | None = None  # each note's length in seconds, when encoded from notes


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

    def read(self, source: Any) -> tuple[Notes, dict[str, int]]:
        """`Notes` from a MIDI path, MIDI bytes, a symusic Score or `Notes`, read as `encode` reads
        them (`read_options`), and the read stats: what a primer or a melody file becomes."""
        if isinstance(source, Notes):
            return source, {}
        opts = self.read_options()
        notes, rs = score_to_notes(source, **opts) if hasattr(source, "tracks") else read_notes(source, **opts)
        return notes, rs.as_dict()

    def read_options(self) -> dict[str, Any]:
        """How this tokenizer reads MIDI (`read_notes`' keywords: the sustain pedal, instruments)."""
        return {}

    @abstractmethod
    def decode(self, ids) -> tuple[Any, DecodeReport]:
        """Decode any id sequence into a symusic Score plus a report of the repairs made."""

    def content(self, ids, report: DecodeReport) -> np.ndarray:
        """What decoding reads: ids checked, cut at the first EOS, without special tokens.

        The preamble of every `decode`; `report` counts what was cut and skipped.
        """
        ids = self.check_ids(ids)
        if self.eos_id != self.pad_id:  # a MidiTok vocabulary may have no EOS of its own
            eos = np.flatnonzero(ids == self.eos_id)
            if eos.size:
                report.after_eos = int(ids.size - eos[0] - 1)
                ids = ids[: eos[0]]
        special = np.isin(ids, self.special_ids)
        report.special_tokens = int(np.count_nonzero(special))
        return ids[~special]

    def to_notes(self, ids) -> Notes:
        """The notes ids decode to (drums dropped, as everywhere else)."""
        return score_to_notes(self.decode(ids)[0])[0]

    # ---- styles (see `Styled`) --------------------------------------------------------------------
    styles: tuple[str, ...] = ()

    def with_styles(self, styles) -> Tokenizer:
        """This tokenizer with style tokens for `styles` (itself when there are none)."""
        return Styled(self, styles) if styles else self

    def style_prefix(self, style: str | None) -> list[int]:
        """The style token a styled tokenizer's windows start with, else none."""
        if style is not None:
            raise TokenizerError(f"this model has no styles, so it cannot play {style!r}")
        return []

    anticipates: ClassVar[bool] = False  # knows controls: trains on anticipatory windows, infills, accompanies
    note_lengths_at_onset: ClassVar[bool] = False  # a note's length is written where it starts: none to forget
    window_params: ClassVar[tuple[str, ...]] = ()  # params that shape training windows, never a stored piece

    def previews(self, task: str) -> bool:
        """Whether windows of `task` show given notes ahead of where they sound (a metrical
        vocabulary with lookahead)."""
        return False

    def window_prefix(self, style: str | None = None, task: str | bool = "autoregress",
                      key: int | None = None) -> list[int]:
        """The tokens every window starts with, and a window past the context keeps: the style
        token (styled tokenizers), then what `task_prefix` says of the task (tokenizers that
        anticipate: "autoregress", "infill" or "accompany"; True is "infill") and the key."""
        return self.style_prefix(style) + self.task_prefix(task, key)

    def task_prefix(self, task: str | bool = "autoregress", key: int | None = None) -> list[int]:
        """What a window says of its task and key after its style token: nothing here."""
        if task not in ("autoregress", False):
            raise TokenizerError(f"the {self.name} vocabulary has no controls: it cannot infill or accompany")
        return []

    # ---- what the sampler asks -----------------------------------------------------------------
    @property
    def special_ids(self) -> tuple[int, ...]:
        """Ids that are not music: decoding skips them, the sampler never emits PAD or BOS."""
        return tuple(dict.fromkeys((self.pad_id, self.bos_id, self.eos_id)))

    def token_seconds(self) -> np.ndarray | None:
        """Seconds each id moves the music's clock (vocab_size floats), or None without a clock."""
        return None

    @property
    def has_clock(self) -> bool:
        return self.token_seconds() is not None

    def seconds(self, ids) -> float | None:
        """Seconds of music that ids span (their time shifts, frames or steps); None without a clock."""
        secs = self.token_seconds()
        if secs is None:
            return None
        ids = np.asarray(ids, np.int64)
        return float(secs[ids].sum()) if ids.size else 0.0

    def encode_primer(self, source, seconds: float | None = None) -> np.ndarray:
        """ids of a primer (a MIDI file, bytes or anything `encode` takes); with `seconds`, only
        the ids up to that much music."""
        ids = self.encode(source).ids
        if seconds is None:
            return ids
        secs = self.token_seconds()
        if secs is None:
            raise TokenizerError(f"cutting a primer to seconds needs a tokenizer with a clock; {self.name} has none")
        return ids[np.cumsum(secs[ids]) <= seconds]

    def grammar(self, batch: int, device, constrained: bool = True, max_polyphony: int | None = None,
                allow_eos: bool = True, max_note_seconds: float | None = None):
        """The decoding grammar for `batch` sequences: this tokenizer's rules (when `constrained`)
        or only the special-token rules. See `cadenza.data.tokenizers.grammar`."""
        # lazy: grammars hold torch masks; tokenizing (data preparation) does not import torch
        from cadenza.data.tokenizers.grammar import SpecialsOnly

        return SpecialsOnly(self, batch, device, allow_eos)

    # ---- optional capabilities used by the dataset (augmentation) ------------------------------
    window_align: ClassVar[int] = 1  # training windows start at a multiple of this (SATB: 4 voices)
    pitch_bounds: tuple[int, int] = (0, 127)  # transposition keeps pitches inside these

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
    def from_params(cls, params: dict[str, Any]) -> Tokenizer:
        return cls(**params)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "params": self.params(),
            "versions": library_versions(("cadenza", "symusic")),
        }

    def save(self, path: str | os.PathLike) -> Path:
        write_json(path, self.to_dict())
        return Path(path)

    def same_as(self, other_config: dict[str, Any], ids_only: bool = False) -> bool:
        """Whether `other_config` (a `to_dict`) is this tokenizer; with `ids_only`, whether it writes
        the same ids for every stored piece (its `window_params` may differ)."""
        skip = set(self.window_params) if ids_only else set()
        mine = {k: v for k, v in self.params().items() if k not in skip}
        theirs = {k: v for k, v in (other_config.get("params") or {}).items() if k not in skip}
        return other_config.get("name") == self.name and mine == theirs

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


class NoteDecoding:
    """`decode` and `to_notes` for a tokenizer whose `decode_notes(ids)` gives `Notes` and a report."""

    def decode(self, ids):
        """A symusic Score (ticks, 120 bpm), one track per instrument, and a `DecodeReport`."""
        notes, report = self.decode_notes(ids)
        return notes_to_score(notes), report

    def to_notes(self, ids) -> Notes:
        return self.decode_notes(ids)[0]


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

    def read(self, source: Any) -> tuple[Notes, dict[str, int]]:
        return self.base.read(source)

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

    def seconds(self, ids) -> float | None:
        return self.base.seconds(self._without_styles(ids)[0])

    def task_prefix(self, task: str | bool = "autoregress", key: int | None = None) -> list[int]:
        return self.base.task_prefix(task, key)

    def previews(self, task: str) -> bool:
        return self.base.previews(task)

    has_clock = property(lambda self: self.base.has_clock)

    def grammar(self, batch: int, device, constrained: bool = True, max_polyphony: int | None = None,
                allow_eos: bool = True, max_note_seconds: float | None = None, **plan):
        # The base's grammar, built on this tokenizer: its mask spans the style ids too, and never
        # allows them (they are special ids). `plan`: what a tokenizer that anticipates is given.
        return type(self.base).grammar(self, batch, device, constrained, max_polyphony, allow_eos, max_note_seconds,
                                       **plan)

    def window_prefix(self, style: str | None = None, task: str | bool = "autoregress",
                      key: int | None = None) -> list[int]:
        return self.style_prefix(style) + self.base.task_prefix(task, key)

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
    anticipates = property(lambda self: self.base.anticipates)
    note_lengths_at_onset = property(lambda self: self.base.note_lengths_at_onset)
    window_params = property(lambda self: self.base.window_params)

    # ---- config ----------------------------------------------------------------------------
    def params(self) -> dict[str, Any]:
        return self.base.params()

    def to_dict(self) -> dict[str, Any]:
        return {**self.base.to_dict(), "vocab_size": self.vocab_size, "styles": list(self.styles)}
