"""The LSTM baseline (Performance RNN's shape): embedding -> stacked LSTM -> linear."""

from __future__ import annotations

import torch
from torch import nn

from cadenza.env.device import cpu_supports_bf16
from cadenza.models.config import ModelConfig
from cadenza.models.loss import next_token_loss


class LSTMState:
    """Carried (h, c) state: the LSTM's equivalent of a KV cache, with no length limit."""

    def __init__(self, h: torch.Tensor, c: torch.Tensor):
        self.h, self.c = h, c
        self.pos = 0

    def reset(self) -> None:
        self.h.zero_()
        self.c.zero_()
        self.pos = 0


class MusicLSTM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.embed_dim)
        self.drop = nn.Dropout(cfg.dropout)
        self.lstm = nn.LSTM(cfg.embed_dim, cfg.lstm_hidden, cfg.lstm_layers, batch_first=True,
                            dropout=cfg.dropout if cfg.lstm_layers > 1 else 0.0)
        self.head = nn.Linear(cfg.lstm_hidden, cfg.vocab_size)
        self.grad_checkpoint = False  # cuDNN's fused LSTM has no per-block checkpointing
        self._autocast_cell_dtype: dict[str, torch.dtype] = {}  # per device type, see _cell_in_fp32

    windowed = False  # the (h, c) state carries the past: no window to slide

    def new_cache(self, batch: int, max_len: int | None = None, device=None, dtype=None) -> LSTMState:
        cfg = self.config
        p = self.head.weight
        shape = (cfg.lstm_layers, batch, cfg.lstm_hidden)
        return LSTMState(torch.zeros(shape, device=device or p.device, dtype=dtype or p.dtype),
                         torch.zeros(shape, device=device or p.device, dtype=dtype or p.dtype))

    def forward(self, ids: torch.Tensor, targets: torch.Tensor | None = None, cache: LSTMState | None = None):
        x = self.drop(self.tok_emb(ids))
        if cache is not None:
            y, (h, c) = self._lstm(x, (cache.h.to(x.dtype), cache.c.to(x.dtype)))
            cache.h, cache.c = h, c
            cache.pos += ids.shape[1]
        else:
            y, _ = self._lstm(x, None)
        logits = self.head(self.drop(y))
        return logits, next_token_loss(logits, targets)

    def _lstm(self, x: torch.Tensor, state):
        """The recurrent cell, in fp32 where reduced precision would fail or lose gradients: on a
        CPU without native bf16 (oneDNN has no bf16 LSTM there: "could not create a primitive
        descriptor"), and wherever bf16 autocast hands the cell to fp16 (cuDNN's RNN autocast
        does), where no grad scaler runs and small gradients would underflow unnoticed. The
        embedding and the head still run under autocast."""
        if self._cell_in_fp32(x):
            with torch.autocast(x.device.type, enabled=False):
                state = tuple(t.float() for t in state) if state is not None else None
                return self.lstm(x.float(), state)
        return self.lstm(x, state)

    def _cell_in_fp32(self, x: torch.Tensor) -> bool:
        dev = x.device.type
        if not torch.is_autocast_enabled(dev):
            return False
        if dev == "cpu" and not cpu_supports_bf16():
            return True
        dtype = torch.get_autocast_dtype(dev)
        if dtype != torch.bfloat16:  # fp16 autocast comes with a grad scaler
            return False
        observed = self._autocast_cell_dtype
        if dev not in observed:  # what autocast makes of the cell here, seen once on a one-token input
            training = self.lstm.training
            # in eval mode: the cell's dropout would draw from the RNG, and a resumed run, which
            # looks again after restoring it, would then draw different masks from the run it continues
            self.lstm.train(False)
            try:
                with torch.no_grad():
                    observed[dev] = self.lstm(x[:1, :1].detach())[0].dtype
            finally:
                self.lstm.train(training)
        return observed[dev] == torch.float16

    def flops_per_token(self, seq_len: int) -> float:
        return 6 * sum(p.numel() for p in self.parameters() if p is not self.tok_emb.weight)
