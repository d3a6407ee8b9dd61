"""What a training run writes about itself: config.json, run.json, metrics.jsonl and TensorBoard.

Only the main process logs. ``metrics.jsonl`` is line-buffered and flushed after every record,
so ``tail -f`` follows training and a run killed at any moment keeps every step it logged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cadenza.atomic import write_json, write_text
from cadenza.env.device import peak_memory_mb


class RunLog:
    def __init__(self, out: Path, config: dict, run_meta: dict[str, Any], start_step: int, log_every: int):
        from torch.utils.tensorboard import SummaryWriter

        out.mkdir(parents=True, exist_ok=True)
        self.out, self.log_every = out, log_every
        write_json(out / "config.json", config)
        self._write_run_json(run_meta, start_step)
        self.tb = SummaryWriter(str(out / "tb"), purge_step=start_step + 1 if start_step else None)
        if start_step:
            _truncate_log(out / "metrics.jsonl", start_step)
        self._metrics = open(out / "metrics.jsonl", "a", buffering=1)  # line-buffered: one record, one write

    def _write_run_json(self, run_meta: dict[str, Any], start_step: int) -> None:
        """The original command and environment stay; each resume is listed after them."""
        path = self.out / "run.json"
        previous = json.loads(path.read_text()) if start_step and path.exists() else None
        if previous:
            resumes = previous.pop("resumes", []) + [{"step": start_step, "command": run_meta["command"],
                                                      "environment": run_meta["environment"]}]
            write_json(path, {**previous, "resumes": resumes})
        else:
            write_json(path, run_meta)

    def _write(self, rec: dict) -> None:
        self._metrics.write(json.dumps(rec) + "\n")
        self._metrics.flush()

    def step(self, rec: dict, device) -> None:
        """One optimizer step: a metrics.jsonl line always, TensorBoard scalars every `log_every`."""
        self._write(rec)
        step = rec["step"]
        if step % self.log_every == 0 or step == 1:
            for key in ("loss", "lr", "grad_norm", "tokens_per_s"):
                self.tb.add_scalar(f"train/{key}", rec[key], step)
            self.tb.add_scalar("train/peak_memory_mb", peak_memory_mb(device), step)

    def valid(self, step: int, loss: float) -> None:
        self._write({"step": step, "valid_loss": loss})
        self.tb.add_scalar("valid/loss", loss, step)

    def close(self) -> None:
        self.tb.close()
        self._metrics.close()


def _truncate_log(path: Path, step: int) -> None:
    """Keep the records up to `step`: a run resumed from an older checkpoint (a newer one did not
    verify, or a kill came between a log line and its checkpoint) logs those steps again; a line cut
    by a crash goes too."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    write_text(path, "".join(f"{line}\n" for line in kept))


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
