"""The optional MidiTok adapter: any MidiTok tokenizer behind cadenza's interface."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("miditok")

from cadenza.data.midi import read_notes
from cadenza.data.prepare import prepare
from cadenza.data.store import TokenStore
from cadenza.data.tokenizers import get_tokenizer, tokenizer_from_dict


@pytest.mark.parametrize("kind", ["REMI", "TSD", "MIDILike"])
def test_adapter_round_trips_pitches_and_rebuilds_from_config(kind, midi_folder):
    tok = get_tokenizer(f"miditok:{kind}")
    f = midi_folder / "piece1.mid"
    enc = tok.encode(f)
    assert enc.ids.size > 0 and int(enc.ids.max()) < tok.vocab_size
    score, report = tok.decode(enc.ids)
    notes, _ = read_notes(f)
    decoded_pitches = sorted(n.pitch for t in score.tracks for n in t.notes)
    in_range = sorted(p for p in notes.pitch.tolist() if 21 <= p <= 108)  # MidiTok's default piano range
    assert decoded_pitches == in_range
    again = tokenizer_from_dict(tok.to_dict())
    assert np.array_equal(again.encode(f).ids, enc.ids)


def test_adapter_decodes_garbage_into_playable_notes():
    """A model's raw output never crashes decoding, and what comes out is real music: pitches in
    MidiTok's range, positive durations, and specials skipped and counted."""
    tok = get_tokenizer("miditok:REMI")
    rng = np.random.default_rng(0)
    notes_seen = 0
    for _ in range(50):
        ids = rng.integers(0, tok.vocab_size, 200)
        score, report = tok.decode(ids)
        notes = [n for t in score.tracks for n in t.notes]
        notes_seen += len(notes)
        assert all(21 <= n.pitch <= 108 and n.duration > 0 for n in notes)
        eos = np.flatnonzero(ids == tok.eos_id)
        body = ids[: eos[0]] if eos.size else ids
        assert report.special_tokens == np.isin(body, [tok.pad_id, tok.bos_id, tok.eos_id]).sum()
    assert notes_seen > 0


def test_adapter_refuses_multi_vocabulary_tokenizers_and_reports_decode_failures(monkeypatch):
    from cadenza.data.tokenizers import TokenizerError

    with pytest.raises(TokenizerError, match="one id per token"):
        get_tokenizer("miditok:CPWord")
    tok = get_tokenizer("miditok:REMI")

    def broken(seqs):
        raise KeyError("Bar_None")

    monkeypatch.setattr(tok.miditok, "decode", broken)
    with pytest.raises(TokenizerError, match="MidiTok REMI cannot decode these 3 ids.*Bar_None"):
        tok.decode([5, 6, 7])


def test_store_with_a_miditok_tokenizer(midi_folder, tmp_path):
    res = prepare([midi_folder], tmp_path / "s", tokenizer=get_tokenizer("miditok:REMI"), workers=1, progress=False)
    store = TokenStore(tmp_path / "s")
    assert store.tokenizer.name == "miditok" and len(store) == len(res.store)
