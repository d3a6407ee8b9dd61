"""The 388-event performance vocabulary: golden ids, reference equivalence, round trips, fuzzing."""

from __future__ import annotations

import numpy as np
import pytest
import symusic
from conftest import random_piece, shared
from reference_tokenizer import reference_decode, reference_encode

from cadenza.data.midi import Notes, read_notes, score_to_notes
from cadenza.data.tokenizers import PerformanceTokenizer, TokenizerError, load_tokenizer


def test_golden_vocabulary(tokenizer):
    # Magenta's PerformanceOneHotEncoding order (note-seq performance_encoder_decoder_test).
    assert tokenizer.note_on(0) == 0 and tokenizer.note_on(60) == 60 and tokenizer.note_on(127) == 127
    assert tokenizer.note_off(0) == 128 and tokenizer.note_off(72) == 200 and tokenizer.note_off(127) == 255
    assert tokenizer.time_shift(1) == 256 and tokenizer.time_shift(100) == 355
    assert tokenizer.velocity(1) == 356 and tokenizer.velocity(32) == 387
    assert tokenizer.num_events == 388
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.vocab_size) == (388, 389, 390, 391)
    assert tokenizer.token_name(200) == "NOTE_OFF_72" and tokenizer.token_name(355) == "TIME_SHIFT_100"


def test_golden_tokens_of_a_small_piece(tokenizer):
    # C4 0-0.5 s v80, E4 0.5-1.0 s v80, G4 0-1.5 s v100 (worked out by hand from the spec)
    notes = Notes.from_arrays([0, 0.5, 0], [0.5, 1.0, 1.5], [60, 64, 67], [80, 80, 100])
    expected = [375, 60, 380, 67, 305, 188, 375, 64, 305, 192, 305, 195]
    assert tokenizer.encode_notes(notes).tolist() == expected


@pytest.mark.parametrize("event", range(388))
def test_every_event_id_decodes_and_reencodes(tokenizer, event):
    if event < 128:  # note-on p
        ids = [tokenizer.velocity(16), event, tokenizer.time_shift(7), tokenizer.note_off(event)]
    elif event < 256:  # note-off p
        p = event - 128
        ids = [tokenizer.velocity(16), p, tokenizer.time_shift(7), event]
    elif event < 356:  # time shift
        ids = [tokenizer.velocity(16), 60, event, tokenizer.note_off(60)]
    else:  # velocity bin
        ids = [event, 60, tokenizer.time_shift(3), tokenizer.note_off(60)]
    notes, report = tokenizer.decode_notes(ids)
    assert report.repairs == 0 and len(notes) == 1
    assert tokenizer.encode_notes(notes).tolist() == ids


def test_vectorised_encoder_matches_reference(tokenizer):
    rng = np.random.default_rng(1)
    for _ in range(40):
        notes, _ = score_to_notes(random_piece(rng, int(rng.integers(1, 300))))
        assert tokenizer.encode_notes(notes).tolist() == reference_encode(notes)


def test_vectorised_encoder_matches_reference_on_real_files(tokenizer):
    folder = shared("midi")
    files = sorted(folder.glob("one_track/*.mid")) + sorted(folder.glob("multitrack/*.mid"))
    for f in files:
        notes, _ = read_notes(f)
        assert tokenizer.encode_notes(notes).tolist() == reference_encode(notes), f.name


def test_vectorised_decoder_matches_reference_on_random_ids(tokenizer):
    rng = np.random.default_rng(2)
    for _ in range(300):
        ids = rng.integers(0, tokenizer.vocab_size, size=int(rng.integers(0, 400)))
        notes, report = tokenizer.decode_notes(ids)
        ref_notes, ref_rep = reference_decode(ids)
        got = sorted(zip(np.rint(notes.start * 100).astype(int).tolist(), np.rint(notes.end * 100).astype(int).tolist(),
                         notes.pitch.tolist(), tokenizer.velocity_to_bin(notes.velocity).tolist()))
        assert got == ref_notes
        for k, v in ref_rep.items():
            assert getattr(report, k) == v, k


def _assert_round_trip(tokenizer, notes: Notes):
    ids = tokenizer.encode_notes(notes)
    decoded, report = tokenizer.decode_notes(ids)
    assert report.repairs == 0
    s, e, p, b, stats = tokenizer.quantize(notes)
    assert len(decoded) == len(notes) - stats["grid_merged"]  # no note lost or added
    # every original note is matched by a decoded note of the same pitch within 10 ms
    orig = sorted(zip(notes.pitch.tolist(), notes.start.tolist(), notes.end.tolist(), notes.velocity.tolist()))
    dec = sorted(zip(decoded.pitch.tolist(), decoded.start.tolist(), decoded.end.tolist(), decoded.velocity.tolist()))
    if stats["grid_merged"] == 0:
        for (p0, s0, e0, v0), (p1, s1, e1, v1) in zip(orig, dec):
            assert p0 == p1
            assert abs(s0 - s1) <= 0.01 + 1e-6
            assert abs(e0 - e1) <= 0.01 + 1e-6
            assert tokenizer.velocity_to_bin(v0) == tokenizer.velocity_to_bin(v1)
    assert sorted(set(notes.pitch.tolist())) == sorted(set(decoded.pitch.tolist()))


