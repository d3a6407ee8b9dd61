"""The data statistics sampling defaults come from: onset polyphony, per style."""

from __future__ import annotations

import numpy as np
from conftest import make_score, write_score

import cadenza
from cadenza.data.midi import Notes
from cadenza.data.statistics import onset_polyphony, polyphony_stats


def notes(*spans) -> Notes:
    start, end = zip(*spans)
    return Notes.from_arrays(start, end, [60 + i for i in range(len(spans))], [80] * len(spans))


def test_onset_polyphony_counts_what_sounds_when_each_note_starts():
    # a three-note chord, then a melody note starting exactly as the chord ends, then one inside it
    n = notes((0.0, 1.0), (0.0, 1.0), (0.0, 2.0), (1.0, 1.5), (1.2, 1.4))
    assert onset_polyphony(n).tolist() == [3, 3, 3, 2, 3]
    assert onset_polyphony(Notes.empty()).size == 0


def test_polyphony_stats_per_style(tmp_path):
    tpq = 480  # one note (or chord) per beat, each ending as the next starts
    for style, chord in (("folk", (60,)), ("chorale", (48, 55, 64, 67))):
        (tmp_path / "in" / style).mkdir(parents=True)
        for k in range(3):  # files differ (a store keeps one copy of identical music)
            track = [(i * tpq, tpq, p + k + i % 3, 80) for i in range(40) for p in chord]
            write_score(make_score([track]), tmp_path / "in" / style / f"{k}.mid")
    store = cadenza.prepare(tmp_path / "in", tmp_path / "store", styles_from_folders=True, workers=1,
                            progress=False, valid_fraction=0.0, test_fraction=0.0).store
    stats = polyphony_stats(store)
    assert stats["styles"] == {"folk": 1, "chorale": 4} and stats["all"] == 4
    assert polyphony_stats(store, split="valid") is None  # no pieces, no figure
    assert np.isclose(stats["percentile"], 99)
