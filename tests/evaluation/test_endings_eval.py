"""The lengths benchmark's measures (`evaluation.endings`): the last chord's bass against the key,
samples asked for bars or seconds measured as written, instruments and long notes counted."""

from __future__ import annotations

import numpy as np
import pytest

from cadenza.data.midi import Notes
from cadenza.evaluation.endings import LengthsConfig, ends_on_tonic, final_bass, real_report, sample_rows, style_report


def _cadence(last_bass: int) -> Notes:
    """A C major scale over a held C, then a last chord on `last_bass` (with G and C above it)."""
    scale = [60, 62, 64, 65, 67, 69, 71, 72]
    start = np.arange(8.0)
    pitch = scale + [48] + [last_bass, 67, 72]
    s = np.concatenate([start, [0.0], [8.0, 8.0, 8.0]])
    return Notes.from_arrays(s, s + np.array([1.0] * 8 + [8.0] + [2.0] * 3), pitch, [80] * 12)


def test_a_piece_ends_on_the_tonic_when_its_last_chord_stands_on_it():
    assert final_bass(_cadence(48)) == 48
    assert ends_on_tonic(_cadence(48)) is True
    assert ends_on_tonic(_cadence(43)) is False  # a half cadence: the bass on G in C major
    assert ends_on_tonic(Notes.from_arrays([], [], [], [])) is None


@pytest.mark.parametrize("unit", ["bars", "seconds"])
def test_samples_asked_for_a_length_are_measured_as_written(metrical_run, unit):
    checkpoint, store = metrical_run
    cfg = LengthsConfig(samples=3, bars=4, seconds=6.0, compile=False)
    rows = sample_rows(checkpoint, "chorale", cfg, unit)
    assert len(rows) == 3
    if unit == "bars":  # the grammar ends a piece asked for bars at the bar line that closes them
        assert [r["written"] for r in rows] == [4, 4, 4] and all(r["lasted"] for r in rows)
    else:
        assert all(r["written"] >= 6.0 - 1e-6 for r in rows)
    real = real_report(store, "chorale")
    assert real["programs"] and real["pieces"] >= 1 and real["p999_seconds"] > 0
    report = style_report(rows, real)
    assert report["samples"] == 3 and report["notes"] == sum(len(r["durations"]) for r in rows)
    assert 0.0 <= report["foreign_program_notes"] <= report["foreign_program_samples"] <= 1.0


def test_notes_on_programs_the_style_never_uses_are_counted():
    rows = [{"written": 4, "lasted": True, "ends_on_tonic": True, "notes_by_program": {0: 6, 54: 2},
             "durations": [0.5] * 7 + [9.0]},
            {"written": 4, "lasted": False, "ends_on_tonic": None, "notes_by_program": {0: 4}, "durations": [0.5] * 4}]
    r = style_report(rows, {"programs": [0], "ends_on_tonic": 0.9, "p999_seconds": 4.0})
    assert r["foreign_program_samples"] == 0.5 and r["foreign_program_notes"] == pytest.approx(2 / 12)
    assert r["longer_than_real_p999"] == pytest.approx(1 / 12)
    assert r["lasted"] == 0.5 and r["ends_on_tonic"] == 1.0  # a sample without a key is left out