def test_round_trip_generated_fixtures(tokenizer, midi_folder):
    for f in sorted(midi_folder.glob("piece*.mid")):
        notes, _ = read_notes(f)
        _assert_round_trip(tokenizer, notes)


def test_round_trip_real_piano_files(tokenizer):
    for f in sorted(shared("midi", "one_track").glob("*.mid")):
        notes, _ = read_notes(f)
        _assert_round_trip(tokenizer, notes)
        # and through an actual MIDI file written by the decoder
        score, _ = tokenizer.decode(tokenizer.encode_notes(notes))
        back, _ = score_to_notes(symusic.Score.from_midi(bytes(score.dumps_midi())))
        assert np.array_equal(tokenizer.encode_notes(back), tokenizer.encode_notes(notes)), f.name


def test_decode_repairs_are_counted(tokenizer):
    t = tokenizer
    ids = [t.note_off(40),                      # orphan note-off
           t.note_on(60), t.time_shift(10), t.note_on(60),  # restart: first C4 ends at 0.1 s
           t.time_shift(10), t.note_on(64), t.note_off(64),  # zero-length E4
           t.time_shift(5), t.eos_id, t.note_on(70)]          # C4 still sounding; ids after eos
    notes, r = t.decode_notes(ids)
    assert (r.orphan_note_offs, r.restarted_notes, r.zero_length, r.closed_at_end, r.after_eos) == (1, 1, 1, 1, 1)
    assert notes.pitch.tolist() == [60, 60]
    assert np.allclose(notes.start, [0.0, 0.1]) and np.allclose(notes.end, [0.1, 0.25])


def test_out_of_range_ids_are_rejected_clearly(tokenizer):
    with pytest.raises(TokenizerError, match="id 391 at position 2 is outside the vocabulary"):
        tokenizer.decode([1, 2, 391])
    with pytest.raises(TokenizerError, match="outside"):
        tokenizer.decode([-1])


def test_decode_fuzz_always_gives_readable_midi(tokenizer):
    rng = np.random.default_rng(3)
    for i in range(2000):
        n = int(rng.integers(0, 300))
        if i % 2:  # mostly-grammatical sequences stress the repair paths differently
            ids = rng.choice([0, 1, 2, 128, 129, 130, 256, 300, 355, 356, 387, 388, 389, 390], size=n)
        else:
            ids = rng.integers(0, tokenizer.vocab_size, size=n)
        score, report = tokenizer.decode(ids)
        back = symusic.Score.from_midi(bytes(score.dumps_midi()))
        assert back.note_num() == score.note_num()


def test_config_saves_and_loads_with_versions(tokenizer, tmp_path):
    t = PerformanceTokenizer(velocity_bins=16)
    t.save(tmp_path / "tok.json")
    back = load_tokenizer(tmp_path / "tok.json")
    assert isinstance(back, PerformanceTokenizer) and back.params() == t.params()
    assert back.vocab_size == 100 + 256 + 16 + 3
    cfg = t.to_dict()
    assert cfg["versions"]["cadenza"] and cfg["versions"]["symusic"]


def test_transpose_and_pitch_range(tokenizer):
    notes = Notes.from_arrays([0, 0.5], [0.5, 1.0], [60, 64], [80, 80])
    ids = tokenizer.encode_notes(notes)
    assert tokenizer.pitch_range(ids) == (60, 64)
    up, _ = tokenizer.decode_notes(tokenizer.transpose(ids, 5))
    assert up.pitch.tolist() == [65, 69]
    with pytest.raises(TokenizerError, match="leaves the MIDI range"):
        tokenizer.transpose(ids, 70)


def test_stretch_scales_time(tokenizer):
    rng = np.random.default_rng(4)
    notes, _ = score_to_notes(random_piece(rng, 100))
    ids = tokenizer.encode_notes(notes)
    for factor in (0.95, 1.05, 2.0):
        out, report = tokenizer.decode_notes(tokenizer.stretch(ids, factor))
        assert report.repairs == 0 and len(out) == len(notes) - tokenizer.quantize(notes)[4]["grid_merged"]
        assert out.duration == pytest.approx(notes.duration * factor, rel=0.02, abs=0.05)
