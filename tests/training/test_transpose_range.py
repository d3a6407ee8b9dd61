"""Transposition within the voices' ranges (`transpose_range = "data"`): every voice of every
training window stays inside the range it has in the training split."""

from __future__ import annotations

import numpy as np
import pytest

from cadenza.data.dataset import WindowDataset
from cadenza.data.store import StoreWriter, TokenStore
from cadenza.data.tokenizers.frames import FrameTokenizer
from cadenza.data.tokenizers.satb import SATBTokenizer
from cadenza.training.augment import RangeTransposed, voice_ranges

# (lowest, highest) MIDI pitch of soprano, alto, tenor, bass in the grids below
RANGES = ((60, 79), (55, 72), (48, 67), (36, 60))


def grids(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    out = []
    for _ in range(n):
        g = np.stack([rng.integers(lo, hi + 1, size=48) for lo, hi in RANGES], axis=1).astype(float)
        g[rng.random(g.shape) < 0.05] = np.nan  # some rests
        out.append(g)
    return out


def store_of(path, tok, pieces: list[np.ndarray], splits: list[str]) -> TokenStore:
    w = StoreWriter(path, tok)
    for i, (piece, split) in enumerate(zip(pieces, splits)):
        w.add(tok.encode(piece).ids, source=f"p{i}", sha256=f"{i:064d}", split=split)
    w.close([], 0.0, 0.0)
    return TokenStore(path)


def test_voice_spans_and_limits_go_voice_by_voice():
    tok = SATBTokenizer()
    ids = tok.encode_grid(np.array([[72.0, 64, 55, 48], [74, np.nan, 57, 43]]))
    window = np.concatenate([[tok.bos_id], ids, [tok.eos_id, tok.pad_id]])  # specials are no voice
    assert tok.voice_spans(window).tolist() == [[72, 74], [64, 64], [55, 57], [43, 48]]
    # the soprano may rise 2 (to 76), the bass fall 3 (to 40): the chord may move -3..+2
    assert tok.transpose_limits(window, [(60, 76), (55, 72), (48, 67), (40, 60)]) == (-3, 2)
    assert tok.transpose_limits(window) == (-43, 53)  # the vocabulary's 0..127
    assert tok.transpose_limits([tok.bos_id, tok.rest_id] * 2) is None  # nothing sung: any shift
    with pytest.raises(ValueError, match="one .lowest, highest. pair per voice"):
        tok.transpose_limits(window, [(0, 127)])


def test_a_piano_roll_is_one_voice():
    tok = FrameTokenizer()
    roll = np.zeros((2, 88), bool)
    roll[0, [19, 27]] = True  # MIDI 40, 48
    roll[1, 43] = True  # MIDI 64
    assert tok.voice_spans(tok.encode_roll(roll)).tolist() == [[40, 64]]
    assert tok.transpose_limits(tok.encode_roll(roll), [(36, 70)]) == (-4, 6)


def test_windows_stay_inside_each_voices_training_range(tmp_path):
    tok = SATBTokenizer()
    rng = np.random.default_rng(0)
    pieces = grids(rng, 6)
    pieces.append(np.full((48, 4), 90.0))  # a validation piece far above every range: not counted
    store = store_of(tmp_path / "s", tok, pieces, ["train"] * 6 + ["valid"])
    ranges = voice_ranges(store, tok)
    assert ranges.tolist() == [list(r) for r in RANGES]
    windows = WindowDataset(store, "train", context=40, seed=3, tokenizer=tok)
    ds = RangeTransposed(windows, store, tok, semitones=12, seed=3)
    shifts = set()
    for i in range(200):
        out = ds[i].numpy()
        spans = tok.voice_spans(out)
        assert (spans[:, 0] >= ranges[:, 0]).all() and (spans[:, 1] <= ranges[:, 1]).all()
        plain = windows[i].numpy()
        moved = plain < tok.rest_id
        shift = set((out[moved] - plain[moved]).tolist())
        assert len(shift) <= 1 and np.array_equal(out[~moved], plain[~moved])  # one shift; rests, specials kept
        shifts |= shift
        assert np.array_equal(ds[i].numpy(), out)  # a window depends on (seed, index) only
    assert min(shifts) < 0 < max(shifts)


def test_data_ranges_need_a_grid_tokenizer(store_of_midi):
    windows = WindowDataset(store_of_midi, "train", context=32)
    with pytest.raises(ValueError, match="needs a grid tokenizer"):
        RangeTransposed(windows, store_of_midi, store_of_midi.tokenizer, semitones=3, seed=0)


@pytest.fixture(scope="module")
def store_of_midi(midi_folder, tmp_path_factory):
    from cadenza.data.prepare import prepare

    return prepare([midi_folder], tmp_path_factory.mktemp("perf") / "store", workers=1, progress=False,
                   valid_fraction=0.2, test_fraction=0.0).store
