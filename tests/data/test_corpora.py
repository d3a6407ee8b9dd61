"""Built-in corpora: converted once with music21 (no network), cached, failures named."""

from __future__ import annotations

import pytest

import cadenza.data.corpora as C


def _must_not_convert_marked(args):
    import json
    from pathlib import Path

    unit, out = args
    marker = Path(out) / f".{C._unit_key(unit)[2]}.done.json"
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
    for marker in (tmp_path / "cache" / "corpora" / "fake").glob(".*.done.json"):
        old = json.loads(marker.read_text())
        old.pop("source", None)  # markers written before sources were recorded
        marker.write_text(json.dumps(old))
    again = C.materialize("fake", workers=1, progress=False)
    assert again.sources == first.sources == {"tunes.abc-0000.mid": "tunes.abc#0", "tunes.abc-0001.mid": "tunes.abc#1"}
