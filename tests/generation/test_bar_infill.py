"""Rewriting bars, and writing under a melody: bars are numbered as a score numbers them (a pickup
is bar 0), the span runs from bar line to bar line, an infill in bars keeps every note outside them
exactly, and an accompaniment's voices start under the melody."""

from __future__ import annotations

import numpy as np
import pytest

from cadenza.data.meter import Meter
from cadenza.data.midi import Notes
from cadenza.generation.generate import sample, sampling_config
from cadenza.generation.prompt import Accompany, Infill, bar_seconds
from cadenza.settings import SettingError


def _waltz(pickup: bool) -> Notes:
    """Quarter notes in 3/4 at 100 qpm (0.6 s a beat), with a one-beat pickup or without, 6 bars."""
    signatures = [(0, 1, 4), (1, 3, 4)] if pickup else [(0, 3, 4)]
    meter = Meter.from_changes([(0, 100)], signatures)
    beats = np.arange(19 if pickup else 18, dtype=float)
    start = meter.seconds(beats)
    return Notes.from_arrays(start, start + 0.5, 60 + (np.arange(beats.size) % 7), [80] * beats.size, meter=meter)


def test_a_pickup_is_bar_0_and_the_first_full_bar_is_bar_1():
    notes = _waltz(pickup=True)
    assert bar_seconds(notes, 0, 0) == pytest.approx((0.0, 0.6))
    assert bar_seconds(notes, 1, 1) == pytest.approx((0.6, 2.4))
    assert bar_seconds(notes, 2, 3) == pytest.approx((2.4, 6.0))
    plain = _waltz(pickup=False)
    assert bar_seconds(plain, 1, 2) == pytest.approx((0.0, 3.6))
    with pytest.raises(SettingError, match="bar 0 is not in the piece"):
        bar_seconds(plain, 0, 1)
    with pytest.raises(SettingError, match="bar 9 is not in the piece"):
        bar_seconds(notes, 9, 10)


def test_an_infill_in_bars_keeps_every_note_outside_them(metrical_run):
    checkpoint, _ = metrical_run
    notes = _waltz(pickup=True)
    task = Infill.bars(notes, 2, 3)
    assert (task.start, task.end) == pytest.approx((2.4, 6.0))
    gen = sample(checkpoint, sampling_config(seed=0, compile=False), task)
    out, given = gen.notes[0], gen.given[0]
    outside = (notes.start < task.start - 1e-9) | (notes.start >= task.end - 1e-9)
    kept = out.take(given).by_time()
    want = notes.take(outside).by_time()
    assert len(kept) == len(want)
    for f in ("start", "end", "pitch"):
        assert np.allclose(getattr(kept, f), getattr(want, f), atol=1e-6), f
    new = out.take(~given)
    assert ((new.start >= task.start - 1e-6) & (new.start < task.end - 1e-6)).all()  # only inside bars 2-3


def test_accompanying_voices_start_under_the_melody(metrical_run):
    # an accompaniment writes voices under its melody: no new note starts above (or on) the melody
    # note sounding where it starts, whatever the model would like
    checkpoint, _ = metrical_run
    tune = _waltz(pickup=False)
    gen = sample(checkpoint, sampling_config(seed=2, num_samples=2, compile=False), Accompany(tune))
    for notes, given in zip(gen.notes, gen.given):
        melody, voices = notes.take(given), notes.take(~given)
        assert len(voices) > 0
        for start, pitch in zip(voices.start, voices.pitch):
            sounding = melody.pitch[(melody.start <= start + 1e-6) & (melody.end > start + 1e-6)]
            assert not sounding.size or pitch < sounding.max()
