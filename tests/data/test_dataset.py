"""Training windows: shape, determinism, proportional sampling, augmentation, DDP sharding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cadenza.data.dataset import StepSampler, WindowDataset
from cadenza.data.prepare import prepare
from cadenza.models.loss import IGNORE_INDEX, inputs_targets


@pytest.fixture(scope="module")
def store(midi_folder, tmp_path_factory):
    return prepare([midi_folder], tmp_path_factory.mktemp("ds") / "s", workers=1, progress=False,
                   valid_fraction=0.0, test_fraction=0.0).store


def test_windows_have_context_plus_one_ids_and_are_deterministic(store):
    ds = WindowDataset(store, "train", context=64, seed=3)
    a, b = ds[17], WindowDataset(store, "train", context=64, seed=3)[17]
    assert a.shape == (65,) and a.dtype == torch.int64 and torch.equal(a, b)
    assert not torch.equal(ds[17], ds[18])
    assert int(a.max()) < store.tokenizer.vocab_size


def test_windows_are_real_slices_of_bos_piece_eos(store):
    ds = WindowDataset(store, "train", context=32, seed=0)
    tok = store.tokenizer
    views = [np.concatenate([[tok.bos_id], store[p.index], [tok.eos_id]]) for p in ds.pieces]
    for i in range(50):
        w = ds[i].numpy()
        assert any(w.tobytes() in v.tobytes() for v in views)


def test_pieces_are_sampled_in_proportion_to_length(store):
    ds = WindowDataset(store, "train", context=16, seed=0)
    counts = np.zeros(len(ds.pieces))
    for i in range(4000):
        rng = np.random.default_rng([ds.seed, i])
        counts[np.searchsorted(ds.cum, rng.integers(ds.cum[-1]), side="right")] += 1
    expected = ds.lengths / ds.lengths.sum()
    assert np.allclose(counts / counts.sum(), expected, atol=0.03)


def test_short_pieces_are_padded_and_padding_is_ignored_by_the_loss(store):
    ds = WindowDataset(store, "train", context=4096, seed=0)
    w = ds[0]
    assert (w == store.tokenizer.pad_id).any()
    x, y = inputs_targets(w[None], store.tokenizer.pad_id)
    assert x.shape == (1, 4096) and (y == IGNORE_INDEX).sum() == (w[1:] == store.tokenizer.pad_id).sum()


def test_transposition_keeps_notes_in_range_and_shifts_all_pitches(store):
    tok = store.tokenizer
    plain = WindowDataset(store, "train", context=128, seed=5)
    aug = WindowDataset(store, "train", context=128, seed=5, transpose=6)
    shifted = 0
    for i in range(40):
        a, b = plain[i].numpy(), aug[i].numpy()
        notes = a < tok.shift_offset
        assert np.array_equal(a[~notes], b[~notes])  # time, velocity, specials untouched
        d = np.unique(b[notes] % 128 - a[notes] % 128)
        assert d.size <= 1 and (d.size == 0 or abs(int(d[0])) <= 6)
        shifted += int(d.size == 1 and d[0] != 0)
        assert b[notes].min(initial=0) >= 0 and b.max() < tok.vocab_size
    assert shifted > 20


def test_time_stretch_changes_durations_but_not_notes(store):
    tok = store.tokenizer
    aug = WindowDataset(store, "train", context=256, seed=5, stretch=0.05)
    for i in range(20):
        w = aug[i].numpy()
        body = w[(w != tok.bos_id) & (w != tok.eos_id) & (w != tok.pad_id)]
        _, report = tok.decode_notes(body)
        assert report.special_tokens == 0


def test_step_sampler_shards_the_single_process_stream():
    single = StepSampler(batch_size=4, world_size=1, accumulation=2)
    it = iter(single)
    one = [next(it) for _ in range(16)]  # two global steps
    ranks = []
    for r in range(2):
        it = iter(StepSampler(batch_size=2, rank=r, world_size=2, accumulation=2))
        ranks.append([next(it) for _ in range(8)])
    assert sorted(ranks[0] + ranks[1]) == sorted(one)
    resumed = iter(StepSampler(batch_size=4, start_step=1, accumulation=2))
    assert [next(resumed) for _ in range(8)] == one[8:]
