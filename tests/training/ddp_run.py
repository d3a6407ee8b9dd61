"""`cadenza.train` under torchrun with one rank made different; each rank writes what it did
(its learning rate at every step, how it stopped) to RESULTS/rank-N.json. Run by test_ddp.py:

    torchrun --standalone --nproc_per_node 2 ddp_run.py STORE OUT RESULTS MODE [key=value ...]

MODE `late`: rank 0 starts its loop 2 s after rank 1, as when its own setup (the run log, the
environment record) is slow, so ranks that each timed the budget would fit different schedules.
MODE `nan@N`: rank 1's loss at step N is NaN, as when one rank's batch overflows.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from cadenza.training import trainer
from cadenza.training.config import resolve


def main() -> None:
    store, out, results, mode, *overrides = sys.argv[1:]
    rank, lrs = int(os.environ["RANK"]), []
    train_step, loop, setup = trainer._train_step, trainer._loop, trainer.setup

    def recording_step(s):
        loss, gnorm, lr = train_step(s)
        lrs.append(lr)
        return loss, gnorm, lr

    def late_loop(s, progress):
        time.sleep(2.0)
        return loop(s, progress)

    def poisoned_setup(*args, **kwargs):
        s = setup(*args, **kwargs)
        forward, bad = s.raw.forward, int(mode.split("@")[1])

        def poisoned(ids, targets=None, cache=None):
            logits, loss = forward(ids, targets, cache)
            return logits, loss * float("nan") if s.step + 1 == bad else loss

        s.raw.forward = poisoned  # what DDP calls through the module
        return s

    trainer._train_step = recording_step
    if mode == "late" and rank == 0:
        trainer._loop = late_loop
    if mode.startswith("nan@") and rank == 1:
        trainer.setup = poisoned_setup
    record: dict = {"rank": rank}
    try:
        res = trainer.train(resolve("tiny", None, overrides), store, out, progress=False)
        record.update(stopped_by=res.stopped_by, step=res.step)
    except trainer.NonFiniteLoss as e:
        record["error"] = str(e)
    record["lrs"] = lrs
    Path(results, f"rank-{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
