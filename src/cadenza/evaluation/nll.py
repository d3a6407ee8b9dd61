"""NLL of a model on a store split, every token scored exactly once with context.

A piece is scored as ``[BOS] ids [EOS]``: the targets are ids[0] (given BOS), ..., ids[-1], EOS.
A transformer sees windows of its context length that advance by `stride`; each window scores
only the targets the previous window did not, so every target is scored once and (after the
first window) with at least ``context - stride`` tokens of context. The LSTM reads each piece
whole, carrying its state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from cadenza.data.store import TokenStore
from cadenza.env.device import autocast
from cadenza.models.loss import IGNORE_INDEX, inputs_targets


@dataclass
class NLLResult:
    split: str
    nll: float  # nats per token
    tokens: int
    pieces: int
    per_piece: list[np.ndarray] = field(repr=False, default_factory=list)  # per-target NLL, nats

    @property
    def bits(self) -> float:
        return self.nll / math.log(2)

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)

    def as_dict(self) -> dict:
        return {"split": self.split, "nll_nats": self.nll, "nll_bits": self.bits, "perplexity": self.perplexity,
                "tokens": self.tokens, "pieces": self.pieces}


def piece_view(store: TokenStore, index: int) -> np.ndarray:
    tok = store.tokenizer
    return np.concatenate([[tok.bos_id], np.asarray(store[index], np.int64), [tok.eos_id]])


def windows_for(n_targets: int, context: int, stride: int) -> list[tuple[int, int]]:
    """Windows (input start s, first scored offset) covering targets [0, n) exactly once.

    A window starting at s predicts targets s .. s+context-1; after the first, each window ends
    `stride` targets further and scores only those, each with >= context - stride of context.
    """
    out, done = [], 0
    while done < n_targets:
        s = 0 if done == 0 else max(0, min(done + stride, n_targets) - context)
        out.append((s, done - s))
        done = min(s + context, n_targets)
    return out


@torch.no_grad()
def token_nll(model, store: TokenStore, split: str = "test", stride: int | None = None, batch_size: int = 16,
              device: str | torch.device = "cpu", precision: str = "fp32", progress: bool = False,
              tokenizer=None) -> NLLResult:
    """Per-target NLL (nats) of every piece of `split`, in store order.

    With a styled `tokenizer` (the model's) every window starts with its piece's style token, as in
    training; the style token is context, never a target.
    """
    model.eval()
    device = torch.device(device)
    tok = tokenizer or store.tokenizer
    pieces = store.split(split)
    if not pieces:
        raise ValueError(f"{store.path}: split {split!r} has no pieces")
    views = [piece_view(store, p.index) for p in pieces]
    prefixes = [tok.window_prefix(p.style if p.style in tok.styles else None) for p in pieces]
    per_piece = [np.zeros(len(v) - 1) for v in views]
    if not model.windowed:  # a recurrent model carries its state through the whole piece
        for k, v in enumerate(views):
            full = np.concatenate([prefixes[k], v]).astype(np.int64)
            per_piece[k] = _lstm_nll(model, full, device, precision)[len(prefixes[k]):]
        return _result(split, pieces, per_piece)
    ctx = model.config.context - len(tok.window_prefix(None))
    stride = stride or max(1, ctx // 2)
    jobs = [(k, s, first) for k, v in enumerate(views) for s, first in windows_for(len(v) - 1, ctx, stride)]
    from tqdm import tqdm

    for i in tqdm(range(0, len(jobs), batch_size), disable=not progress, unit="batch", desc=f"nll {split}"):
        chunk = jobs[i:i + batch_size]
        x, y = _window_batch(chunk, views, prefixes, ctx, tok.pad_id)
        with autocast(device, precision):
            logits, _ = model(x.to(device))
        logits = logits if logits.dtype == torch.float64 else logits.float()
        nll = F.cross_entropy(logits.transpose(1, 2), y.to(device), ignore_index=IGNORE_INDEX, reduction="none")
        nll = nll.cpu().numpy()
        for r, (k, s, first) in enumerate(chunk):
            n, p = min(ctx, len(views[k]) - 1 - s), len(prefixes[k])
            per_piece[k][s + first:s + n] = nll[r, p + first:p + n]
    return _result(split, pieces, per_piece)


def _window_batch(chunk, views, prefixes, ctx: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of a batch of windows (piece k from target s, scoring from `first`);
    a piece's prefix (its style token) starts its row and is never a target."""
    p = max(len(prefixes[k]) for k, _, _ in chunk)
    width = p + max(min(ctx, len(views[k]) - 1 - s) for k, s, _ in chunk)  # short pieces: no padding to ctx
    x = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    y = torch.full((len(chunk), width), IGNORE_INDEX, dtype=torch.long)
    for r, (k, s, first) in enumerate(chunk):
        pre = prefixes[k]
        tgt = views[k][s + 1:s + 1 + min(ctx, len(views[k]) - 1 - s)]
        inp = np.concatenate([pre, views[k][s:s + len(tgt)]]).astype(np.int64)
        x[r, :len(inp)] = torch.from_numpy(inp)
        y[r, len(pre) + first:len(pre) + len(tgt)] = torch.from_numpy(tgt[first:])
    return x, y


def _result(split: str, pieces, per_piece: list[np.ndarray]) -> NLLResult:
    total = float(sum(p.sum() for p in per_piece))
    count = int(sum(p.size for p in per_piece))
    return NLLResult(split, total / max(count, 1), count, len(pieces), per_piece)


def _lstm_nll(model, view: np.ndarray, device, precision: str, chunk: int = 2048) -> np.ndarray:
    ids = torch.from_numpy(view).to(device)[None]
    state = model.new_cache(1, device=device)
    out = []
    for s in range(0, ids.shape[1] - 1, chunk):
        x = ids[:, s:s + chunk]
        y = ids[:, s + 1:s + 1 + chunk]
        x = x[:, :y.shape[1]]
        with autocast(device, precision):
            logits, _ = model(x, cache=state)
        logits = logits if logits.dtype == torch.float64 else logits.float()
        out.append(F.cross_entropy(logits[0], y[0], reduction="none").cpu().numpy())
    return np.concatenate(out)


@torch.no_grad()
def window_loss(model, windows: torch.Tensor, pad_id: int, device, precision: str, batch: int = 16) -> float:
    """Mean NLL per target token (nats) over fixed windows."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        x, y = inputs_targets(windows[i:i + batch].to(device), pad_id)
        with autocast(device, precision):
            _, loss = model(x, y)
        n = int((y != IGNORE_INDEX).sum())
        total += float(loss) * n
        count += n
    model.train()
    return total / max(count, 1)
