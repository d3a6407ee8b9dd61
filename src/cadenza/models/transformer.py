"""A decoder-only Music Transformer: pre-norm blocks, tied embeddings, a choice of positions."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from cadenza.models.attention import CausalSelfAttention, Dropout, KVCache, cache_attention
from cadenza.models.config import ModelConfig
from cadenza.models.loss import next_token_loss


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg.d_model, cfg.n_heads, cfg.context, cfg.attention, cfg.dropout,
                                        cfg.attn_dropout, cfg.bias, cfg.attn_chunk, cfg.attn_kernel)
        self.ln2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x, cache: KVCache | None = None, layer: int = 0, in_checkpoint: bool = False):
        x = x + self.attn(self.ln1(x), cache, layer, in_checkpoint)
        return x + self.mlp(self.ln2(x))

    def step(self, x, kc, vc, attend=cache_attention):
        """One new token through the block over its layer's cache (`CausalSelfAttention.step`)."""
        a, k, v = self.attn.step(self.ln1(x), kc, vc, attend)
        x = x + a
        return x + self.mlp(self.ln2(x)), k, v


class MusicTransformer(nn.Module):
    """`forward(ids, targets)` for training; `forward(ids, cache=...)` for incremental decoding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.context, cfg.d_model) if cfg.attention == "absolute" else None
        self.drop = Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.head.weight = self.tok_emb.weight
        self.grad_checkpoint = False
        self.apply(self._init)
        # GPT-2's scaled init of the residual projections keeps the residual stream's variance flat
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def new_cache(self, batch: int, max_len: int | None = None, device=None, dtype=None) -> KVCache:
        cfg = self.config
        p = self.tok_emb.weight
        return KVCache(cfg.n_layers, batch, cfg.n_heads, max_len or cfg.context, cfg.d_model // cfg.n_heads,
                       device or p.device, dtype or p.dtype)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None):
        b, t = ids.shape
        start = cache.pos if cache is not None else 0
        if start + t > self.config.context and self.pos_emb is not None:
            raise ValueError(f"sequence of {start + t} exceeds the context of {self.config.context}")
        x = self.tok_emb(ids)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(start, start + t, device=ids.device))
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            if self.grad_checkpoint and self.training and cache is None:
                x = checkpoint(block, x, None, i, True, use_reentrant=False)
            else:
                x = block(x, cache, i)
        if cache is not None:
            cache.pos += t
        logits = self.head(self.ln_f(x))
        return logits, next_token_loss(logits, targets)

    windowed = True  # attends over a window of `context` tokens, which slides past it

    def step(self, ids: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, attend=cache_attention):
        """One cached decode step as a pure function: the new ids (B, 1) and the filled part of the
        KV cache (L, B, H, n, Dh) -> (logits (B, V), the new keys and values (L, B, H, Dh)).
        `forward` with a `KVCache` computes the same; this form writes nothing in place, so it can be
        exported and compiled (`cadenza.generation.step`). `attend`: the attention over the cache."""
        n = k_cache.shape[3]
        x = self.tok_emb(ids)
        if self.pos_emb is not None:
            x = x + self.pos_emb.weight[n]
        new_k, new_v = [], []
        for i, block in enumerate(self.blocks):
            x, k, v = block.step(x, k_cache[i], v_cache[i], attend)
            new_k.append(k)
            new_v.append(v)
        return self.head(self.ln_f(x))[:, -1], torch.stack(new_k), torch.stack(new_v)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward), as in the PaLM appendix / nanoGPT."""
        cfg = self.config
        n = sum(p.numel() for p in self.parameters())
        if self.pos_emb is not None:
            n -= self.pos_emb.weight.numel()
        attn = 12 * cfg.n_layers * cfg.d_model * seq_len  # QK^T and AV, full square
        if cfg.attention == "relative":
            attn += 6 * cfg.n_layers * cfg.d_model * seq_len  # Q E^T
        return 6 * n + attn
