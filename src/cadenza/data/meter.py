"""Where the beats and bars are: a piece's tempo changes and time signatures, in quarter notes.

MIDI keeps both as meta events on its tick clock; `Notes` keep times in seconds. A `Meter` maps
one to the other (`seconds` / `quarters`) and says where every bar starts (`bar_starts`), so notes
read from a score can be written back on their grid, and a vocabulary can state a note's bar and
position instead of a sum of time shifts.

A time signature change starts a bar. A first bar shorter than its signature (a pickup) is written
as a signature of its own length (a 4/4 chorale with a one-beat pickup starts 1/4, then 4/4), which
is how notation programs and the corpus conversion (`cadenza.data.corpora`) write it to MIDI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

DEFAULT_QPM = 120.0  # MIDI's default tempo: quarter notes per minute


@dataclass(frozen=True)
class Meter:
    """Tempo changes (`tempo_at` quarters, `qpm`) and time signatures (`signature_at` quarters,
    `numerator` / `denominator`), each sorted and starting at quarter 0."""

    tempo_at: tuple[float, ...] = (0.0,)
    qpm: tuple[float, ...] = (DEFAULT_QPM,)
    signature_at: tuple[float, ...] = (0.0,)
    numerator: tuple[int, ...] = (4,)
    denominator: tuple[int, ...] = (4,)

    def __post_init__(self):
        if not self.tempo_at or self.tempo_at[0] != 0 or len(self.tempo_at) != len(self.qpm):
            raise ValueError("a meter's tempos start at quarter 0, one qpm each")
        if not self.signature_at or self.signature_at[0] != 0 or not (
                len(self.signature_at) == len(self.numerator) == len(self.denominator)):
            raise ValueError("a meter's time signatures start at quarter 0")
        if min(self.qpm) <= 0 or min(self.numerator) <= 0 or min(self.denominator) <= 0:
            raise ValueError("tempos and time signatures must be positive")

    @classmethod
    def constant(cls, qpm: float = DEFAULT_QPM, numerator: int = 4, denominator: int = 4) -> Meter:
        return cls((0.0,), (float(qpm),), (0.0,), (int(numerator),), (int(denominator),))

    @classmethod
    def from_score(cls, score) -> Meter:
        """The meter of a symusic Score in ticks (120 qpm and 4/4 where it states none)."""
        tpq = float(score.ticks_per_quarter)
        tempos = [(t.time / tpq, float(t.qpm)) for t in score.tempos]
        signatures = [(s.time / tpq, int(s.numerator), int(s.denominator)) for s in score.time_signatures
                      if s.numerator > 0 and s.denominator > 0]
        return cls.from_changes(tempos, signatures)

    @classmethod
    def from_changes(cls, tempos, signatures) -> Meter:
        """From (quarter, qpm) and (quarter, numerator, denominator) changes in any order; of several
        at one quarter the last counts, and a change that restates the one in effect is dropped."""
        t = _last_at_each(sorted(tempos, key=lambda x: x[0]), (0.0, DEFAULT_QPM))
        s = _last_at_each(sorted(signatures, key=lambda x: x[0]), (0.0, 4, 4))
        return cls(tuple(float(x[0]) for x in t), tuple(float(x[1]) for x in t), tuple(float(x[0]) for x in s),
                   tuple(int(x[1]) for x in s), tuple(int(x[2]) for x in s))

    # ---- time --------------------------------------------------------------------------------
    def _tempo_map(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        at = np.asarray(self.tempo_at, np.float64)
        per_quarter = 60.0 / np.asarray(self.qpm, np.float64)
        seconds_at = np.concatenate(([0.0], np.cumsum(np.diff(at) * per_quarter[:-1])))
        return at, per_quarter, seconds_at

    def seconds(self, quarters) -> np.ndarray:
        """Seconds at positions in quarter notes."""
        q = np.asarray(quarters, np.float64)
        at, per_quarter, seconds_at = self._tempo_map()
        i = np.clip(np.searchsorted(at, q, side="right") - 1, 0, None)
        return seconds_at[i] + (q - at[i]) * per_quarter[i]

    def quarters(self, seconds) -> np.ndarray:
        """Positions in quarter notes at times in seconds (the inverse of `seconds`)."""
        s = np.asarray(seconds, np.float64)
        at, per_quarter, seconds_at = self._tempo_map()
        i = np.clip(np.searchsorted(seconds_at, s, side="right") - 1, 0, None)
        return at[i] + (s - seconds_at[i]) / per_quarter[i]

    def qpm_at(self, quarter: float) -> float:
        return self.qpm[int(np.searchsorted(self.tempo_at, quarter, side="right")) - 1]

    # ---- bars --------------------------------------------------------------------------------
    def bar_quarters(self, k: int) -> Fraction:
        """The length of a bar of time signature k, in quarter notes."""
        return Fraction(4 * self.numerator[k], self.denominator[k])

    def bar_starts(self, until: float) -> np.ndarray:
        """Where each bar starting before `until` (quarters) starts, then the bar line that closes
        the last of them (at `until` or after). A signature change starts a bar, cutting the bar
        before it short if need be."""
        out: list[float] = []
        ends = (*self.signature_at[1:], math.inf)
        for k, (a, b) in enumerate(zip(self.signature_at, ends)):
            length = float(self.bar_quarters(k))
            n = max(0, math.ceil((min(b, until) - a) / length - 1e-9))  # bars starting in [a, until)
            out.extend(a + length * i for i in range(n))
            if until <= b + 1e-9:
                out.append(min(a + length * n, b) if n else a)
                break
        return np.asarray(out, np.float64)

    def signature_of_bar(self, start: float) -> tuple[int, int]:
        k = int(np.searchsorted(self.signature_at, start + 1e-9, side="right")) - 1
        return self.numerator[k], self.denominator[k]

    def shifted(self, quarters: float) -> Meter:
        """The meter seen from `quarters` on, which becomes 0 (the changes before it collapse into
        the tempo and signature in effect there)."""
        q = float(quarters)

        def cut(at, *values):
            i = int(np.searchsorted(at, q, side="right")) - 1
            rows = [(0.0, *(v[i] for v in values))]
            rows += [(a - q, *(v[j] for v in values)) for j, a in enumerate(at) if a > q]
            return rows

        return Meter.from_changes(cut(self.tempo_at, self.qpm), cut(self.signature_at, self.numerator,
                                                                     self.denominator))

    def describe(self) -> str:
        sig = f"{self.numerator[0]}/{self.denominator[0]}"
        more = len(self.signature_at) - 1 + len(self.tempo_at) - 1
        return f"{sig} at {self.qpm[0]:g} qpm" + (f" ({more} change{'s' * (more > 1)})" if more else "")

    def write(self, score) -> None:
        """Put this meter's tempos and time signatures into a symusic Score in ticks (replacing
        what it has)."""
        import symusic  # lazy: only writing a score needs it

        tpq = score.ticks_per_quarter
        score.tempos = symusic.core.TempoTickList(
            [symusic.Tempo(round(a * tpq), qpm=q, ttype="tick") for a, q in zip(self.tempo_at, self.qpm)])
        score.time_signatures = symusic.core.TimeSignatureTickList(
            [symusic.TimeSignature(round(a * tpq), n, d, ttype="tick")
             for a, n, d in zip(self.signature_at, self.numerator, self.denominator)])


def _last_at_each(changes: list[tuple], default: tuple) -> list[tuple]:
    """Of changes sorted by position: the last at each position, those restating the one in effect
    dropped, a first change at 0 (`default` when none is there)."""
    out: list[tuple] = []
    for c in changes:
        if out and abs(out[-1][0] - c[0]) < 1e-9:
            out[-1] = c
        else:
            out.append(c)
    if not out or out[0][0] > 1e-9:
        out.insert(0, default)
    out[0] = (0.0, *out[0][1:])
    kept = [out[0]]
    for c in out[1:]:
        if c[1:] != kept[-1][1:]:
            kept.append(c)
    return kept
