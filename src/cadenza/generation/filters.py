"""Logit filters as small pure functions: temperature, top-k, top-p, and the grammar's mask."""

from __future__ import annotations

import torch


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (use top_k=1 for greedy decoding)")
    return logits if temperature == 1.0 else logits / temperature  # x / 1 is x: skip the operator


def top_k_filter(logits: torch.Tensor, k: int | None) -> torch.Tensor:
    """Keep the k largest logits per row; the rest become -inf."""
    if not k or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float | None) -> torch.Tensor:
    """Nucleus filtering: keep the smallest set of tokens whose probability reaches p."""
    if p is None or p >= 1.0:
        return logits
    sorted_logits, idx = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    # a token is dropped when the tokens before it already reach p; the top token always stays
    drop = (probs.cumsum(-1) - probs) >= p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, idx, sorted_logits)


def filter_logits(logits, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                  allowed: torch.Tensor | None = None) -> torch.Tensor:
    logits = logits.float()
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    return top_p_filter(top_k_filter(apply_temperature(logits, temperature), top_k), top_p)
