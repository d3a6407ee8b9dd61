"""An exponential moving average (EMA) of a model's weights: still one model, usually a better one.

With ``ema = d`` in the training settings, after every optimizer step each weight of the average
moves towards the trained weight: ``avg += (1 - r) * (w - avg)`` with ``r = min(d, (1 + n) / (10 + n))``
at update n, so the first updates do not drag the random initial weights along for thousands of
steps. The average is what the trainer validates and saves as the checkpoint's model; the weights
being trained go into the checkpoint's state, and a resumed run continues both exactly.

Under DDP every rank holds the same weights after each step, so every rank's average is the same.
"""

from __future__ import annotations

import copy

import torch


class WeightAverage:
    """The running average (`model`, a frozen copy in eval mode) of another model's weights."""

    def __init__(self, model: torch.nn.Module, decay: float):
        if not 0 < decay < 1:
            raise ValueError(f"ema decay must lie in (0, 1), got {decay}")
        self.decay = float(decay)
        self.model = copy.deepcopy(model).eval().requires_grad_(False)

    def rate(self, updates: int) -> float:
        """The decay of update number `updates` (0 for the first)."""
        return min(self.decay, (1 + updates) / (10 + updates))

    @torch.no_grad()
    def update(self, model: torch.nn.Module, updates: int) -> None:
        """Move the average towards `model`'s weights; buffers (not trained) are copied as they are."""
        weight = 1.0 - self.rate(updates)
        for a, b in zip(self.model.parameters(), model.parameters()):
            a.lerp_(b, weight)
        for a, b in zip(self.model.buffers(), model.buffers()):
            a.copy_(b)
