"""The note-level vocabulary: pinned ids, a golden sequence, exact round trips on the grid, controls."""

from __future__ import annotations

import numpy as np
import pytest

from cadenza.data.midi import DRUMS, Notes
from cadenza.data.tokenizers.note_grid import DURATIONS, GridNotes
from cadenza.data.tokenizers.notes import NoteTokenizer
from tests.conftest import make_score, random_piece, shared

tok = NoteTokenizer()
FIELDS = ("onset", "duration", "program", "pitch", "velocity")


def same(a: GridNotes, b: GridNotes) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS)


def test_ids_are_pinned():
    assert tok.vocab_size == 712
    assert (tok.shift(1), tok.shift(100), tok.note(0), tok.note(60), tok.control_note(60)) == (0, 99, 100, 160, 288)
    assert (tok.duration(0), tok.velocity(1), tok.velocity(32), tok.instrument(0), tok.instrument(DRUMS)) == (
        356, 546, 577, 578, 706)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.autoregress_id, tok.anticipate_id) == (707, 708, 709, 710, 711)
    assert [tok.token_name(i) for i in (0, 160, 288, 356, 577, 706, 711)] == [
        "SHIFT_1", "NOTE_60", "CONTROL_NOTE_60", "DURATION_0", "VELOCITY_32", "INSTRUMENT_128", "ANTICIPATE"]
    assert DURATIONS.size == 190 and DURATIONS[99] == 100 and DURATIONS[-1] == 1000


def test_golden_sequence():
    # 120 bpm, 480 tpq: a C major chord of half a second, then E for 3 s on the violin, drums on a track
    score = make_score([[(0, 480, 60, 100), (0, 480, 64, 100), (0, 480, 67, 100)],
                        [(480, 2880, 76, 100)], [(960, 60, 36, 90)]], drums=(2,))
    score.tracks[1].program = 40
    ids = tok.encode(score).ids
    # velocity 100 -> bin 25, 90 -> 23; 0.5 s -> DURATION_49, 3 s -> DURATION_139, 60 ms -> DURATION_5
    assert [tok.token_name(i) for i in ids] == [
        "VELOCITY_25", "INSTRUMENT_0", "NOTE_60", "DURATION_49", "NOTE_64", "DURATION_49", "NOTE_67", "DURATION_49",
        "SHIFT_50", "INSTRUMENT_40", "NOTE_76", "DURATION_139",
        "SHIFT_50", "VELOCITY_23", "INSTRUMENT_128", "NOTE_36", "DURATION_5"]
    assert DURATIONS[[49, 139, 5]].tolist() == [50, 300, 6]


def test_round_trip_is_exact_on_the_grid():
    rng = np.random.default_rng(0)
    for _ in range(20):
        notes = _random_notes(rng, 300)
        grid, _ = tok.quantize(notes)
        ids = tok.encode(notes).ids
        events, controls, report = tok.decode_grid(ids)
        assert same(events, grid) and not len(controls) and report.repairs == 0
        assert np.array_equal(tok.encode_grid(events), ids)
        again, _ = tok.quantize(tok.to_grid_notes(events))
        assert same(again, grid)  # grid notes are a fixed point of quantisation


def test_controls_come_back_unchanged_and_anticipated():
    rng = np.random.default_rng(1)
    grid, _ = tok.quantize(_random_notes(rng, 400))
    given = rng.random(len(grid)) < 0.3
    controls = grid.take(given)
    controls.velocity[:] = 0
    ids = np.concatenate([[tok.anticipate_id], tok.encode_grid(grid.take(~given), controls, clock=-tok.lead)])
    events, back, report = tok.decode_grid(ids)
    assert same(events, grid.take(~given)) and same(back, controls) and report.repairs == 0
    # each control is written `anticipation` seconds before it sounds
    clock, places = -tok.lead, []
    for i in ids[1:]:
        if i < tok.note_offset:
            clock += i + 1
        elif tok.control_offset <= i < tok.duration_offset:
            places.append(clock)
    assert np.array_equal(np.array(places) + tok.lead, controls.onset)


def test_quantisation_rules():
    notes = Notes.from_arrays([0.0, 0.0, 1.0, 2.0, 2.004], [0.5, 0.8, 14.0, 2.6, 2.3], [60, 60, 62, 64, 64],
                              [80, 80, 80, 80, 80], [0, 0, 0, 0, 0])
    grid, stats = tok.quantize(notes)
    assert stats == {"grid_merged": 2, "grid_truncated": 0, "long_notes_cut": 1}
    assert grid.onset.tolist() == [0, 100, 200]
    assert DURATIONS[grid.duration].tolist() == [80, 1000, 60]  # unisons: the longest; 13 s cut to 10 s
    overlapping = Notes.from_arrays([0.0, 0.3], [1.0, 0.6], [60, 60], [80, 80], [0, 0])
    grid, stats = tok.quantize(overlapping)
    assert DURATIONS[grid.duration].tolist() == [30, 30] and stats["grid_truncated"] == 1


def test_primer_cut_keeps_whole_notes():
    score = make_score([[(0, 960, 60, 90), (960, 960, 62, 90), (1920, 480, 64, 90)]])
    events, _, _ = tok.decode_grid(tok.encode_primer(score, seconds=1.5))
    assert events.pitch.tolist() == [60, 62] and DURATIONS[events.duration].tolist() == [100, 100]


def test_real_files_round_trip():
    folder = shared("midi", "multitrack")
    for path in sorted(folder.glob("*.mid")):
        notes, _ = tok.read(path)
        grid, _ = tok.quantize(notes)
        ids = tok.encode(path).ids
        events, _, report = tok.decode_grid(ids)
        assert same(events, grid) and report.repairs == 0, path.name
        assert set(np.unique(grid.program)) > {DRUMS}, path.name  # instruments and drums kept


def test_decoding_repairs_what_a_model_may_write():
    ids = [tok.note(60), tok.shift(10), tok.duration(5), tok.note(62), tok.duration(5), tok.note(64)]
    events, _, report = tok.decode_grid(ids)
    assert events.pitch.tolist() == [62]
    assert report.extra == {"notes_without_duration": 2, "durations_without_note": 1}


def test_a_score_holds_one_track_per_instrument():
    score = make_score([[(0, 480, 60, 90)], [(0, 480, 48, 90)], [(0, 120, 38, 100)]], drums=(2,))
    score.tracks[1].program = 32
    out, _ = tok.decode(tok.encode(score).ids)
    assert sorted((t.program, t.is_drum, t.note_num()) for t in out.tracks) == [(0, False, 1), (0, True, 1),
                                                                             (32, False, 1)]


@pytest.mark.parametrize("bad", [0, 61])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError, match="anticipation"):
        NoteTokenizer(anticipation=bad)


def _random_notes(rng: np.random.Generator, n: int) -> Notes:
    """Random notes on three instruments and the drums, from `random_piece`'s rhythms."""
    from cadenza.data.midi import score_to_notes

    notes, _ = score_to_notes(random_piece(rng, n), programs=True)
    program = rng.choice([0, 40, 73, DRUMS], size=len(notes))
    return Notes.from_arrays(notes.start, notes.end, notes.pitch, notes.velocity, program)
