"""The benchmark encodings (issue 5): piano-roll frames and JSB 16th voice grids, and their scoring."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from conftest import shared

from cadenza.bench import jsb16, polyphonic
from cadenza.data.tokenizers import TokenizerError, tokenizer_from_dict
from cadenza.data.tokenizers.frames import FrameTokenizer
from cadenza.data.tokenizers.satb import SATBTokenizer

PROVENANCE_BERNOULLI = {"jsb": 11.06, "nottingham": 10.25, "musedata": 11.51, "piano": 11.05}


@functools.cache
def mat(key: str) -> dict[str, list[np.ndarray]]:
    return polyphonic.load_mat(shared("polyphonic", polyphonic.DATASETS[key]))


@functools.cache
def npz() -> dict[str, list[np.ndarray]]:
    return jsb16.load_npz(shared("jsb16", jsb16.FILENAME))


def reference_encode(roll: np.ndarray, frame_end: int) -> list[int]:
    """The encoding as the issue states it, one frame at a time."""
    out: list[int] = []
    for frame in roll:
        out.extend(int(k) for k in range(frame.size) if frame[k])
        out.append(frame_end)
    return out


def random_rolls(rng: np.random.Generator, n_keys: int = 88) -> list[np.ndarray]:
    rolls = [np.zeros((0, n_keys), bool), np.zeros((5, n_keys), bool), np.ones((3, n_keys), bool)]
    for _ in range(40):
        t = int(rng.integers(1, 60))
        roll = rng.random((t, n_keys)) < rng.choice([0.01, 0.05, 0.3])
        roll[rng.random(t) < 0.2] = False  # empty frames
        roll[rng.random(t) < 0.05] = True  # full frames
        rolls.append(roll)
    return rolls


def bernoulli_token_nll(ids: np.ndarray, p: np.ndarray, tok: FrameTokenizer) -> np.ndarray:
    """Token NLLs of the independent per-key model, written as a model over frame tokens.

    After key k (or at a frame start, k = -1) the next token is key j > k with probability
    p_j * prod_{k<i<j} (1 - p_i), or FRAME_END with prod_{i>k} (1 - p_i). Ends with an EOS NLL
    of 99 that frame scoring must ignore.
    """
    c = np.concatenate(([0.0], np.cumsum(np.log1p(-p))))  # c[m] = sum_{i<m} log(1 - p_i)
    prev = np.concatenate(([-1], ids[:-1]))
    prev = np.where(prev == tok.frame_end_id, -1, prev)
    is_key = ids < tok.n_keys
    key = np.minimum(ids, tok.n_keys - 1)  # any valid index where the token is FRAME_END
    logp = np.where(is_key, np.log(p[key]) + c[key] - c[prev + 1], c[tok.n_keys] - c[prev + 1])
    return np.append(-logp, 99.0)


# ---- frames: the bijection --------------------------------------------------------------------
@pytest.mark.parametrize("key", list(polyphonic.DATASETS))
def test_frame_encoding_is_a_bijection_on_the_benchmark_files(key):
    tok = FrameTokenizer()
    data = mat(key)
    assert tuple(len(data[s]) for s in ("train", "valid", "test")) == polyphonic.OFFICIAL_SPLITS[key]
    for split, rolls in data.items():
        for i, roll in enumerate(rolls):
            ids = tok.encode_roll(roll)
            assert ids.size == roll.sum() + roll.shape[0]
            assert tok.frame_ends(ids).sum() == roll.shape[0]
            back, report = tok.decode_roll_report(ids)
            assert back.shape == roll.shape and (back == roll).all(), f"{key} {split}[{i}]"
            assert report.repairs == 0
    first = data["train"][0]
    assert tok.encode_roll(first).tolist() == reference_encode(first, tok.frame_end_id)


def test_frame_encoding_is_a_bijection_on_random_rolls():
    rng = np.random.default_rng(0)
    for n_keys, low in ((88, 21), (12, 60)):
        tok = FrameTokenizer(low=low, n_keys=n_keys)
        for roll in random_rolls(rng, n_keys):
            ids = tok.encode_roll(roll)
            assert ids.tolist() == reference_encode(roll, tok.frame_end_id)
            back = tok.decode_roll(ids)
            assert back.shape == roll.shape and (back == roll).all()
            # BOS / EOS around a piece change nothing
            wrapped = np.concatenate(([tok.bos_id], ids, [tok.eos_id]))
            assert (tok.decode_roll(wrapped) == roll).all()
    tok = FrameTokenizer()
    assert tok.encode_roll(np.zeros((0, 88), bool)).size == 0
    assert tok.encode_roll(np.zeros((2, 88), bool)).tolist() == [88, 88]
    assert tok.encode_roll(np.ones((1, 88), bool)).tolist() == list(range(89))
    with pytest.raises(TokenizerError, match=r"\(T, 88\)"):
        tok.encode_roll(np.zeros((3, 87), bool))


def test_frames_playback_merges_held_keys_and_reencodes():
    tok = FrameTokenizer(frame_seconds=0.5)
    roll = np.zeros((5, 88), bool)
    roll[0:3, 39] = True  # one C4 held three frames
    roll[[0, 2], 43] = True  # E4 struck twice
    score, report = tok.decode(tok.encode_roll(roll))
    notes = sorted((n.time, n.duration, n.pitch) for n in score.tracks[0].notes)
    q = score.ticks_per_quarter  # 120 bpm: one 0.5 s frame is one quarter
    assert notes == sorted([(0, 3 * q, 60), (0, q, 64), (2 * q, q, 64)])
    assert report.repairs == 0
    # Score -> frames is exact up to trailing empty frames, which have no notes to carry them
    enc = tok.encode(score)
    assert (tok.decode_roll(enc.ids) == roll[:3]).all() and enc.notes == 3
    rng = np.random.default_rng(1)
    for roll in random_rolls(rng)[3:13]:
        last = np.flatnonzero(roll.any(axis=1))
        roll = roll[: last[-1] + 1] if last.size else roll[:0]
        again = tok.decode_roll(tok.encode(tok.decode(tok.encode_roll(roll))[0]).ids)
        assert (again == roll).all()


def test_frames_decode_repairs_and_never_raises_on_garbage():
    tok = FrameTokenizer()
    roll, report = tok.decode_roll_report([5, 3, 3, 88, 89, 7, 7])
    assert roll.shape == (2, 88)
    assert np.flatnonzero(roll[0]).tolist() == [3, 5] and np.flatnonzero(roll[1]).tolist() == [7]
    assert report.extra == {"repeated_in_frame": 2, "out_of_order_in_frame": 1}
    assert report.closed_at_end == 2 and report.special_tokens == 1 and report.repairs == 5
    assert tok.decode_roll_report([1, 88, 91, 4, 4])[1].after_eos == 2
    rng = np.random.default_rng(2)
    for n in (0, 1, 2, 17, 300):
        for _ in range(10):
            ids = rng.integers(0, tok.vocab_size, n)
            roll, report = tok.decode_roll_report(ids)
            eos = np.flatnonzero(ids == tok.eos_id)
            content = ids[: eos[0] if eos.size else n]
            content = content[content <= tok.frame_end_id]
            open_frame = content.size and content[-1] != tok.frame_end_id
            assert roll.shape[0] == np.count_nonzero(content == tok.frame_end_id) + open_frame
            assert (tok.decode_roll(tok.encode_roll(roll)) == roll).all()  # the repaired roll is canonical
            assert report.repairs == report.closed_at_end + sum(report.extra.values())
            assert tok.decode(ids)[0].note_num() == tok.decode(tok.encode_roll(roll))[0].note_num()
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([0, 92])


def test_frames_transpose_and_pitch_range():
    tok = FrameTokenizer()
    roll = np.zeros((3, 88), bool)
    roll[0, [10, 20]] = True
    roll[2, 30] = True
    ids = np.concatenate(([tok.bos_id], tok.encode_roll(roll), [tok.eos_id, tok.pad_id]))
    assert tok.pitch_range(ids) == (31, 51)
    up = tok.transpose(ids, 5)
    special = ids >= tok.n_keys
    assert (up[special] == ids[special]).all() and tok.pitch_range(up) == (36, 56)
    assert (tok.decode_roll(up) == np.roll(roll, 5, axis=1)).all()
    assert tok.pitch_range([88, 88]) is None and tok.pitch_bounds == (21, 108)
    with pytest.raises(TokenizerError, match="21..108"):
        tok.transpose(ids, -11)


def test_window_dataset_transposition_stays_within_the_keys(tmp_path):
    from cadenza.data.dataset import WindowDataset
    from cadenza.data.store import StoreWriter, TokenStore

    tok = FrameTokenizer()
    roll = np.zeros((40, 88), bool)
    roll[::2, 87] = True  # MIDI 108, the top key
    roll[1::2, [40, 44]] = True
    w = StoreWriter(tmp_path / "s", tok)
    w.add(tok.encode_roll(roll), source="top", sha256="0" * 64, split="train")
    w.close([], 0.0, 0.0)
    ds = WindowDataset(TokenStore(tmp_path / "s"), context=16, transpose=6)
    for i in range(50):
        window = ds[i].numpy()
        assert window.max() < tok.vocab_size


# ---- frames: scoring --------------------------------------------------------------------------
def test_frame_nll_equals_the_frame_by_frame_sum():
    tok = FrameTokenizer()
    roll = np.zeros((4, 88), bool)
    roll[0, [39, 43, 46]] = True
    roll[2, 39] = True
    roll[3, [0, 87]] = True
    ids = tok.encode_roll(roll)  # [39 43 46 E] [E] [39 E] [0 87 E]
    nll = np.arange(1, ids.size + 2) / 10.0  # NLL of ids[0] given BOS, ..., then of EOS
    by_frame, pos = [], 0
    for frame in roll:
        n = int(frame.sum()) + 1
        by_frame.append(nll[pos:pos + n].sum())
        pos += n
    total, frames = polyphonic.frame_nll(nll, ids, tok)
    assert frames == 4 and total == pytest.approx(sum(by_frame)) and total == pytest.approx(nll[:-1].sum())
    assert polyphonic.frame_nll(nll[:-1], ids, tok) == (total, frames)  # without the EOS entry
    assert polyphonic.frame_nll([0.7], np.zeros(0, np.int64), tok) == (0.0, 0)
    with pytest.raises(ValueError, match="12 token NLLs for 10 ids"):
        polyphonic.frame_nll(np.ones(12), ids, tok)
    with pytest.raises(ValueError, match="not a frame encoding"):
        polyphonic.frame_nll(np.ones(3), ids[:3], tok)


def test_bernoulli_token_model_gives_the_frame_level_nll():
    """A per-key model written over tokens scores each frame exactly as the frame model does."""
    tok = FrameTokenizer()
    rng = np.random.default_rng(3)
    p = rng.uniform(0.01, 0.6, 88)
    # it is a proper distribution over the next token after any key (or at a frame start)
    for k in (-1, 0, 40, 86):
        after = np.arange(k + 1, 88)
        stay = np.exp(np.concatenate(([0.0], np.cumsum(np.log1p(-p[after])))))
        assert (p[after] * stay[:-1]).sum() + stay[-1] == pytest.approx(1.0)
    for roll in random_rolls(rng):
        ids = tok.encode_roll(roll)
        total, frames = polyphonic.frame_nll(bernoulli_token_nll(ids, p, tok), ids, tok)
        direct = -(roll * np.log(p) + ~roll * np.log1p(-p)).sum()
        assert frames == roll.shape[0] and total == pytest.approx(direct, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("key", list(polyphonic.DATASETS))
def test_per_key_bernoulli_matches_provenance(key):
    data = mat(key)
    nll = polyphonic.per_key_bernoulli_nll(data["train"], data["test"])
    assert nll == pytest.approx(PROVENANCE_BERNOULLI[key], abs=0.1)
    assert polyphonic.PUBLISHED["per-key frequency (trivial baseline)"][key] == PROVENANCE_BERNOULLI[key]


@pytest.mark.parametrize("key", list(polyphonic.DATASETS))
def test_build_store_keeps_the_official_splits(key, tmp_path):
    store = polyphonic.build_store(shared("polyphonic", polyphonic.DATASETS[key]), tmp_path / key)
    counts = tuple(len(store.split(s)) for s in ("train", "valid", "test"))
    assert counts == polyphonic.OFFICIAL_SPLITS[key]
    tok = store.tokenizer
    assert isinstance(tok, FrameTokenizer) and tok.frame_seconds == polyphonic.FRAME_SECONDS[key]
    test = store.split("test")
    assert test[17].source == f"{polyphonic.DATASETS[key]}:test:17"
    data = mat(key)
    assert (tok.decode_roll(store[test[17].index]) == data["test"][17]).all()
    assert store.manifest["benchmark"]["frames"]["test"] == sum(r.shape[0] for r in data["test"])
    if key == "jsb":
        # the token route through the store reproduces the trivial baseline exactly
        p = polyphonic.key_probabilities(data["train"])
        nlls = [bernoulli_token_nll(np.asarray(store[q.index], np.int64), p, tok) for q in test]
        score = polyphonic.score_split(store, nlls, "test")
        assert score.units == store.manifest["benchmark"]["frames"]["test"] and score.pieces == 77
        direct = polyphonic.per_key_bernoulli_nll(data["train"], data["test"])
        assert score.nll == pytest.approx(direct, rel=1e-9)
        with pytest.raises(ValueError, match="76 NLL arrays for 77 test pieces"):
            polyphonic.score_split(store, nlls[:-1], "test")


def test_load_mat_errors_name_the_file(tmp_path):
    with pytest.raises(polyphonic.BenchDataError, match="JSB_Chorales.mat: no such file"):
        polyphonic.load_mat(tmp_path / "JSB_Chorales.mat")
    bad = tmp_path / "Nottingham.mat"
    bad.write_bytes(b"not matlab")
    with pytest.raises(polyphonic.BenchDataError, match="Nottingham.mat: not a readable MATLAB file"):
        polyphonic.load_mat(bad)
    with pytest.raises(polyphonic.BenchDataError, match="other.mat: not one of the benchmark files"):
        polyphonic.dataset_key(tmp_path / "other.mat")


def test_format_table_lists_published_and_cadenza_rows():
    table = polyphonic.format_table([{"model": "cadenza transformer", "jsb": 5.0123, "note": "seed 0"}])
    assert "| RNN-NADE (Boulanger-Lewandowski et al. 2012) | 5.19 | 2.31 | 5.60 | 7.05 | published |" in table
    assert "| cadenza transformer | 5.012 | - | - | - | seed 0 |" in table
    assert "| Music Transformer (Huang et al. 2018) | 0.335 | - | published |" in jsb16.format_table()


# ---- JSB 16th ---------------------------------------------------------------------------------
def test_satb_round_trips_the_real_file():
    tok = SATBTokenizer()
    data = npz()
    assert tuple(len(data[s]) for s in ("train", "valid", "test")) == jsb16.OFFICIAL_SPLITS
    for split, grids in data.items():
        for i, grid in enumerate(grids):
            ids = tok.encode_grid(grid)
            assert ids.size == 4 * grid.shape[0]
            assert np.array_equal(tok.decode_grid(ids), grid, equal_nan=True), f"{split}[{i}]"
    lo = min(np.nanmin(g) for gs in data.values() for g in gs)
    hi = max(np.nanmax(g) for gs in data.values() for g in gs)
    assert (lo, hi) == (36, 81)  # the documented range; the data-range tokenizer holds it
    narrow = SATBTokenizer(low=36, n_pitches=46)
    g = data["valid"][0]
    assert np.array_equal(narrow.decode_grid(narrow.encode_grid(g)), g, equal_nan=True)


def test_satb_round_trips_random_grids_and_merges_held_notes():
    tok = SATBTokenizer()
    rng = np.random.default_rng(4)
    for t in (0, 1, 7, 64):
        grid = rng.integers(30, 90, (t, 4)).astype(np.float64)
        grid[rng.random((t, 4)) < 0.2] = np.nan
        assert np.array_equal(tok.decode_grid(tok.encode_grid(grid)), grid, equal_nan=True)
    nan = np.nan
    grid = np.array([[72, 67, 60, 48], [72, 67, nan, 48], [74, 67, 60, 48], [74, nan, 60, 47]], float)
    ids = tok.encode_grid(grid)
    assert ids[:8].tolist() == [72, 67, 60, 48, 72, 67, 128, 48]
    score, report = tok.decode(ids)
    assert [t.name for t in score.tracks] == ["soprano", "alto", "tenor", "bass"] and report.repairs == 0
    q16 = score.ticks_per_quarter // 4  # a 0.125 s step is a 16th at 120 bpm
    voices = [sorted((n.time // q16, n.duration // q16, n.pitch) for n in t.notes) for t in score.tracks]
    assert voices == [[(0, 2, 72), (2, 2, 74)], [(0, 3, 67)], [(0, 1, 60), (2, 2, 60)],
                      [(0, 3, 48), (3, 1, 47)]]
    with pytest.raises(TokenizerError, match="voice tenor"):
        tok.encode_grid(np.array([[60, 60, 60.5, 60]]))
    with pytest.raises(TokenizerError, match="not a pitch in 36..81"):
        SATBTokenizer(low=36, n_pitches=46).encode_grid(np.array([[90, 60, 60, 60]]))


def test_satb_decode_repairs_garbage_and_transposes():
    tok = SATBTokenizer()
    grid, report = tok.decode_grid_report([60, 130, 62, 64, 65, 66, 131, 1])
    assert grid.shape == (2, 4) and np.isnan(grid[1, 1:]).all()
    assert report.extra == {"voices_filled": 3} and report.special_tokens == 1 and report.after_eos == 1
    rng = np.random.default_rng(5)
    for n in (0, 1, 3, 4, 101):
        tok.decode(rng.integers(0, tok.vocab_size, n))
    ids = np.array([tok.bos_id, 60, 128, 50, 40, tok.eos_id])
    up = tok.transpose(ids, 3)
    assert up.tolist() == [tok.bos_id, 63, 128, 53, 43, tok.eos_id] and tok.pitch_range(up) == (43, 63)
    narrow = SATBTokenizer(low=36, n_pitches=46)
    with pytest.raises(TokenizerError, match="36..81"):
        narrow.transpose(narrow.encode_grid(np.array([[80, 70, 60, 50]])), 2)


def test_jsb16_store_and_per_token_score(tmp_path):
    store = jsb16.build_store(shared("jsb16", jsb16.FILENAME), tmp_path / "jsb16")
    assert tuple(len(store.split(s)) for s in ("train", "valid", "test")) == jsb16.OFFICIAL_SPLITS
    valid = store.split("valid")
    assert valid[3].source == "Jsb16thSeparated.npz:valid:3"
    back = store.tokenizer.decode_grid(store[valid[3].index])
    assert np.array_equal(back, npz()["valid"][3], equal_nan=True)
    nlls = [np.append(np.full(len(p), 0.5), 40.0) for p in valid]  # the EOS entry is left out
    score = jsb16.score_split(store, nlls, "valid")
    assert score.nll == pytest.approx(0.5)
    assert score.units == 4 * store.manifest["benchmark"]["steps"]["valid"]
    tok = store.tokenizer
    assert jsb16.per_token_nll([0.1, 0.2, 0.3, 0.4], [60, 60, 128, 40], tok) == (pytest.approx(1.0), 4)
    with pytest.raises(ValueError, match="not a voice grid"):
        jsb16.per_token_nll([0.1, 0.2], [60, 60], tok)


def test_load_npz_errors_name_the_file(tmp_path):
    with pytest.raises(polyphonic.BenchDataError, match="Jsb16thSeparated.npz: no such file"):
        jsb16.load_npz(tmp_path / "Jsb16thSeparated.npz")
    bad = tmp_path / "bad.npz"
    np.savez(bad, train=np.zeros((2, 3)))
    with pytest.raises(polyphonic.BenchDataError, match="bad.npz: "):
        jsb16.load_npz(bad)


# ---- registry ---------------------------------------------------------------------------------
@pytest.mark.parametrize("tok", [FrameTokenizer(), FrameTokenizer(low=36, n_keys=48, frame_seconds=0.25),
                                 SATBTokenizer(), SATBTokenizer(low=36, n_pitches=46, step_seconds=0.1)])
def test_tokenizers_rebuild_from_their_dict(tok):
    config = json.loads(json.dumps(tok.to_dict()))
    again = tokenizer_from_dict(config)
    assert type(again) is type(tok) and again.params() == tok.params() and again.vocab_size == tok.vocab_size
    assert again.same_as(config)
    names = [tok.token_name(i) for i in range(tok.vocab_size)]
    assert len(set(names)) == tok.vocab_size and names[-3:] == ["PAD", "BOS", "EOS"]


def test_satb_training_windows_start_on_a_soprano_token(tmp_path):
    from cadenza.data.dataset import WindowDataset
    from cadenza.data.store import StoreWriter, TokenStore

    tok = SATBTokenizer()
    rng = np.random.default_rng(0)
    grid = rng.integers(40, 80, size=(200, 4)).astype(float)
    ids = tok.encode_grid(grid)
    w = StoreWriter(tmp_path / "s", tok)
    w.add(ids, source="g", sha256="1" * 64, split="train")
    w.close([], 0.0, 0.0)
    ds = WindowDataset(TokenStore(tmp_path / "s"), context=33, seed=2)
    view = np.concatenate([[tok.bos_id], ids, [tok.eos_id]])
    for i in range(40):
        window = ds[i].numpy()
        starts = [s for s in range(len(view) - 33) if np.array_equal(view[s:s + 34], window)]
        assert starts and (starts[0] == 0 or (starts[0] - 1) % 4 == 0)


def test_hardware_records_the_thread_count():
    # Wall times in docs/benchmarks.md are only comparable when the thread count is known.
    import torch

    from cadenza.bench.run import hardware as _hardware

    assert _hardware("cpu").endswith(f"{torch.get_num_threads()} torch threads")


def test_bench_takes_overrides_written_after_the_options():
    # `bench polyphonic` has a positional before the key=value list, which argparse alone rejects.
    from cadenza.cli import parse_args

    a = parse_args(["bench", "polyphonic", "--dataset", "jsb", "--data", "x.mat", "--out", "r", "--quiet",
                    "batch_size=2", "lr=1e-4"])
    assert a.overrides == ["batch_size=2", "lr=1e-4"] and a.quiet and a.out == "r"
    with pytest.raises(SystemExit):
        parse_args(["bench", "polyphonic", "--data", "x.mat", "--no-such-flag"])
