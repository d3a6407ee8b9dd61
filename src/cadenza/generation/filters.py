"""Logit filters as small pure functions: temperature, top-k, top-p, the grammar's mask, the draw.

They run once per token, so they check nothing: their settings come from a `SamplingConfig` that
`SamplingConfig.validate` has checked once, before sampling (a temperature > 0, 0 < p <= 1, k >= 1).
"""

from __future__ import annotations

import torch


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Logits divided by a temperature > 0."""
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
    """The grammar's mask (`allowed`: False is impossible), then temperature, top-k and top-p, in float32."""
    logits = logits.float()
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    return top_p_filter(top_k_filter(apply_temperature(logits, temperature), top_k), top_p)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One draw per row from `probs` (B, V) given uniforms `u` (B,) in [0, 1): the first token whose
    cumulative probability exceeds u. A token of probability 0 is never drawn."""
    cdf = probs.cumsum(-1)
    x = (u.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, x, right=True).clamp_(max=probs.shape[-1] - 1)


def plain_draw(logits: torch.Tensor, allowed: torch.Tensor, u: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """The next token of each row (B,) under the grammar's mask and a temperature (a 0-d tensor),
    without top-k or top-p: `filter_logits`, softmax and `inverse_cdf` as tensor code only, so the
    compiled decode step can draw inside its one native call (dividing by a temperature of 1 is
    exact, as skipping it is)."""
    return inverse_cdf(torch.softmax(filter_logits(logits, allowed=allowed) / temperature, dim=-1), u)[:, 0]
