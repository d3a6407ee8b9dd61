"""The training loop: one function from a token store and a config to checkpoints.

Read top to bottom like nanoGPT's train.py: DDP from torchrun's environment, one autocast
context, a grad scaler that only switches on for fp16, gradient sync skipped on accumulation
micro-steps, only rank 0 logs, validates and writes. The host waits for the device only at
logging, validation and checkpoint steps, where the ranks agree on the losses (averaged) and on
whether to stop. Resuming restores weights (and their moving average, with `ema`), optimizer,
scaler and RNG states and continues the exact sample stream (`data.dataset.StepSampler`), so on
CPU a resumed run reproduces the losses of an uninterrupted one.

`train` is the setup and the loop; each named step of the loop is a function below it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cadenza.atomic import output_folder, remove_leftovers
from cadenza.data.statistics import store_statistics
from cadenza.env.device import DistInfo, autocast, cleanup_distributed, enable_tf32, setup_distributed
from cadenza.env.doctor import doctor_summary
from cadenza.env.record import command_line
from cadenza.evaluation.nll import window_loss
from cadenza.models import checkpoint as ckpt
from cadenza.models import count_parameters
from cadenza.models.loss import inputs_targets
from cadenza.training.config import RunConfig, resolve
from cadenza.training.preview import log_sample
from cadenza.training.runlog import RunLog, say
from cadenza.training.session import Session, setup
from cadenza.training.signals import StopRequest


class NonFiniteLoss(RuntimeError):
    pass


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    train_loss: float
    valid_loss: float | None
    best_valid_loss: float | None
    unigram_nll: float | None
    checkpoint: Path | None
    stopped_by: str  # max_steps | max_minutes | signal | early_stop
    signal: int | None = None  # SIGINT / SIGTERM when stopped_by == "signal"


def lr_at(step: int, cfg, horizon: int) -> float:
    """Linear warmup, then cosine decay to min_lr at `horizon` steps."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if step >= horizon:
        return cfg.min_lr
    ratio = (step - cfg.warmup_steps) / max(1, horizon - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)


def train(cfg: RunConfig | None = None, data: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
          *, resume: bool = False, progress: bool = True, command: str | None = None) -> TrainResult:
    """Train `cfg` (default: the tiny preset) on the token store `data`, writing the run folder `out`.

    With `resume`, the run in `out` continues from its newest checkpoint; its saved config and data
    path are used unless `cfg` / `data` are given. The caller's `cfg` is never modified.
    """
    if out is None:
        raise ValueError("train needs a run folder (out=...)")
    out = Path(out)
    if resume:
        cfg = cfg or resolve(None, run_dir=out)
        data = data or _saved_data_path(out)
    if data is None:
        raise ValueError("train needs a token store (data=...), made by `cadenza prepare`")
    cfg = copy.deepcopy(cfg or resolve("tiny")).validate()
    dist = setup_distributed(cfg.train.device)
    enable_tf32(dist.device)  # fp32 matmuls in training and its preview samples
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        with _run_folder(out, dist):
            return _run(cfg, data, out, resume, dist, progress, command)  # the session dies here
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        cleanup_distributed()  # after the session, so DDP no longer holds the process group


def _run(cfg: RunConfig, data: str | os.PathLike, out: Path, resume: bool, dist: DistInfo, progress: bool,
         command: str | None) -> TrainResult:
    """Set up the session and train it; the session (DDP wrapper included) is dropped on return."""
    s = setup(cfg, Path(data), out, resume, dist)
    if dist.is_main:
        s.run_meta = _run_meta(s, data, command)
        s.log = RunLog(out, cfg.to_dict(), s.run_meta, s.step, cfg.train.log_every)
        _announce(s)
    try:
        result = _loop(s, progress and dist.is_main)
    finally:
        if s.log is not None:
            s.log.close()
    if dist.enabled:  # only after a clean finish: a rank that failed would leave the others waiting
        torch.distributed.barrier()  # rank 0 writes the last checkpoint alone; every rank returns after it
    return result


