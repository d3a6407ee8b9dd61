"""What the piano-roll (`frames`) and voice-grid (`satb`) tokenizers share.

Both have the same vocabulary shape: ids 0..n-1 are the pitches low..low+n-1, then one marker
(FRAME_END or REST), then PAD, BOS and EOS. Transposition shifts the pitch ids only.

A grid has `n_voices` voices: `satb` writes one token per voice at every step (4), a piano roll is
one voice (its keys). `voice_spans` and `transpose_limits` let an augmentation keep each voice
inside the range it has in the data, as DeepBach transposes its chorales.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from cadenza.data.tokenizers.base import DecodeReport, Tokenizer, TokenizerError


@dataclass
class GridDecodeReport(DecodeReport):
    """A `DecodeReport` whose `repairs` also counts the grid-specific repairs kept in `extra`."""

    @property
    def repairs(self) -> int:
        return super().repairs + sum(self.extra.values())


class PitchGridTokenizer(Tokenizer):
    marker: ClassVar[str]  # the name of the id after the pitches
    pitch_prefix: ClassVar[str]
    # the constructor's names for (lowest pitch, number of pitches, seconds per step): each is also
    # an attribute, and `params()` returns them under these names
    param_names: ClassVar[tuple[str, str, str]]
    n_voices: ClassVar[int] = 1  # grid tokens (pitches and the marker) cycle through this many voices

    def __init__(self, low: int, n: int, seconds: float):
        if not (low >= 0 and n >= 1 and low + n <= 128):
            raise TokenizerError(f"{self.param_names[1]}: low={low}, n={n} must lie within MIDI 0..127")
        if not seconds > 0:
            raise TokenizerError(f"the playback length of a step must be positive, got {seconds}")
        self.low, self.n = int(low), int(n)
        for name, value in zip(self.param_names, (self.low, self.n, float(seconds))):
            setattr(self, name, value)
        self.marker_id = self.n
        self.pad_id, self.bos_id, self.eos_id = self.n + 1, self.n + 2, self.n + 3
        self.vocab_size = self.n + 4

    def params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.param_names}

    @property
    def pitch_bounds(self) -> tuple[int, int]:
        """Lowest and highest MIDI pitch the vocabulary can hold (transposition must stay inside)."""
        return self.low, self.low + self.n - 1

    def token_name(self, i: int) -> str:
        i = int(i)
        if 0 <= i < self.n:
            return f"{self.pitch_prefix}_{self.low + i}"
        return {self.marker_id: self.marker, self.pad_id: "PAD", self.bos_id: "BOS",
                self.eos_id: "EOS"}.get(i, f"<{i}>")

    def pitch_range(self, ids: np.ndarray) -> tuple[int, int] | None:
        ids = np.asarray(ids)
        p = ids[(ids >= 0) & (ids < self.n)]
        return (int(p.min()) + self.low, int(p.max()) + self.low) if p.size else None

    def transpose(self, ids: np.ndarray, semitones: int) -> np.ndarray:
        """Shift every pitch id by `semitones`; the marker and the specials are untouched."""
        ids = np.asarray(ids).astype(np.int64)
        if semitones == 0:
            return ids
        rng = self.pitch_range(ids)
        lo, hi = self.pitch_bounds
        if rng and (rng[0] + semitones < lo or rng[1] + semitones > hi):
            raise TokenizerError(f"transposing pitches {rng} by {semitones} leaves the range {lo}..{hi}")
        out = ids.copy()
        out[(ids >= 0) & (ids < self.n)] += semitones
        return out

    def voice_spans(self, ids) -> np.ndarray:
        """(n_voices, 2) int64: the lowest and highest MIDI pitch of each voice in `ids`, -1 for a
        voice without pitches. The grid tokens (pitches and the marker; specials and style tokens
        are skipped) take the voices in turn, so `ids` must start on a step, as a piece and every
        training window do (`window_align`)."""
        ids = np.asarray(ids, np.int64).ravel()
        grid = ids[(ids >= 0) & (ids <= self.marker_id)]
        voice = np.arange(grid.size) % self.n_voices
        out = np.full((self.n_voices, 2), -1, np.int64)
        for v in range(self.n_voices):
            p = grid[(voice == v) & (grid < self.marker_id)]
            if p.size:
                out[v] = (int(p.min()) + self.low, int(p.max()) + self.low)
        return out

    def transpose_limits(self, ids, ranges=None) -> tuple[int, int] | None:
        """(lowest, highest) shift in semitones that keeps every voice of `ids` inside its range:
        `ranges[v]` = (lowest, highest) MIDI pitch voice v may take, default the vocabulary's
        `pitch_bounds` for all. None when `ids` hold no pitch (any shift leaves them as they are);
        lowest > highest when no shift fits (the ids already leave a range)."""
        spans = self.voice_spans(ids)
        ranges = np.asarray(ranges if ranges is not None else [self.pitch_bounds] * self.n_voices, np.int64)
        if ranges.shape != (self.n_voices, 2):
            raise ValueError(f"ranges: one (lowest, highest) pair per voice ({self.n_voices}), "
                             f"got shape {ranges.shape}")
        sung = spans[:, 0] >= 0
        if not sung.any():
            return None
        return int((ranges[sung, 0] - spans[sung, 0]).max()), int((ranges[sung, 1] - spans[sung, 1]).min())
