"""Causal self-attention with three position schemes and a static KV cache.

* ``relative``: Music Transformer relative attention (Huang et al. 2018, section 3.4.2). Each
  head has an embedding per distance; the logit of query i and key j gets ``q_i . E[i - j]``.
  The "skewing" trick computes these for all pairs from ``Q E^T`` with a pad and a reshape,
  so the extra memory is O(L * D) for E, not the O(L^2 * D) of gathering an embedding per pair.
  For long sequences the queries are processed in blocks under activation checkpointing, so
  training at context 2048 never holds more than one block's logits; with layer checkpointing
  (`grad_checkpoint`) the layer is the unit recomputed, and its blocks are not checkpointed again.
* ``rope``: rotary positions (Su et al. 2021) on ``F.scaled_dot_product_attention``, which uses
  the flash / memory-efficient kernels on GPU and the fused CPU kernel.
* ``absolute``: learned absolute positions (added to the embeddings by the model); attention
  itself is plain SDPA.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

# Queries per block of the blockwise kernel on a GPU, at least: a block costs a few kernel launches
# whatever its size, and the 128 sized for CPU caches leaves a GPU idle (benchmarks/gpu_check.py
# measures the sizes around it).
GPU_BLOCK = 512


def skew(x: torch.Tensor) -> torch.Tensor:
    """(..., T, W) with x[a, t] = q_a . E[W-1-t]  ->  (..., T, W) with y[a, j] = q_{W-T+a} . E[W-T+a-j].

    Row a is shifted left by T-1-a. Padding one zero column on the right and re-reading the
    flat buffer with row stride W does that shift for every row at once. Entries with j > W-T+a
    (the future of query a) hold garbage and must be masked by the caller.
    """
    *lead, t, w = x.shape
    flat = F.pad(x, (0, 1)).reshape(*lead, t * (w + 1))
    return flat[..., t - 1:t - 1 + t * w].reshape(*lead, t, w)


def relative_logits(q: torch.Tensor, rel: torch.Tensor, key_len: int) -> torch.Tensor:
    """Relative logits of the last T queries against keys [0, key_len): (B, H, T, key_len).

    q: (B, H, T, Dh); rel: (H, max_distance, Dh) with rel[h, d] the embedding of distance d.
    """
    er = rel[:, :key_len].flip(1)  # row t <-> distance key_len-1-t
    return skew(torch.matmul(q, er.transpose(-1, -2).unsqueeze(0)))


def causal_mask(t: int, key_len: int, device) -> torch.Tensor:
    """Boolean (T, key_len), True where query a (absolute key_len-T+a) may see key j."""
    q_pos = torch.arange(key_len - t, key_len, device=device)
    return torch.arange(key_len, device=device)[None, :] <= q_pos[:, None]


def _relative_block(q, k, v, rel, dropout: float, training: bool):
    """Queries q (the last T positions) against keys [0, key_len); q is already scaled."""
    key_len = k.shape[-2]
    scores = torch.matmul(q, k.transpose(-1, -2))
    if rel is not None:
        scores = scores + relative_logits(q, rel, key_len)
    scores = scores.masked_fill(~causal_mask(q.shape[-2], key_len, q.device), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout and training:
        probs = F.dropout(probs, dropout)
    return torch.matmul(probs, v)


def blockwise_attention(q, k, v, rel=None, dropout: float = 0.0, training: bool = False, chunk: int = 128,
                       checkpoint_blocks: bool = False) -> torch.Tensor:
    """Causal attention of the last T queries against all keys, with relative logits when `rel`
    is given (Music Transformer) and without them otherwise. q: (B, H, T, Dh).

    Queries go in blocks of `chunk`: a block of causal queries never needs the keys after it
    (about half the work of the full square), and a (chunk x keys) block of logits stays in
    cache, which measured 3x faster than one T x T matrix on CPU at T = 512, and in bf16 on CPU
    faster than PyTorch's fused kernel (whose bf16 backward is slow there). With
    `checkpoint_blocks` each block's logits are recomputed in the backward pass instead of
    stored, so memory grows as O(T) rather than O(T^2).
    """
    q = q * (1.0 / math.sqrt(q.shape[-1]))  # scaling q scales both QK^T and QE^T
    t, key_len = q.shape[-2], k.shape[-2]
    if chunk <= 0 or t <= chunk:
        return _relative_block(q, k, v, rel, dropout, training)
    outs = []
    past = key_len - t
    for a in range(0, t, chunk):
        b = min(a + chunk, t)
        args = (q[:, :, a:b], k[:, :, :past + b], v[:, :, :past + b], rel, dropout, training)
        if checkpoint_blocks:
            outs.append(checkpoint(_relative_block, *args, use_reentrant=False))
        else:
            outs.append(_relative_block(*args))
    return torch.cat(outs, dim=2)


class Dropout(nn.Module):
    """Dropout whose CPU mask comes from random bytes: 8 mask entries per 64-bit draw.

    PyTorch's CPU dropout draws one random number per element from a sequential generator, which
    measured ~15 % of a bf16 training step of the tiny model. Here p is rounded to a multiple of
    1/256 (0.1 -> 26/256 = 0.1016) and the kept values are scaled by 1 / (1 - p) as usual. On other
    devices this is `F.dropout`.
    """

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = float(p)
        self.threshold = round(self.p * 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or self.threshold >= 256:
            return F.dropout(x, self.p, True)
        if self.threshold == 0:
            return x
        n = x.numel()
        bits = torch.randint(-2**63, 2**63 - 1, ((n + 7) // 8,), dtype=torch.int64).view(torch.uint8)[:n]
        return torch.where(bits.view(x.shape) >= self.threshold, x * (256 / (256 - self.threshold)), 0.0)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Rotary(nn.Module):
    """Rotary position embedding (GPT-NeoX "rotate half" layout: contiguous halves, no striding).

    cos/sin tables grow on demand, so positions are never clipped.
    """

    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim), persistent=False)
        self._tables: dict = {}

    def tables(self, n: int, device, dtype):
        key = (device, dtype)
        cached = self._tables.get(key)
        if cached is None or cached[0].shape[0] < n:
            t = torch.arange(max(n, 256), device=device, dtype=torch.float32)
            freqs = torch.outer(t, self.inv_freq.to(device))
            emb = torch.cat((freqs, freqs), dim=-1)
            cached = (emb.cos().to(dtype), emb.sin().to(dtype))
            self._tables[key] = cached
        return cached[0][:n], cached[1][:n]

    def forward(self, x: torch.Tensor, start: int, seq_dim: int = -2) -> torch.Tensor:
        """Rotate the last dimension of x by positions start.. along `seq_dim`."""
        t = x.shape[seq_dim]
        cos, sin = self.tables(start + t, x.device, x.dtype)
        cos, sin = cos[start:start + t], sin[start:start + t]
        if seq_dim != -2:  # broadcast the (T, D) tables over the dims after seq_dim
            extra = x.dim() - (seq_dim % x.dim()) - 2
            cos = cos.view(t, *([1] * extra), -1)
            sin = sin.view(t, *([1] * extra), -1)
        return rotate(x, cos, sin)


    def at(self, x: torch.Tensor, pos) -> torch.Tensor:
        """x (B, 1, ..., D) rotated to the one position `pos` (an int, or a symbolic size when
        exported), with the same float32 arithmetic as `tables`."""
        freqs = torch.full((1,), pos, dtype=torch.float32, device=x.device) * self.inv_freq
        emb = torch.cat((freqs, freqs))
        return rotate(x, emb.cos().to(x.dtype), emb.sin().to(x.dtype))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the halves of x's last dimension by angles with these cosines and sines."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def cache_attention(q, kc, vc, rel, k_self, v):
    """softmax(q . [keys, k_self]) . [values, v] for q (B, H, Dh) over the cache kc, vc (B, H, n, Dh),
    with relative attention's distance embeddings `rel` (H, context, Dh) or None: the attention of
    one decode step (`CausalSelfAttention.step`), and what the compiled step's attention kernel
    computes.

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