@contextlib.contextmanager
def _run_folder(out: Path, dist: DistInfo):
    """The main process holds the run folder for the whole run: a second `train` into it stops at
    once, leftovers of an interrupted checkpoint write are removed, and a folder this run created
    goes again if it fails before its first checkpoint."""
    if not dist.is_main:
        yield
        return
    with output_folder(out, "train", keep=lambda f: bool(ckpt.list_checkpoints(f))):
        remove_leftovers(out / ckpt.CKPT)
        yield


def _saved_data_path(out: Path) -> str:
    run = out / "run.json"
    if not run.exists():
        raise FileNotFoundError(f"{run}: not found; --resume needs a run folder made by `cadenza train`")
    return json.loads(run.read_text())["data"]


# ---- setup ---------------------------------------------------------------------------------------
def _run_meta(s: Session, data, command: str | None) -> dict[str, Any]:
    return {"command": command or command_line(), "data": str(data), "data_fingerprint": s.store.fingerprint,
            "tokenizer": s.tok.to_dict(), "note_seconds": s.store.manifest.get("note_seconds"),
            **store_statistics(s.store), "init": s.cfg.train.init,
            "environment": doctor_summary(),
            "parameters": count_parameters(s.raw), "precision": s.precision, "device": str(s.device),
            "world_size": s.dist.world_size}


def _announce(s: Session) -> None:
    m = s.cfg.model
    kind = f"{m.model}/{m.attention}" if m.model == "transformer" else m.model
    say(f"cadenza train: {kind} {count_parameters(s.raw) / 1e6:.2f}M parameters, {s.device}, {s.precision}, "
        f"world {s.dist.world_size}, {s.store.totals['splits']['train']['tokens']:,} train tokens"
        + (f", unigram baseline {s.unigram:.3f} nats/token" if s.unigram is not None else ""))


# ---- the loop ------------------------------------------------------------------------------------
def _loop(s: Session, progress: bool) -> TrainResult:
    """Steps go to the device back to back; the host reads their losses only at a sync point
    (`_sync_due`), where it logs them, decides whether to stop, validates and saves."""
    tc = s.cfg.train
    budget = tc.max_minutes * 60 if tc.max_minutes else None
    fit = budget is not None and s.step == 0  # a time-bounded run ends its cosine schedule with the budget
    t0 = t_sync = time.time()
    t10, pending, valid_loss, loss, stopped_by, last_ckpt = None, [], None, float("nan"), "max_steps", None
    bar = _progress(progress, s.step, s.horizon)
    with StopRequest() as stop:
        s.raw.train()
        while s.step < tc.max_steps:
            pending.append(_train_step(s))
            out_of_time = budget is not None and time.time() - t0 >= budget
            if not _sync_due(s, fit, stop.requested or out_of_time):
                continue
            rows, reason = _sync(s, pending, stop.requested, out_of_time)
            now = time.time()
            _record(s, rows, _tokens_per_step(s) * len(rows) / max(now - t_sync, 1e-9), bar, valid_loss)
            loss, pending = rows[-1][1], []
            if fit and s.step == 10:
                t10 = now
            if fit and s.step == 30 and t10:  # steps 10-30: the first ones pay for allocations, kernel choice
                _fit_horizon(s, budget - (now - t0), (now - t10) / 20, bar)
            final = s.step >= tc.max_steps or reason is not None
            evaluated = s.dist.is_main and s.valid_windows is not None and (s.step % tc.eval_every == 0 or final)
            if evaluated:
                valid_loss = _evaluate(s)
            if s.step % tc.save_every == 0 or final:
                last_ckpt = _save(s, loss, valid_loss if evaluated else None) or last_ckpt
            t_sync = time.time()  # the next interval times training steps, not this validation or save
            if reason is not None:
                stopped_by = reason
                break
    if bar is not None:
        bar.close()
    if s.dist.is_main:
        msg = f"step {s.step}: train loss {loss:.3f}"
        if valid_loss is not None:
            msg += f", valid NLL {valid_loss:.3f} nats/token (unigram baseline {s.unigram:.3f})"
        say(msg + (f"; checkpoint {last_ckpt}" if last_ckpt else ""))
    return TrainResult(s.out, s.step, loss, valid_loss, s.best, s.unigram, last_ckpt, stopped_by, stop.signum)


