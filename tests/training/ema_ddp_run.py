"""`cadenza.train` with `ema` under torchrun; each rank saves its moving average of the weights to
RESULTS/rank-N.pt. Run by test_ema.py:

    torchrun --standalone --nproc_per_node 2 ema_ddp_run.py STORE OUT RESULTS [key=value ...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from cadenza.training import trainer
from cadenza.training.config import resolve


def main() -> None:
    store, out, results, *overrides = sys.argv[1:]
    loop, sessions = trainer._loop, []

    def keeping_loop(s, progress):
        sessions.append(s)
        return loop(s, progress)

    trainer._loop = keeping_loop
    trainer.train(resolve("tiny", None, overrides), store, out, progress=False)
    torch.save(sessions[0].ema.model.state_dict(), Path(results, f"rank-{os.environ['RANK']}.pt"))


if __name__ == "__main__":
    main()
