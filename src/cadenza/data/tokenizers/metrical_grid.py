"""The metrical vocabulary's grid: ticks (12 a quarter note), the duration grid, tempo bins, the time
signatures it has, and a `Meter` put on that grid. Shared by the tokenizer (`metrical`) and its
masks (`metrical_grammar`)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from cadenza.data.meter import Meter
from cadenza.data.tokenizers.note_grid import nearest_index

TPQ = 12  # ticks a quarter note: 16ths (3), eighth triplets (4) and 16th triplets (2) are exact
MAX_BAR = 16 * TPQ  # the longest bar; longer ones are split
LENGTHS = np.concatenate([np.arange(1, 25), np.arange(27, 49, 3), np.arange(54, 97, 6), np.arange(108, 193, 12)])
NEAREST_LENGTH = nearest_index(LENGTHS)
QPM = 120.0 * 2.0 ** (np.arange(-32, 17) / 16)  # 30 .. 240 quarter notes a minute; 60 and 120 exact
METERS = tuple((n, d) for d in (1, 2, 4, 8, 16) for n in range(1, 17) if n * 4 * TPQ // d <= MAX_BAR)


def meter_ticks(num: int, den: int) -> int:
    return 4 * TPQ * num // den


def meter_quarters(meter: Meter | None, seconds) -> np.ndarray:
    """Quarter notes at `seconds` on `meter` (120 qpm without one)."""
    return (meter or Meter.constant()).quarters(seconds)


def tempo_bin(qpm: float) -> int:
    """The nearest tempo bin (in log tempo), clamped to 30 .. 240 qpm."""
    return int(np.argmin(np.abs(np.log2(QPM) - np.log2(max(float(qpm), 1e-6)))))


def bar_signature(ticks: int, num: int, den: int) -> tuple[int, int]:
    """The METERS entry for a bar `ticks` long whose written signature is num/den: that signature
    when it is in the table and the bar has its length, else one of the bar's length (in the
    signature's own unit where possible)."""
    if (num, den) in METERS and meter_ticks(num, den) == ticks:
        return num, den
    q = Fraction(ticks, TPQ)
    for d in sorted({den, 4, 8, 16, 2, 1}, key=lambda d: (d != den, d)):
        n = q * d / 4
        if n.denominator == 1 and (int(n), d) in METERS:
            return int(n), d
    raise ValueError(f"no signature for a bar of {ticks} ticks")


def grid_meter(meter: Meter) -> tuple[Meter, dict[str, int]]:
    """A meter on the vocabulary's grid: changes at whole ticks, tempos at their bins, bars no
    longer than MAX_BAR (a longer bar is split into equal bars that are), and a signature change
    that would cut the bar before it to a length no signature has moved to that bar's end."""
    tempos = [(round(a * TPQ) / TPQ, float(QPM[tempo_bin(q)])) for a, q in zip(meter.tempo_at, meter.qpm)]
    signatures: list[tuple[float, int, int]] = []
    split = moved = 0
    for a, n, d in zip(meter.signature_at, meter.numerator, meter.denominator):
        ticks = round(Fraction(4 * n, d) * TPQ)
        parts = max(1, -(-ticks // MAX_BAR))
        while parts < 64 and (ticks % parts or not _fits(ticks // parts)):
            parts += 1
        split += parts > 1
        at = round(a * TPQ)
        if signatures:  # where the bar this change cuts short started, and how long it would be
            prev = Meter.from_changes([], signatures)
            start = round(prev.bar_starts(at / TPQ)[-2] * TPQ) if at else 0
            if at > start and not _fits(at - start):
                at, moved = round(prev.bar_starts(at / TPQ)[-1] * TPQ), moved + 1
        signatures.append((at / TPQ, *bar_signature(max(ticks // parts, 1), n, d)))
    return Meter.from_changes(tempos, signatures), {"long_bars_split": split, "signatures_moved": moved}


def _fits(ticks: int) -> bool:
    try:
        bar_signature(ticks, 4, 4)
        return True
    except ValueError:
        return False