class KVCache:
    """A static cache of keys and values for every layer, filled left to right.

    Preallocated once (like EleutherAI/aria's decoder), so generation never reallocates or
    concatenates; `pos` is the number of positions filled.
    """

    def __init__(self, n_layers: int, batch: int, n_heads: int, max_len: int, head_dim: int, device, dtype):
        shape = (n_layers, batch, n_heads, max_len, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.max_len = max_len
        self.pos = 0

    def reset(self) -> None:
        self.pos = 0


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, context: int, scheme: str, dropout: float = 0.0,
                 attn_dropout: float = 0.0, bias: bool = True, chunk: int = 0, kernel: str = "auto"):
        super().__init__()
        self.kernel = kernel
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.scheme = scheme
        self.attn_dropout = attn_dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.resid_dropout = Dropout(dropout)
        self.chunk = chunk if chunk > 0 else 128
        if scheme == "relative":
            self.rel = nn.Parameter(torch.randn(n_heads, context, self.head_dim) * 0.02)
        elif scheme == "rope":
            self.rotary = Rotary(self.head_dim)

    def step(self, h: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, attend=cache_attention):
        """The attention of one new token (at position n) over the n cached keys kc, vc (B, H, n, Dh),
        as a pure function: -> (output (B, 1, D), the new key and value (B, H, Dh)). The new key is
        scored beside the cache rather than written into it, so nothing is updated in place (what
        an exported decode step needs). `attend`: `cache_attention`, or an operator with its schema."""
        b, _, d = h.shape
        n = kc.shape[2]
        qkv = self.qkv(h).view(b, 1, 3, self.n_heads, self.head_dim)
        if self.scheme == "rope":
            qkv = torch.cat((self.rotary.at(qkv[:, :, :2], n), qkv[:, :, 2:]), dim=2)
        q, k, v = qkv[:, 0].unbind(1)  # each (B, H, Dh)
        q = q * self.head_dim ** -0.5
        rel = self.rel.to(q.dtype) if self.scheme == "relative" else None  # (H, context, Dh); row d: distance d
        y = attend(q, kc, vc, rel, k + rel[:, 0] if rel is not None else k, v)
        return self.proj(y.reshape(b, 1, d)), k, v

    def _decode_relative(self, q, k, v) -> torch.Tensor:
        """One new query per sequence against the whole cache: no causal mask, and its relative
        logits are one product with the distance embeddings in reverse order (no skewing). A
        batched matmul over heads avoids broadcasting E to every sequence, which copied it (4x
        slower at batch 8)."""
        b, h, _, d = q.shape
        er = self._reversed_rel()[:, -k.shape[-2]:]  # (H, S, D): row j <-> distance S-1-j
        q = q * d ** -0.5
        rel = torch.bmm(q.view(b, h, d).transpose(0, 1), er.transpose(1, 2).to(q.dtype))  # (H, B, S)
        scores = torch.matmul(q, k.transpose(-1, -2)) + rel.transpose(0, 1).unsqueeze(2)
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    def _reversed_rel(self) -> torch.Tensor:
        """rel flipped along distance (row m <-> distance context-1-m), cached while it is unchanged."""
        if torch.is_grad_enabled():
            return self.rel.flip(1)
        key = (self.rel._version, self.rel.data_ptr(), self.rel.dtype)
        if getattr(self, "_rev_key", None) != key:
            self._rev = self.rel.detach().flip(1)
            self._rev_key = key
        return self._rev

    def _blockwise(self, q: torch.Tensor) -> bool:
        """Kernel choice for rope/absolute: PyTorch's fused SDPA, except for bf16 training on
        CPU, where the blockwise path measured ~2x faster (benchmarks/bench_train.py)."""
        if self.kernel != "auto":
            return self.kernel == "blockwise"
        return q.device.type == "cpu" and q.dtype == torch.bfloat16 and torch.is_grad_enabled()

    def _block(self, q: torch.Tensor) -> int:
        """Queries per block: the configured size on CPU (0: one full square), at least GPU_BLOCK elsewhere."""
        return self.chunk if self.chunk <= 0 or q.device.type == "cpu" else max(self.chunk, GPU_BLOCK)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0,
                in_checkpoint: bool = False) -> torch.Tensor:
        """`in_checkpoint`: the caller recomputes this whole layer in the backward pass (layer
        checkpointing), so long sequences do not checkpoint their blocks again inside it."""
        b, t, d = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim)
        start = cache.pos if cache is not None else 0
        if self.scheme == "rope":  # rotate q and k in one pass over a (B, T, 2, H, D) view
            qk = self.rotary(qkv[:, :, :2], start, seq_dim=1)
            q, k = qk.permute(2, 0, 3, 1, 4)
            v = qkv[:, :, 2].transpose(1, 2)
        else:
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
        if cache is not None:
            if start + t > cache.max_len:
                raise RuntimeError(f"KV cache full ({cache.max_len} positions); slide the window first")
            cache.k[layer, :, :, start:start + t] = k
            cache.v[layer, :, :, start:start + t] = v
            k, v = cache.k[layer, :, :, :start + t], cache.v[layer, :, :, :start + t]
        drop = self.attn_dropout if self.training else 0.0
        if t == 1 and cache is not None and self.scheme == "relative":
            y = self._decode_relative(q, k, v)
        elif t == 1 and cache is not None:
            y = F.scaled_dot_product_attention(q, k, v)  # one new query sees every cached key
        elif self.scheme == "relative" or self._blockwise(q):
            # Past ~1k positions the stored logits dominate activation memory: recompute them.
            y = blockwise_attention(q, k, v, getattr(self, "rel", None), drop, self.training, self._block(q),
                                    checkpoint_blocks=torch.is_grad_enabled() and t > 1024 and not in_checkpoint)
        elif start == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, dropout_p=drop)
        else:
            mask = causal_mask(t, start + t, x.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        y = y.transpose(1, 2).reshape(b, t, d)
        return self.resid_dropout(self.proj(y))
