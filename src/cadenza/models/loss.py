"""The next-token loss both models train with, and the windows -> (inputs, targets) split it scores."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # targets with this value (padding) add nothing to the loss


def inputs_targets(batch: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split windows of context + 1 ids into inputs and targets; PAD targets are ignored."""
    x = batch[:, :-1]
    y = batch[:, 1:].clone()
    y[y == pad_id] = IGNORE_INDEX
    return x, y


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor | None:
    """Mean cross-entropy over the targets that are not IGNORE_INDEX (padding), in fp32."""
    if targets is None:
        return None
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX)