def _train_step(s: Session) -> tuple[torch.Tensor, torch.Tensor, float]:
    """One optimizer step over `grad_accum` micro-batches -> (loss, gradient norm, learning rate).
    The loss and the norm stay on the device: reading them would make the host wait for the GPU."""
    tc = s.cfg.train
    lr = lr_at(s.step, tc, s.horizon)
    for g in s.opt.param_groups:
        g["lr"] = lr
    loss_sum = torch.zeros((), device=s.device)
    for micro in range(tc.grad_accum):
        x, y = inputs_targets(next(s.loader).to(s.device, non_blocking=True), s.tok.pad_id)
        if s.dist.enabled:  # gradients are averaged across ranks on the last micro-step only
            s.fwd.require_backward_grad_sync = micro == tc.grad_accum - 1
        with autocast(s.device, s.precision):
            _, loss = s.fwd(x, y)
        s.scaler.scale(loss / tc.grad_accum).backward()
        loss_sum += loss.detach().float() / tc.grad_accum  # non-finite if any micro-batch's loss is
    s.scaler.unscale_(s.opt)
    gnorm = torch.nn.utils.clip_grad_norm_(s.raw.parameters(), tc.grad_clip)
    s.scaler.step(s.opt)
    s.scaler.update()
    s.opt.zero_grad(set_to_none=True)
    if s.ema is not None:
        s.ema.update(s.raw, s.step)
    s.step += 1
    return loss_sum, gnorm.detach(), lr


def _sync_due(s: Session, fit: bool, wants_stop: bool) -> bool:
    """Whether the host reads this step's results: a logging, validation or checkpoint step, the
    last one, and steps 10 and 30 of a run fitting its schedule to a time budget, which every rank
    knows from the step number alone. One process also stops after any step once it wants to (a
    signal, the budget, patience run out); the ranks of a DDP run agree on that at those steps."""
    tc, n = s.cfg.train, s.step
    early = bool(tc.patience and s.since_best >= tc.patience)
    return (n >= tc.max_steps or n % tc.log_every == 0 or n % tc.eval_every == 0 or n % tc.save_every == 0
            or (fit and n in (10, 30)) or (not s.dist.enabled and (wants_stop or early)))


def _sync(s: Session, pending: list, requested: bool, out_of_time: bool) -> tuple[list[tuple], str | None]:
    """The interval's one host sync: each step's (step, loss, gradient norm, lr), the loss and norm
    averaged over the ranks, and why to stop (a signal, the time budget, no progress on
    validation) as any rank sees it; under DDP all of it in a single all-reduce, so that every rank
    logs the same numbers, stops at the same step, and stops on any rank's non-finite loss."""
    tc, n = s.cfg.train, len(pending)
    early = bool(tc.patience and s.since_best >= tc.patience)
    flags = torch.tensor([requested, out_of_time, early], dtype=torch.float32, device=s.device)
    packed = torch.cat([torch.stack([p[0] for p in pending]).float(), torch.stack([p[1] for p in pending]).float(),
                        flags])
    if s.dist.enabled:
        torch.distributed.all_reduce(packed)  # a sum: the losses are averaged below, a raised flag stays > 0
        packed[:2 * n] /= s.dist.world_size
    values = packed.tolist()
    rows = [(s.step - n + 1 + i, values[i], values[n + i], pending[i][2]) for i in range(n)]
    reason = next((r for r, v in zip(("signal", "max_minutes", "early_stop"), values[2 * n:]) if v > 0), None)
    return rows, reason


