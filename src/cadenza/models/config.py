"""`ModelConfig`: everything that defines a model's architecture, saved in every checkpoint."""

from __future__ import annotations

from dataclasses import dataclass

from cadenza.settings import SettingError, setting, validate


@dataclass
class ModelConfig:
    model: str = setting("transformer", choices=("transformer", "lstm"))
    vocab_size: int = setting(391, ge=1, doc="set from the token store by the trainer")
    context: int = setting(512, ge=2, doc="tokens the model attends to (and trains on)")
    # transformer
    attention: str = setting("relative", choices=("relative", "rope", "absolute"),
                             doc="relative (Music Transformer) | rope | absolute")
    d_model: int = setting(256, ge=1)
    n_layers: int = setting(4, ge=1)
    n_heads: int = setting(4, ge=1)
    d_ff: int = setting(1024, ge=1)
    dropout: float = setting(0.1, ge=0, lt=1, doc="residual and embedding dropout")
    attn_dropout: float = setting(0.0, ge=0, lt=1, doc="on attention weights; > 0 disables the fused kernels")
    tie_weights: bool = True
    bias: bool = True
    attn_chunk: int = setting(128, ge=1, doc="queries per block of the blockwise kernel (models/attention.py)")
    attn_kernel: str = setting("auto", choices=("auto", "sdpa", "blockwise"), doc="rope/absolute kernel")
    # lstm
    embed_dim: int = setting(256, ge=1)
    lstm_hidden: int = setting(512, ge=1)
    lstm_layers: int = setting(2, ge=1)

    def validate(self) -> "ModelConfig":
        validate(self)
        if self.model == "transformer" and self.d_model % self.n_heads:
            raise SettingError("d_model", f"must be divisible by n_heads ({self.n_heads}), got {self.d_model}")
        if self.attention == "rope" and (self.d_model // self.n_heads) % 2:
            raise SettingError("d_model", "/ n_heads must be even for rope (rotary positions rotate pairs)")
        return self
