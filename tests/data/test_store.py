"""`cadenza prepare` and the token store: bad files, atomic writes, splits, clear errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import shared

from cadenza.cli import main
from cadenza.data.ingest import collect_midi_files
from cadenza.data.prepare import prepare
from cadenza.data.store import StoreError, TokenStore, assign_splits, split_of
from cadenza.data.tokenizers import PerformanceTokenizer


@pytest.fixture(scope="module")
def store(midi_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("store") / "s"
    return prepare([midi_folder], out, workers=2, progress=False).store


def test_prepare_keeps_good_files_and_names_bad_ones(store, midi_folder):
    kept = {p.source.split("/")[-1] for p in store.pieces}
    assert kept == {f"piece{i}.mid" for i in range(6)} | {"two_tracks.MID", "with_drums.midi"}
    reasons = {s["source"].split("/")[-1]: s["reason"] for s in store.skipped}
    assert set(reasons) == {"corrupt.mid", "empty.mid", "notes.txt.mid"}
    assert "corrupt MIDI" in reasons["corrupt.mid"]
    assert "no notes" in reasons["empty.mid"]
    assert "not a MIDI file" in reasons["notes.txt.mid"]


def test_store_contents_match_direct_encoding(store):
    tok = PerformanceTokenizer()
    for p in store.pieces:
        assert np.array_equal(store[p.index], tok.encode(p.source).ids)
    m = store.manifest
    assert m["totals"]["tokens"] == int(store.offsets[-1])
    assert all(len(p["sha256"]) == 64 and p["split"] in ("train", "valid", "test") for p in m["pieces"])
    assert m["tokenizer"]["name"] == "performance" and m["tokenizer"]["versions"]["symusic"]


def test_splits_are_deterministic_from_content():
    shas = [f"{i:064x}" for i in range(0, 2**60, 2**52)]
    assert assign_splits(shas, 0.1, 0.1) == assign_splits(shas, 0.1, 0.1)
    assert split_of("0" * 64, 0.1, 0.1) == "test" and split_of("f" * 64, 0.1, 0.1) == "train"
    small = assign_splits(["8" + "0" * 63] * 3, 0.1, 0.1)  # hashing alone would put all in train
    assert sorted(small) == ["test", "train", "valid"]


@pytest.mark.parametrize("n", [1, 2])
def test_few_pieces_keep_train_non_empty_and_say_which_split_is_empty(n, tmp_path):
    from conftest import make_score, write_score

    (tmp_path / "in").mkdir()
    for i in range(n):
        write_score(make_score([[(0, 480, 60 + i, 90), (480, 480, 64, 70)]]), tmp_path / "in" / f"p{i}.mid")
    res = prepare(tmp_path / "in", tmp_path / "s", workers=1, progress=False)
    splits = res.store.totals["splits"]
    assert splits["train"]["pieces"] >= 1 and sum(v["pieces"] for v in splits.values()) == n
    empty = res.store.totals["empty_splits"]
    assert empty == [s for s in ("valid", "test") if splits[s]["pieces"] == 0] and len(empty) == 3 - n
    assert f"the {' and '.join(empty)} split" in res.summary()
    assert assign_splits(["0" * 64], 0.1, 0.1) == ["train"]  # hashing alone would say test


def test_duplicate_files_are_stored_once(midi_folder, tmp_path):
    shutil.copy(midi_folder / "piece0.mid", tmp_path / "copy.mid")
    res = prepare([midi_folder / "piece0.mid", tmp_path / "copy.mid"], tmp_path / "s", workers=1, progress=False)
    assert len(res.store) == 1 and "duplicate of" in res.skipped[0]["reason"]


def test_interrupted_prepare_never_leaves_a_complete_looking_store(midi_folder, tmp_path, monkeypatch):
    out = tmp_path / "s"
    prepare([midi_folder], out, workers=1, progress=False)
    import cadenza.data.ingest as P

    calls = {"n": 0}
    real = P._encode_file

    def dying(path):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(path)

    monkeypatch.setattr(P, "_encode_file", dying)
    with pytest.raises(KeyboardInterrupt):
        prepare([midi_folder], out, workers=1, progress=False)
    with pytest.raises(StoreError, match="interrupted"):
        TokenStore(out)
    assert not list(out.glob(".*.tmp"))


def test_truncated_or_mismatched_store_is_a_clear_error(store, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(store.path, bad)
    with open(bad / "tokens.bin", "r+b") as f:
        f.truncate(100)
    with pytest.raises(StoreError, match="truncated or mismatched; re-run `cadenza prepare`"):
        TokenStore(bad)
    with pytest.raises(StoreError, match="not a token store"):
        TokenStore(tmp_path)


def test_unigram_baseline_is_finite_and_positive(store):
    nll = store.unigram_nll("valid")
    assert 0 < nll < np.log(store.tokenizer.vocab_size)


def test_collect_midi_files_recurses_and_rejects_missing(midi_folder):
    files = collect_midi_files([midi_folder])
    assert any(f.name == "two_tracks.MID" for f in files) and not any(f.suffix == ".txt" for f in files)
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        collect_midi_files([midi_folder / "nope"])


def test_cli_prepare_on_the_shared_midi_folder(tmp_path, capsys):
    folder = shared("midi")
    assert main(["prepare", str(folder), "--out", str(tmp_path / "x"), "--quiet"]) == 0
    out = capsys.readouterr().out
    store = TokenStore(tmp_path / "x")
    skipped = {s["source"].split("/")[-1] for s in store.skipped}
    assert skipped == {"Issue104_Bizarre_Love_Triangle2.mid", "ValueError_Control168.mid", "empty.mid"}
    kept = {p.source.split("/")[-1] for p in store.pieces}
    assert "RunTimeError_unexpected_EOF.mid" in kept
    n_files = len(collect_midi_files([folder]))
    assert len(kept) == n_files - 3
    assert "skipped    3" in out and "Issue104" in out
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["totals"]["skipped"] == 3
