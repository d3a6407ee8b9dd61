"""Built-in corpora: converted once with music21 (no network), cached, failures named."""

from __future__ import annotations

import pytest

import cadenza.data.corpora as C


def _must_not_convert_marked(args):
    import json
    from pathlib import Path

    unit, out = args
    marker = C._marker(Path(out), C._unit_key(unit)[2])
    assert marker.exists(), f"{unit} converted twice"
    return json.loads(marker.read_text())


def test_materialize_converts_caches_and_names_failures(fake_corpus, tmp_path, monkeypatch):
    res = C.materialize("fake", workers=1, progress=False)
    names = sorted(p.name for p in res.midi)
    assert names == ["tunes.abc-0000.mid", "tunes.abc-0001.mid"]
    assert all(p.stat().st_size > 0 and p.parent == tmp_path / "cache" / "corpora" / "fake" for p in res.midi)
    assert [f["source"] for f in res.failures] == ["broken.abc"]
    assert "music21 cannot parse it" in res.failures[0]["reason"]
    # the second call converts nothing: it must not even parse the sources again
    monkeypatch.setattr(C, "_convert_source", _must_not_convert_marked)
    again = C.materialize("fake", workers=1, progress=False)
    assert sorted(p.name for p in again.midi) == names and len(again.failures) == 1


def test_unknown_corpus_lists_the_known_ones():
    with pytest.raises(KeyError, match="available: bach, palestrina, irish"):
        C.materialize("nope")


def test_builtin_corpora_exist_in_music21():
    for name in ("bach", "essen"):
        files = C.source_files(C.CORPORA[name])
        assert len(files) > 25
    assert len(C.source_files(C.CORPORA["bach"])) >= 400


def test_an_abc_book_is_split_into_tunes_that_convert_alone(fake_corpus, tmp_path):
    header, tunes = C.split_abc("% a book\nL:1/8\n\nX:1\nT:A\nK:C\nCDE|\n\nX:2\nT:B\nK:G\nGAB|\n")
    assert header == "% a book\nL:1/8\n\n" and [t.splitlines()[1] for t in tunes] == ["T:A", "T:B"]
    res = C.materialize("fake", workers=1, progress=False, only={"tunes.abc#1"})
    assert [p.name for p in res.midi] == ["tunes.abc-0001.mid"]  # one tune, without the rest of the book
    assert res.sources == {"tunes.abc-0001.mid": "tunes.abc#1"}


def test_sources_come_from_the_units_even_with_markers_of_older_versions(fake_corpus, tmp_path):
    import json

    first = C.materialize("fake", workers=1, progress=False)
    for marker in (tmp_path / "cache" / "corpora" / "fake").glob(f".*.done-v{C.CONVERSION}.json"):
        old = json.loads(marker.read_text())
        old.pop("source", None)  # markers written before sources were recorded
        marker.write_text(json.dumps(old))
    again = C.materialize("fake", workers=1, progress=False)
    assert again.sources == first.sources == {"tunes.abc-0000.mid": "tunes.abc#0", "tunes.abc-0001.mid": "tunes.abc#1"}


def test_converted_midi_keeps_the_bars_of_a_pickup_and_a_split_bar(fake_corpus, tmp_path):
    # music21 writes a pickup as a first bar of the full signature, which shifts every bar line;
    # the conversion writes the score's own bars: the pickup as 1/4, then 3/4, and a bar split at a
    # repeat sign as one bar
    import symusic

    (fake_corpus / "fakefolk" / "tunes.abc").write_text(
        "X:1\nT:Pickup\nM:3/4\nL:1/4\nK:C\nG | c2 d | e2 :| d | e3 |]\n")
    res = C.materialize("fake", workers=1, progress=False, only={"tunes.abc#0"})
    score = symusic.Score(str(res.midi[0]))
    tpq = score.ticks_per_quarter
    assert [(t.time / tpq, t.numerator, t.denominator) for t in score.time_signatures] == [(0, 1, 4), (1, 3, 4)]
    assert score.tracks[0].notes[0].time == 0  # the pickup still sounds first, without a rest before it


def test_prepare_holds_out_exactly_the_pieces_it_is_given(fake_corpus, tmp_path):
    # a new model measured on the pieces an older one was: those held out, every other one trained on
    from cadenza.data.prepare import prepare

    store = prepare(corpus="fake", out=tmp_path / "store", tokenizer="notes", progress=False, workers=1,
                    held_out={"fake:tunes.abc#1": "test"}).store
    splits = {p["origin"]: p["split"] for p in store.manifest["pieces"]}
    assert splits == {"fake:tunes.abc#0": "train", "fake:tunes.abc#1": "test"}
