"""Training windows from a token store, with pitch and tempo augmentation.

Every piece is seen as ``[BOS] ids [EOS]``. A sample is a window of ``context + 1`` ids (inputs
and shifted targets), drawn by choosing a piece with probability proportional to its length and
a uniform start inside it, so long pieces contribute more windows, not one crop per file. Pieces
shorter than a window are padded with PAD, which the loss ignores.

Sample ``i`` is a pure function of ``(seed, i)``: the training loop asks for indices
``step * batch + k``, so a resumed run, or a run on several DDP ranks, sees exactly the windows an
uninterrupted single-process run would have seen.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from cadenza.data.store import TokenStore


class WindowDataset(Dataset):
    """Windows of one split. With a styled `tokenizer` (`Tokenizer.with_styles`) every window starts
    with its piece's style token (NO_STYLE for unlabelled pieces, and with probability
    `style_dropout` for any piece), and `balance_styles` makes each style equally likely whatever
    its size."""

    def __init__(self, store: TokenStore, split: str = "train", context: int = 512, seed: int = 0,
                 transpose: int = 0, stretch: float = 0.0, epoch_size: int | None = None, tokenizer=None,
                 style_dropout: float = 0.0, balance_styles: bool = False):
        self.store = store
        self.tok = tokenizer or store.tokenizer
        self.pieces = store.split(split)
        if not self.pieces:
            raise ValueError(f"{store.path}: split {split!r} has no pieces")
        self.split = split
        self.context = int(context)
        self.seed = int(seed)
        self.transpose = int(transpose) if self.tok.supports_transpose else 0
        self.stretch = float(stretch) if self.tok.supports_stretch else 0.0
        self.align = int(self.tok.window_align)
        lengths = np.array([len(p) + 2 for p in self.pieces], np.int64)  # + bos, eos
        self.cum = np.cumsum(lengths)
        self.lengths = lengths
        self.epoch_size = epoch_size or max(1, int(self.cum[-1]) // self.context)
        self.styled = bool(self.tok.styles)
        self.style_dropout = float(style_dropout) if self.styled else 0.0
        self.weights = _style_balanced(self.pieces, lengths) if self.styled and balance_styles else None

    def __len__(self) -> int:
        return self.epoch_size

    def piece_view(self, k: int, start: int, stop: int) -> np.ndarray:
        """ids [start, stop) of ``[BOS] piece [EOS]`` for piece number k of this split."""
        p = self.pieces[k]
        n = len(p)
        stop = min(stop, n + 2)
        out = np.empty(max(0, stop - start), np.int64)
        if out.size == 0:
            return out
        lo, hi = max(start, 1), min(stop, n + 1)
        if hi > lo:
            out[lo - start:hi - start] = self.store.tokens[p.start + lo - 1:p.start + hi - 1]
        if start == 0:
            out[0] = self.tok.bos_id
        if stop == n + 2:
            out[-1] = self.tok.eos_id
        return out

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, int(i)])
        k = self.pick_piece(rng)
        need = self.context + 1 - self.styled  # the style token takes the window's first place
        factor = 1.0
        if self.stretch:
            factor = float(rng.uniform(1 - self.stretch, 1 + self.stretch))
        # Compressing time merges time shifts, so read a little more than needed before stretching.
        read = need if factor >= 1 else math.ceil(need / factor) + 8
        length = int(self.lengths[k])
        start = int(rng.integers(0, max(1, length - need + 1)))
        if self.align > 1 and start:  # e.g. SATB: a window must start on a soprano token
            start = 1 + (start - 1) // self.align * self.align
        ids = self.piece_view(k, start, start + read)
        if factor != 1.0:
            ids = self._stretch(ids, factor)
        if self.transpose:
            ids = self._transpose(ids, rng)
        out = np.full(need, self.tok.pad_id, np.int64)
        out[:min(need, ids.size)] = ids[:need]
        return torch.from_numpy(self.with_style(out, k, rng))

    def pick_piece(self, rng: np.random.Generator) -> int:
        """A piece with probability proportional to its length, or, balancing styles, a style
        uniformly and then a piece of it proportionally to its length."""
        if self.weights is None:
            return int(np.searchsorted(self.cum, rng.integers(self.cum[-1]), side="right"))
        return min(int(np.searchsorted(self.weights, rng.random(), side="right")), len(self.pieces) - 1)

    def with_style(self, ids: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
        """`ids` opened by piece k's style token (NO_STYLE for an unknown style, and with
        probability `style_dropout`), for a styled tokenizer; else `ids`."""
        if not self.styled:
            return ids
        style = self.pieces[k].style
        if style not in self.tok.styles or (self.style_dropout and rng.random() < self.style_dropout):
            style = None
        return np.concatenate([[self.tok.style_id(style)], ids])

    def _stretch(self, ids: np.ndarray, factor: float) -> np.ndarray:
        special = (ids == self.tok.bos_id) | (ids == self.tok.eos_id)
        if not special.any():
            return self.tok.stretch(ids, factor)
        # keep bos/eos where they are: stretch only the run between them
        head = ids[:1] if special[0] else ids[:0]
        tail = ids[-1:] if special[-1] and ids.size > 1 else ids[:0]
        body = ids[head.size:ids.size - tail.size]
        return np.concatenate([head, self.tok.stretch(body, factor), tail])

    def _transpose(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        span = self.tok.pitch_range(ids[(ids != self.tok.bos_id) & (ids != self.tok.eos_id)])
        if span is None:
            return ids
        low, high = self.tok.pitch_bounds  # e.g. the 88 keys of a piano roll
        lo = max(-self.transpose, low - span[0])
        hi = min(self.transpose, high - span[1])
        if hi < lo:
            return ids
        k = int(rng.integers(lo, hi + 1))
        if k == 0:
            return ids
        special = (ids == self.tok.bos_id) | (ids == self.tok.eos_id)
        out = ids.copy()
        out[~special] = self.tok.transpose(ids[~special], k)
        return out


class StepSampler(Sampler[int]):
    """Indices ``start, start + 1, ...`` of this rank's share of the global sample stream.

    With world size W and a per-rank batch of B, global step s uses indices
    ``s * B * W + r * B + j`` on rank r; the union over ranks is exactly the single-process batch.
    """

    def __init__(self, batch_size: int, start_step: int = 0, rank: int = 0, world_size: int = 1,
                 accumulation: int = 1):
        self.batch_size = batch_size
        self.start_step = start_step
        self.rank = rank
        self.world_size = world_size
        self.accumulation = accumulation

    def __iter__(self):
        b, w, a = self.batch_size, self.world_size, self.accumulation
        step = self.start_step
        while True:
            for micro in range(a):
                base = ((step * a + micro) * w + self.rank) * b
                yield from range(base, base + b)
            step += 1

    def __len__(self) -> int:  # pragma: no cover - infinite; DataLoader only needs it for len()
        return 2**62


def fixed_windows(dataset: WindowDataset, count: int) -> torch.Tensor:
    """The first `count` windows of `dataset` (made without augmentation or style dropout), for
    cheap periodic validation."""
    return torch.stack([dataset[i] for i in range(count)])


def _style_balanced(pieces, lengths: np.ndarray) -> np.ndarray:
    """Cumulative sampling weights that give each style (unlabelled pieces count as one) the same
    share, and within a style each piece a share proportional to its length."""
    styles = [p.style for p in pieces]
    per_style: dict = {}
    for s, n in zip(styles, lengths):
        per_style[s] = per_style.get(s, 0) + int(n)
    w = np.array([n / per_style[s] / len(per_style) for s, n in zip(styles, lengths)])
    return np.cumsum(w)
