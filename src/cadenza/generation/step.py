"""The decode step: one token through every layer and the head, as a pure function, and the decoder
that runs it over a static KV cache.

`DecodeStep` maps the new token ids (B, 1) and the filled part of the KV cache (L, B, H, n, Dh) to
the next logits and the new token's keys and values, which `StepDecoder` stores at slot n (outside
the step, so the cache is never copied). `cadenza.generation.compiled` exports it once per (model,
batch), the cache length n its only dynamic size, and compiles it ahead of time: the compiled
decode step, one native call per token instead of hundreds of operators. Each layer's attention
over the cache runs in the attention kernel (`cadenza.generation.kernel`) where it is built, else
in `cache_attention`, Inductor's loops for the same arithmetic. The step is the model's own
(`MusicTransformer.step`, through its modules); this module adds the kernel, the draw and the cache.

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
from cadenza.models.attention import KVCache, cache_attention


def unsupported(model) -> str | None:
    """None when `model` can use the compiled decode step, else the reason it cannot (a short phrase;
    the studio's health check shows it)."""
    cfg = model.config
    p = next(model.parameters())
    if not callable(getattr(model, "step", None)):  # the model's own cached step (`MusicTransformer.step`)
        return f"{cfg.model} models decode eagerly"
    if p.device.type != "cpu":
        return f"the compiled decode step is built for the CPU (the model is on {p.device.type})"
    if p.dtype != torch.float32:
        return f"the compiled decode step is built for float32 weights ({p.dtype})"
    if model.training:
        return "the model is in training mode"
    return None


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
        attend = torch.ops.cadenza.decode_attention if self.attention_kernel else cache_attention
        logits, new_k, new_v = self.model.step(ids, k_cache, v_cache, attend)
        if self.draw:
            return logits, plain_draw(logits, allowed, u, temperature), new_k, new_v
        return logits, new_k, new_v


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

