"""`ModelConfig`: everything that defines a model's architecture, saved in every checkpoint."""

from __future__ import annotations

from dataclasses import dataclass

from cadenza.settings import SettingError, setting, validate


@dataclass
class ModelConfig:
    model: str = setting("transformer", choices=("transformer", "lstm"), doc="the architecture")
    vocab_size: int = setting(391, ge=1, doc="set from the token store by the trainer")
    context: int = setting(512, ge=2, doc="tokens per training window, and the most the model attends to")
    # transformer
    attention: str = setting("relative", choices=("relative", "rope", "absolute"),
                             doc="relative = Music Transformer, rope = rotary on fused attention kernels, "
                                 "absolute = learned positions")
    d_model: int = setting(256, ge=1, doc="transformer: width of each token's vector")
    n_layers: int = setting(4, ge=1, doc="transformer: blocks")
    n_heads: int = setting(4, ge=1, doc="transformer: attention heads per block (d_model must be divisible by it)")
    d_ff: int = setting(1024, ge=1, doc="transformer: width of each block's feed-forward layer")
    dropout: float = setting(0.1, ge=0, lt=1, doc="residual and embedding dropout")
    attn_dropout: float = setting(0.0, ge=0, lt=1, doc="on attention weights; > 0 disables the fused kernels")
    tie_weights: bool = setting(True, doc="the output layer shares the token embedding's weights")
    bias: bool = setting(True, doc="biases in the linear layers and layer norms")
    attn_chunk: int = setting(128, ge=1, doc="queries per block of the blockwise kernel (models/attention.py)")
    attn_kernel: str = setting("auto", choices=("auto", "sdpa", "blockwise"), doc="rope/absolute kernel")
    # lstm
    embed_dim: int = setting(256, ge=1, doc="LSTM: width of the token embedding")
    lstm_hidden: int = setting(512, ge=1, doc="LSTM: hidden units per layer")
    lstm_layers: int = setting(2, ge=1, doc="LSTM: stacked layers")

    def validate(self) -> ModelConfig:
        validate(self)
        if self.model == "transformer" and self.d_model % self.n_heads:
            raise SettingError("d_model", f"must be divisible by n_heads ({self.n_heads}), got {self.d_model}")
        if self.attention == "rope" and (self.d_model // self.n_heads) % 2:
            raise SettingError("d_model", "/ n_heads must be even for rope (rotary positions rotate pairs)")
        return self
