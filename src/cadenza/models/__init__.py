"""Models: `build_model(ModelConfig)` gives a MusicTransformer or a MusicLSTM.

Both share one interface: ``logits, loss = model(ids, targets)`` for training, and
``cache = model.new_cache(batch)`` then ``logits, _ = model(ids, cache=cache)`` for incremental
decoding (a static KV cache for the transformer, carried (h, c) state for the LSTM).
"""

from cadenza.models.attention import KVCache
from cadenza.models.config import ModelConfig
from cadenza.models.lstm import LSTMState, MusicLSTM
from cadenza.models.transformer import MusicTransformer

__all__ = ["KVCache", "LSTMState", "ModelConfig", "MusicLSTM", "MusicTransformer", "build_model", "count_parameters"]


def build_model(cfg: ModelConfig):
    cfg.validate()
    if cfg.model == "lstm":
        return MusicLSTM(cfg)
    return MusicTransformer(cfg)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