def _record(s: Session, rows: list[tuple], tokens_per_s: float, bar, valid_loss: float | None) -> None:
    """Log an interval's steps (the main process); raise at the first non-finite loss, which every
    rank sees in the same averaged row."""
    for step, loss, gnorm, lr in rows:
        if not math.isfinite(loss):
            raise NonFiniteLoss(f"loss became {loss} at step {step} (lr {lr:.2e}); lower the learning rate or use "
                                f"--precision fp32/bf16, then resume from the last checkpoint in {s.out / ckpt.CKPT}")
        if s.log is not None:
            s.log.step({"step": step, "loss": loss, "lr": lr, "grad_norm": gnorm, "tokens_per_s": tokens_per_s},
                       s.device)
    if bar is not None:
        bar.update(len(rows))
        bar.set_postfix(loss=f"{rows[-1][1]:.3f}", tok_s=f"{tokens_per_s:,.0f}",
                        **({"valid": f"{valid_loss:.3f}"} if valid_loss is not None else {}))


def _tokens_per_step(s: Session) -> int:
    tc = s.cfg.train
    return tc.batch_size * tc.grad_accum * s.dist.world_size * s.cfg.model.context


def _fit_horizon(s: Session, remaining: float, per_step: float, bar) -> None:
    """End the cosine schedule where the time budget will end. Under DDP rank 0 decides and the
    others take its horizon: ranks that each fit their own would step with different learning
    rates, and their weights would drift apart."""
    tc = s.cfg.train
    horizon = max(tc.warmup_steps + 1, min(tc.max_steps, s.step + int(remaining / (per_step * 1.08))))
    if s.dist.enabled:
        agreed = torch.tensor([horizon], dtype=torch.int64, device=s.device)
        torch.distributed.broadcast(agreed, src=0)
        horizon = int(agreed.item())
    s.horizon = horizon
    if bar is not None:
        bar.total = s.horizon


def _evaluate(s: Session) -> float:
    loss = window_loss(s.model, s.valid_windows, s.tok.pad_id, s.device, s.precision)
    improved = s.best is None or loss < s.best
    s.best = loss if improved else s.best
    s.since_best = 0 if improved else s.since_best + 1
    s.log.valid(s.step, loss)
    if s.cfg.train.sample_tokens:
        log_sample(s.log.tb, s.model, s.tok, s.step, s.cfg.train.sample_tokens, s.device)
    return loss


def _save(s: Session, train_loss: float, valid_loss: float | None) -> Path | None:
    """Write a checkpoint on the main process; every rank hands over its RNG state for it. With
    `ema` the checkpoint's model is the moving average, and its state keeps the trained weights."""
    state = {"optimizer": s.opt.state_dict(), "scaler": s.scaler.state_dict(), "horizon": s.horizon,
             "rng_cpu": _gather(s.dist, torch.get_rng_state()),
             "rng_cuda": _gather(s.dist, torch.cuda.get_rng_state(s.device)) if s.device.type == "cuda" else []}
    if not s.dist.is_main:
        return None
    if s.ema is not None:
        state["train_weights"] = s.raw.state_dict()
    meta = {"config": s.cfg.to_dict(), "tokenizer": s.tok.to_dict(), "lr_horizon": s.horizon,
            "valid_loss": valid_loss, "best_valid_loss": s.best, "train_loss": train_loss, **s.run_meta}
    return ckpt.save_checkpoint(s.out, s.step, s.model, meta, state, s.cfg.train.keep_last)


def _gather(dist: DistInfo, mine: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's RNG state (dropout masks differ per rank), collected for rank 0's checkpoint."""
    if not dist.enabled:
        return [mine]
    out = [None] * dist.world_size
    torch.distributed.all_gather_object(out, mine)
    return out


def _progress(enabled: bool, start: int, total: int):
    if not enabled:
        return None
    import sys

    from tqdm import tqdm

    # In a log file (no terminal) one line every 30 s, not one per step.
    return tqdm(total=total, initial=start, unit="step", desc="train", file=sys.stderr, dynamic_ncols=True,
                mininterval=0.1 if sys.stderr.isatty() else 30)
