"""The decode step: one token through every layer and the head, as a pure function, and the decoder
that runs it over a static KV cache.

`DecodeStep` maps the new token ids (B, 1) and the filled part of the KV cache (L, B, H, n, Dh) to
the next logits and the new token's keys and values, which `StepDecoder` stores at slot n (outside
the step, so the cache is never copied). `cadenza.generation.compiled` exports it once per (model,
batch), the cache length n its only dynamic size, and compiles it ahead of time: the compiled
decode step, one native call per token instead of hundreds of operators. Each layer's attention
over the cache runs in the attention kernel (`cadenza.generation.kernel`) where it is built, else
in `cache_attention`, Inductor's loops for the same arithmetic.

The eager model (`MusicTransformer.forward` with a `KVCache`) stays the reference and the fallback:
it fills the cache for the prompt and after every window slide (where lengths vary), and
``tests/generation/test_static.py`` checks that both give the same logits. Why the step is shaped
this way: docs/generation.md, "How the compiled decode step got here".
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from cadenza.generation import kernel
from cadenza.generation.filters import plain_draw
from cadenza.models.attention import KVCache, rotate


def unsupported(model) -> str | None:
    """None when `model` can use the compiled decode step, else the reason it cannot (a short phrase;
    the studio's health check shows it)."""
    cfg = model.config
    p = next(model.parameters())
    if cfg.model != "transformer":
        return f"{cfg.model} models decode eagerly"
    if p.device.type != "cpu":
        return f"the compiled decode step is built for the CPU (the model is on {p.device.type})"
    if p.dtype != torch.float32:
        return f"the compiled decode step is built for float32 weights ({p.dtype})"
    if model.training:
        return "the model is in training mode"
    return None


def _rope(x: torch.Tensor, pos, inv_freq: torch.Tensor) -> torch.Tensor:
    """`Rotary` at one position; x (B, 1, 2, H, Dh). Same float32 arithmetic as `Rotary.tables`."""
    freqs = torch.full((1,), pos, dtype=torch.float32, device=x.device) * inv_freq
    emb = torch.cat((freqs, freqs))
    return rotate(x, emb.cos().to(x.dtype), emb.sin().to(x.dtype))


def _attend(attn, h: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, attention_kernel: bool):
    """One layer's attention of the new token (at position n) over the n cached keys kc, vc
    (B, H, n, Dh). Returns the layer's output and the new key and value (B, H, Dh). The new key is
    scored beside the cache rather than written into it, so the function updates nothing in place.
    `attention_kernel`: through `cadenza::decode_attention`, else `cache_attention`."""
    b, _, d = h.shape
    n = kc.shape[2]
    qkv = attn.qkv(h).view(b, 1, 3, attn.n_heads, attn.head_dim)
    if attn.scheme == "rope":
        qkv = torch.cat((_rope(qkv[:, :, :2], n, attn.rotary.inv_freq), qkv[:, :, 2:]), dim=2)
    q, k, v = qkv[:, 0].unbind(1)  # each (B, H, Dh)
    q = q * attn.head_dim ** -0.5
    rel = attn.rel.to(q.dtype) if attn.scheme == "relative" else None  # (H, context, Dh); row d: distance d
    k_self = k + rel[:, 0] if rel is not None else k
    attend = torch.ops.cadenza.decode_attention if attention_kernel else cache_attention
    y = attend(q, kc, vc, rel, k_self, v)
    return attn.proj(y.reshape(b, 1, d)), k, v


def cache_attention(q, kc, vc, rel, k_self, v):
    """softmax(q . [keys, k_self]) . [values, v] for q (B, H, Dh) over the cache kc, vc (B, H, n, Dh),
    with relative attention's distance embeddings `rel` (H, context, Dh) or None: what the attention
    kernel computes, written for Inductor.

    Scores and the weighted sum are written as products and sums, not matmuls, so Inductor fuses
    each into one loop over the cache. With relative attention, cache slot j sits at distance n - j
    and q . k_j + q . E[n - j] = q . (k_j + E[n - j]): the distance embeddings are read in the same
    loop as the keys, for the n distances in use."""
    n = kc.shape[2]
    if rel is not None:
        kc = kc + rel.index_select(1, torch.arange(n, 0, -1, device=q.device))
    scores = (kc * q.unsqueeze(2)).sum(-1)  # (B, H, n): the cache read in its layout
    self_score = (q * k_self).sum(-1, keepdim=True)
    probs = torch.softmax(torch.cat((scores, self_score), -1), dim=-1)
    return (probs[..., :-1].unsqueeze(-1) * vc).sum(-2) + probs[..., -1:] * v


class DecodeStep(nn.Module):
    """``forward(ids (B, 1), k (L, B, H, n, Dh), v)`` -> (logits (B, V), new k, new v (L, B, H, Dh)).

    `attention_kernel`: attend through the attention kernel (default: when it is loaded in this
    process). With `draw`, forward also takes the grammar's mask (B, V), the step's uniforms (B,)
    and a temperature (0-d) and returns the drawn tokens (B,) after the logits (`filters.plain_draw`):
    the sampler's plain draw inside the step, where its operators would otherwise each cost a
    dispatch."""

    def __init__(self, model, attention_kernel: bool | None = None, draw: bool = False):
        super().__init__()
        self.model = model
        self.attention_kernel = kernel.ready(build=False) if attention_kernel is None else attention_kernel
        if self.attention_kernel:
            kernel.define()  # the operator must exist before the step is traced
        self.draw = draw

    def forward(self, ids: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, allowed=None, u=None,
                temperature=None):
        m = self.model
        n = k_cache.shape[3]
        x = m.tok_emb(ids)
        if m.pos_emb is not None:
            x = x + m.pos_emb.weight[n]
        new_k, new_v = [], []
        for i, block in enumerate(m.blocks):
            a, k, v = _attend(block.attn, block.ln1(x), k_cache[i], v_cache[i], self.attention_kernel)
            x = x + a
            x = x + block.mlp(block.ln2(x))
            new_k.append(k)
            new_v.append(v)
        logits = m.head(m.ln_f(x))[:, -1]
        if self.draw:
            return logits, plain_draw(logits, allowed, u, temperature), torch.stack(new_k), torch.stack(new_v)
        return logits, torch.stack(new_k), torch.stack(new_v)


def idle_draw(batch: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw inputs for a drawing step whose draw is not wanted (only its logits): every token
    allowed, uniforms 0, temperature 1."""
    return torch.ones(batch, vocab, dtype=torch.bool), torch.zeros(batch), torch.tensor(1.0)


class StepDecoder:
    """Incremental decoding of a batch through a step function (the compiled decode step, or
    `DecodeStep` itself).

    Owns a `KVCache` of the full context: `prefill(ids)` fills it with the eager model (any length),
    `step(ids)` feeds one token per row through the step and returns the next logits, and
    `step_draw` also draws the next tokens inside the step when it `draws` (a `DecodeStep` with
    `draw`, as compiled packages are built).
    """

    def __init__(self, model, batch: int, step: Callable | None = None, draws: bool = False):
        reason = unsupported(model)
        if reason:
            raise ValueError(f"no decode step: {reason}")
        self.model = model
        self.cache: KVCache = model.new_cache(batch)
        self._step = step if step is not None else DecodeStep(model, draw=draws)
        self.draws = draws
        self._idle = idle_draw(batch, model.config.vocab_size)

    def reset(self) -> None:
        self.cache.reset()

    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """Feed ids (B, T) through the eager model into the cache; the logits after the last one."""
        return self.model(ids, cache=self.cache)[0][:, -1]

    def step(self, ids: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (B, 1); the logits (B, V) of the token after it."""
        if self.cache.pos == 0:
            return self.prefill(ids)  # the compiled decode step needs at least one cached position
        return self._run(ids, *self._idle)[0]

    def step_draw(self, ids: torch.Tensor, allowed: torch.Tensor, u: torch.Tensor,
                  temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Feed one token per row (B, 1) -> (the next logits, the tokens drawn from them with
        `filters.plain_draw`), or (logits, None) where the step does not draw (the caller draws)."""
        if not self.draws or self.cache.pos == 0:
            return self.step(ids), None
        for got, want, name in zip((allowed, u, temperature), self._idle, ("mask", "uniforms", "temperature")):
            if got.shape != want.shape or got.dtype != want.dtype:  # a compiled decode step reads them unchecked
                raise ValueError(f"the step's {name} is {tuple(got.shape)} {got.dtype}; it takes "
                                 f"{tuple(want.shape)} {want.dtype}")
        return self._run(ids, allowed, u, temperature)

    def _run(self, ids, allowed, u, temperature):
        c, n = self.cache, self.cache.pos
        if n >= c.max_len:
            raise RuntimeError(f"KV cache full ({c.max_len} positions); slide the window first")
        # A compiled package assumes contiguous ids: a strided column of a wider buffer gave wrong rows.
        args = (ids.contiguous(), c.k.narrow(3, 0, n), c.v.narrow(3, 0, n))
        out = self._step(*args, allowed.contiguous(), u.contiguous(), temperature) if self.draws else self._step(*args)
        k, v = out[-2:]
        c.k.select(3, n).copy_(k)
        c.v.select(3, n).copy_(v)
        c.pos = n + 1
        return (out[0], out[1]) if self.draws else (out[0], None)

