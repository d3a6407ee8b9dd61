"""MIDI reading policies: merge, drums, sustain pedal, same-pitch restarts, zero length, tempo."""

from __future__ import annotations

import numpy as np
import pytest
import symusic
from conftest import make_score

from cadenza.data.midi import MidiReadError, load_score, notes_to_score, read_notes, score_to_notes


def _notes(score, **kw):
    return score_to_notes(symusic.Score.from_midi(bytes(score.dumps_midi())), **kw)


def test_non_drum_tracks_are_merged_and_drums_dropped_and_counted():
    s = make_score([[(0, 480, 60, 80)], [(240, 480, 48, 70)], [(0, 120, 36, 100), (480, 120, 38, 100)]], drums=(2,))
    notes, stats = _notes(s)
    assert notes.by_time().pitch.tolist() == [60, 48] and notes.pitch.tolist() == [48, 60]
    assert (stats.tracks_merged, stats.drum_tracks, stats.drum_notes) == (2, 1, 2)


def test_tempo_map_is_honoured():
    # quarter = 0.5 s for the first beat, then 1.0 s (60 bpm)
    s = make_score([[(0, 480, 60, 80), (480, 480, 62, 80), (960, 480, 64, 80)]], tempos=((0, 120.0), (480, 60.0)))
    notes, _ = _notes(s)
    assert np.allclose(notes.start, [0.0, 0.5, 1.5], atol=1e-4)
    assert np.allclose(notes.end, [0.5, 1.5, 2.5], atol=1e-4)


def test_sustain_pedal_lengthens_notes_like_magenta():
    # pedal down from 0.25 s to 1.5 s; 120 bpm, 480 tpq -> 960 ticks per second
    notes_in = [(0, 120, 60, 80),      # ends at 0.125 s, before the pedal: unchanged
                (0, 480, 64, 80),      # ends at 0.5 s, under the pedal: held until 1.5 s
                (960, 960, 67, 80),    # ends at 2.0 s, after the pedal: unchanged
                (240, 240, 72, 80)]    # ends at 0.5 s exactly... under the pedal: held
    s = make_score([notes_in], pedals={0: [(240, 1440)]})
    notes, stats = _notes(s)
    ends = dict(zip(notes.pitch.tolist(), notes.end.tolist()))
    assert ends[60] == pytest.approx(0.125, abs=1e-3)
    assert ends[64] == pytest.approx(1.5, abs=1e-3)
    assert ends[67] == pytest.approx(2.0, abs=1e-3)
    assert ends[72] == pytest.approx(1.5, abs=1e-3)
    assert stats.pedal_extended == 2
    unsustained, _ = _notes(s, sustain=False)
    assert dict(zip(unsustained.pitch.tolist(), unsustained.end.tolist()))[64] == pytest.approx(0.5, abs=1e-3)


def test_pedal_held_restrike_ends_the_earlier_note():
    # both C4s are held by the pedal; the second strike must end the first
    s = make_score([[(0, 240, 60, 80), (480, 240, 60, 90)]], pedals={0: [(0, 1920)]})
    notes, stats = _notes(s)
    assert notes.pitch.tolist() == [60, 60]
    assert notes.end[0] == pytest.approx(notes.start[1])
    assert notes.end[1] == pytest.approx(2.0, abs=1e-3)
    assert stats.overlaps_truncated == 1


def test_same_pitch_overlap_across_tracks_and_zero_length_notes():
    s = make_score([[(0, 960, 60, 80), (100, 0, 62, 80)], [(480, 960, 60, 70)]])
    notes, stats = _notes(s)
    assert notes.pitch.tolist() == [60, 60]
    assert notes.end[0] == pytest.approx(0.5, abs=1e-3)  # cut where the other track re-strikes C4
    assert stats.zero_length == 1 and stats.overlaps_truncated == 1


def test_unisons_merge_into_the_longest_note_at_the_loudest_velocity():
    """The same note on two tracks is one note: not a zero-length note, not an overlap."""
    s = make_score([[(0, 480, 60, 127), (960, 480, 64, 50)], [(0, 960, 60, 109), (960, 240, 64, 90)]])
    notes, stats = _notes(s)
    assert notes.pitch.tolist() == [60, 64]
    assert notes.end.tolist() == pytest.approx([1.0, 1.5], abs=1e-3)  # the longer copy's release
    assert notes.velocity.tolist() == [127, 90]  # the loudest copy's velocity, whichever track
    assert (stats.unisons_merged, stats.zero_length, stats.overlaps_truncated) == (2, 0, 0)
    assert stats.notes_in == 4 and stats.notes_out == 2


def test_bad_input_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.mid"
    bad.write_text("hello")
    with pytest.raises(MidiReadError, match=r"bad\.mid: not a MIDI file"):
        read_notes(bad)
    with pytest.raises(MidiReadError, match=r"missing\.mid: cannot read file"):
        load_score(tmp_path / "missing.mid")


def test_notes_to_score_writes_what_it_was_given():
    notes, _ = _notes(make_score([[(0, 480, 60, 80), (480, 240, 67, 100)]]))
    back, _ = _notes(notes_to_score(notes))
    assert np.allclose(back.start, notes.start, atol=2e-3) and np.allclose(back.end, notes.end, atol=2e-3)
    assert back.velocity.tolist() == notes.velocity.tolist()


def test_tick_to_seconds_matches_symusic_on_files_with_tempo_changes():
    from conftest import shared

    for f in sorted(shared("midi", "multitrack").glob("*.mid"))[:5]:
        score = symusic.Score(str(f))
        ours, _ = score_to_notes(score)
        theirs, _ = score_to_notes(score.to("second"))  # symusic's own conversion (float32)
        assert len(ours) == len(theirs)
        assert np.allclose(ours.start, theirs.start, atol=2e-3) and np.allclose(ours.end, theirs.end, atol=2e-3)


def test_tempo_before_first_tempo_event_is_120_bpm_and_last_of_one_tick_wins():
    s = make_score([[(0, 480, 60, 80), (960, 480, 62, 80)]], tempos=((480, 30.0), (480, 60.0)))
    notes, _ = _notes(s)
    # beat 1 at 120 bpm (0.5 s), then 60 bpm (1 s per beat): the second note starts at 1.5 s
    assert np.allclose(notes.by_time().start, [0.0, 1.5], atol=1e-6)
