"""Transposition that keeps every voice inside the range it spans in the training data.

`transpose_range = "data"` with `transpose = K`: each training window is shifted by a whole
number of semitones drawn uniformly from the shifts in -K..K that keep each voice of the window
(soprano, alto, tenor, bass for `satb`; the one set of keys of a piano roll) between the lowest
and highest pitch that voice has anywhere in the training split, as DeepBach augments the
chorales. A bass is never moved above any bass Bach wrote, which the vocabulary's bounds alone
(`transpose_range = "vocabulary"`) would allow.

The shift of window i depends on (seed, i) only, like the window itself, so a resumed run and
the ranks of a DDP run see exactly the windows an uninterrupted single process would.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from cadenza.data.store import TokenStore


def voice_ranges(store: TokenStore, tok, split: str = "train") -> np.ndarray:
    """(n_voices, 2): each voice's lowest and highest MIDI pitch over the pieces of `split` (a voice
    that never sings keeps the vocabulary's bounds)."""
    spans = np.array([tok.voice_spans(store[p.index]) for p in store.split(split)]).reshape(-1, tok.n_voices, 2)
    sung = spans[..., 0] >= 0
    lo, hi = tok.pitch_bounds
    low = np.where(sung, spans[..., 0], hi).min(axis=0, initial=hi)
    high = np.where(sung, spans[..., 1], lo).max(axis=0, initial=lo)
    silent = low > high
    return np.stack([np.where(silent, lo, low), np.where(silent, hi, high)], axis=1)


class RangeTransposed(Dataset):
    """The windows of `windows` (a dataset of id tensors that start on a step), each shifted within
    +-`semitones` so that every voice stays inside its range in the `train` split of `store`."""

    def __init__(self, windows: Dataset, store: TokenStore, tok, semitones: int, seed: int):
        if not hasattr(tok, "transpose_limits"):
            raise ValueError(f"transpose_range = \"data\" needs a grid tokenizer (frames, satb), not {tok.name!r}")
        self.windows, self.tok, self.semitones, self.seed = windows, tok, int(semitones), int(seed)
        self.ranges = voice_ranges(store, tok)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> torch.Tensor:
        window = self.windows[i]
        ids = window.numpy()
        limits = self.tok.transpose_limits(ids, self.ranges)
        if limits is None:
            return window
        lo, hi = max(limits[0], -self.semitones), min(limits[1], self.semitones)
        if lo > hi:  # the window already leaves a range (possible for data outside the training split)
            return window
        shift = int(np.random.default_rng([self.seed, int(i), 1]).integers(lo, hi + 1))
        return torch.from_numpy(self.tok.transpose(ids, shift)) if shift else window
