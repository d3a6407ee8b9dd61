"""The training loop: one function from a token store and a config to checkpoints.

Read top to bottom like nanoGPT's train.py: DDP from torchrun's environment, one autocast
context, a grad scaler that only switches on for fp16, gradient sync skipped on accumulation
micro-steps, only rank 0 logs, validates and writes. Resuming restores weights, optimizer,
scaler and RNG states and continues the exact sample stream (`dataset.StepSampler`), so on CPU a
resumed run reproduces the losses of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from cadenza import checkpoint as ckpt
from cadenza.atomic import write_json
from cadenza.config import RunConfig
from cadenza.dataset import StepSampler, WindowDataset, fixed_windows, inputs_targets
from cadenza.device import autocast, cleanup_distributed, peak_memory_mb, resolve_precision, setup_distributed
from cadenza.env import command_line, environment_summary
from cadenza.models import build_model, count_parameters
from cadenza.store import TokenStore


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
    stopped_by: str  # max_steps | max_minutes | signal


def lr_at(step: int, cfg, horizon: int) -> float:
    """Linear warmup, then cosine decay to min_lr at `horizon` steps."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if step >= horizon:
        return cfg.min_lr
    ratio = (step - cfg.warmup_steps) / max(1, horizon - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)


@torch.no_grad()
def window_loss(model, windows: torch.Tensor, pad_id: int, device, precision: str, batch: int = 16) -> float:
    """Mean NLL per target token (nats) over fixed windows."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        x, y = inputs_targets(windows[i:i + batch].to(device), pad_id)
        with autocast(device, precision):
            _, loss = model(x, y)
        n = int((y != -100).sum())
        total += float(loss) * n
        count += n
    model.train()
    return total / max(count, 1)


class _Stop:
    """SIGINT/SIGTERM ask the loop to save and exit at the end of the current step."""

    def __init__(self):
        self.requested = False
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. a notebook worker): no handler
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested:  # a second Ctrl-C means now
            raise KeyboardInterrupt
        self.requested = True
        print(f"\n{signal.Signals(signum).name}: saving a checkpoint and stopping", file=sys.stderr)

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def train(cfg: RunConfig, data: str | Path, out: str | Path, resume: bool = False, progress: bool = True,
          command: str | None = None) -> TrainResult:
    """Train `cfg` on the token store `data`, writing the run folder `out` (see module docstring)."""
    cfg.validate()
    tc = cfg.train
    dist = setup_distributed(tc.device)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        return _train(cfg, Path(data), Path(out), resume, progress and dist.is_main, command, dist)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        cleanup_distributed()


def _train(cfg, data, out, resume, progress, command, dist) -> TrainResult:
    tc = cfg.train
    device = dist.device
    precision = resolve_precision(tc.precision, device)
    store = TokenStore(data)
    tok = store.tokenizer
    cfg.model.vocab_size = tok.vocab_size
    if tc.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=False)
        import os

        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(tc.seed + dist.rank)

    start_step, state, best = 0, None, None
    if resume:
        last = ckpt.latest_checkpoint(out)
        if last is None:
            raise FileNotFoundError(f"{out}: nothing to resume (no complete checkpoint)")
        meta = ckpt.read_meta(last)
        if meta["config"]["model"] != asdict(cfg.model):
            raise ValueError(f"{last}: model config differs from the resumed run's; keep the model settings")
        if meta.get("data_fingerprint") not in (None, store.fingerprint) and dist.is_main:
            print(f"warning: {data} is not the store this run started on", file=sys.stderr)
        start_step, best, state = meta["step"], meta.get("best_valid_loss"), ckpt.load_state(last)
    elif ckpt.list_checkpoints(out):
        raise FileExistsError(f"{out} already has checkpoints: add --resume to continue it, or choose a new --out")

    model = build_model(cfg.model)
    if state is not None:
        from safetensors.torch import load_model as st_load

        st_load(model, str(ckpt.latest_checkpoint(out) / "model.safetensors"), strict=False)
    model.grad_checkpoint = tc.grad_checkpoint
    model.to(device)
    raw = model
    decay = [p for n, p in raw.named_parameters() if p.dim() >= 2 and "rel" not in n.split(".")[-1]]
    no_decay = [p for n, p in raw.named_parameters() if not (p.dim() >= 2 and "rel" not in n.split(".")[-1])]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=tc.lr, betas=(tc.beta1, tc.beta2), **_fused_kw(device))
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    if state is not None:
        opt.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng_cpu"][dist.rank % len(state["rng_cpu"])])
        if device.type == "cuda" and state.get("rng_cuda"):
            torch.cuda.set_rng_state(state["rng_cuda"][dist.rank % len(state["rng_cuda"])], device)
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    fwd = torch.compile(model) if tc.compile else model

    ds = WindowDataset(store, "train", cfg.model.context, seed=tc.seed, transpose=tc.transpose, stretch=tc.stretch)
    sampler = StepSampler(tc.batch_size, start_step, dist.rank, dist.world_size, tc.grad_accum)
    # The loader gets its own generator: creating an iterator draws a seed, and drawing it from the
    # global RNG would shift the dropout masks of a resumed run.
    loader = iter(DataLoader(ds, batch_size=tc.batch_size, sampler=sampler, num_workers=tc.num_workers,
                             pin_memory=device.type == "cuda", persistent_workers=tc.num_workers > 0,
                             generator=torch.Generator().manual_seed(tc.seed)))
    has_valid = bool(store.split("valid"))
    valid_windows = fixed_windows(store, "valid", cfg.model.context, tc.eval_windows) if has_valid else None
    unigram = store.unigram_nll("valid") if has_valid else None

    writer = log = None
    run_meta = {}
    if dist.is_main:
        out.mkdir(parents=True, exist_ok=True)
        run_meta = {
            "command": command or command_line(),
            "data": str(data), "data_fingerprint": store.fingerprint,
            "tokenizer": store.manifest["tokenizer"],
            "environment": _environment(),
            "parameters": count_parameters(raw), "precision": precision, "device": str(device),
            "world_size": dist.world_size,
        }
        write_json(out / "config.json", cfg.to_dict())
        previous = json.loads((out / "run.json").read_text()) if resume and (out / "run.json").exists() else None
        if previous:  # keep the original command and environment; list each resume after it
            resumes = previous.pop("resumes", []) + [{"step": start_step, "command": run_meta["command"],
                                                      "environment": run_meta["environment"]}]
            write_json(out / "run.json", {**previous, "resumes": resumes})
        else:
            write_json(out / "run.json", run_meta)
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb"), purge_step=start_step + 1 if start_step else None)
        log = open(out / "metrics.jsonl", "a")
        print(f"cadenza train: {cfg.model.model}/{cfg.model.attention if cfg.model.model == 'transformer' else ''} "
              f"{count_parameters(raw) / 1e6:.2f}M parameters, {device}, {precision}, world {dist.world_size}, "
              f"{store.totals['splits']['train']['tokens']:,} train tokens" +
              (f", unigram baseline {unigram:.3f} nats/token" if unigram is not None else ""), file=sys.stderr)

    horizon = state["horizon"] if state is not None else (tc.lr_horizon or tc.max_steps)
    tokens_per_step = tc.batch_size * tc.grad_accum * dist.world_size * cfg.model.context
    t0 = time.time()
    budget = tc.max_minutes * 60 if tc.max_minutes else None
    valid_loss, loss_val, step, stopped_by, last_ckpt = None, float("nan"), start_step, "max_steps", None
    bar = _progress(progress, start_step, horizon)
    with _Stop() as stop:
        model.train()
        while step < tc.max_steps:
            ts = time.time()
            lr = lr_at(step, tc, horizon)
            for g in opt.param_groups:
                g["lr"] = lr
            loss_sum = 0.0
            for micro in range(tc.grad_accum):
                x, y = inputs_targets(next(loader).to(device, non_blocking=True), tok.pad_id)
                if dist.enabled:
                    model.require_backward_grad_sync = micro == tc.grad_accum - 1
                with autocast(device, precision):
                    _, loss = fwd(x, y)
                if not torch.isfinite(loss):
                    raise NonFiniteLoss(f"loss became {float(loss.detach())} at step {step + 1} (lr {lr:.2e}); "
                                        "lower the learning rate or use --precision fp32/bf16, then "
                                        f"resume from the last checkpoint in {out / ckpt.CKPT}")
                scaler.scale(loss / tc.grad_accum).backward()
                loss_sum += float(loss.detach()) / tc.grad_accum
            scaler.unscale_(opt)
            gnorm = float(torch.nn.utils.clip_grad_norm_(raw.parameters(), tc.grad_clip))
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            step += 1
            loss_val = loss_sum
            dt = time.time() - ts
            if budget and state is None and step == start_step + 10:
                t10 = time.time()
            if budget and state is None and step == start_step + 30:
                # Time-bounded run: end the cosine schedule where the budget will end. Steps 10-30
                # are timed because the first ones pay for warm-up (allocations, kernel choice).
                per_step = (time.time() - t10) / 20
                remaining = budget - (time.time() - t0)
                horizon = max(tc.warmup_steps + 1, min(tc.max_steps, step + int(remaining / (per_step * 1.08))))
                if bar is not None:
                    bar.total = horizon
            stop_now = stop.requested or (budget is not None and time.time() - t0 >= budget)
            if dist.enabled:
                flag = torch.tensor([float(stop_now)], device=device)
                torch.distributed.all_reduce(flag)
                stop_now = bool(flag.item() > 0)
            if dist.is_main:
                rec = {"step": step, "loss": loss_val, "lr": lr, "grad_norm": gnorm,
                       "tokens_per_s": tokens_per_step / dt}
                if step % tc.log_every == 0 or step == 1:
                    _log_scalars(writer, rec, step, device)
                log.write(json.dumps(rec) + "\n")
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss_val:.3f}", tok_s=f"{tokens_per_step / dt:,.0f}",
                                    **({"valid": f"{valid_loss:.3f}"} if valid_loss is not None else {}))
            final = step >= tc.max_steps or stop_now
            if dist.is_main and has_valid and (step % tc.eval_every == 0 or final):
                valid_loss = window_loss(raw, valid_windows, tok.pad_id, device, precision)
                best = valid_loss if best is None else min(best, valid_loss)
                writer.add_scalar("valid/loss", valid_loss, step)
                log.write(json.dumps({"step": step, "valid_loss": valid_loss}) + "\n")
                if tc.sample_tokens:
                    _log_sample(writer, raw, tok, step, tc.sample_tokens, device)
            if dist.is_main and (step % tc.save_every == 0 or final):
                meta = {"config": cfg.to_dict(), "tokenizer": store.manifest["tokenizer"], "lr_horizon": horizon,
                        "valid_loss": valid_loss if (step % tc.eval_every == 0 or final) else None,
                        "best_valid_loss": best, "train_loss": loss_val, **run_meta}
                st = {"optimizer": opt.state_dict(), "scaler": scaler.state_dict(), "horizon": horizon,
                      "rng_cpu": _gather_rng(dist), "rng_cuda": _gather_cuda_rng(dist, device)}
                last_ckpt = ckpt.save_checkpoint(out, step, raw, meta, st, tc.keep_last)
            elif dist.enabled and (step % tc.save_every == 0 or final):
                _gather_rng(dist)
                _gather_cuda_rng(dist, device)
            if stop_now:
                stopped_by = "signal" if stop.requested else "max_minutes"
                break
    if bar is not None:
        bar.close()
    if dist.is_main:
        writer.close()
        log.close()
        msg = f"step {step}: train loss {loss_val:.3f}"
        if valid_loss is not None:
            msg += f", valid NLL {valid_loss:.3f} nats/token (unigram baseline {unigram:.3f})"
        print(msg + (f"; checkpoint {last_ckpt}" if last_ckpt else ""), file=sys.stderr)
    return TrainResult(out, step, loss_val, valid_loss, best, unigram, last_ckpt, stopped_by)


def _fused_kw(device) -> dict:
    # fused AdamW exists for CUDA and (since torch 2.4) CPU; one kernel instead of a loop of ops
    return {"fused": True} if device.type in ("cuda", "cpu") else {}


def _gather_rng(dist) -> list[torch.Tensor]:
    """Every rank's CPU RNG state (dropout masks differ per rank), collected on rank 0."""
    mine = torch.get_rng_state()
    if not dist.enabled:
        return [mine]
    out = [None] * dist.world_size
    torch.distributed.all_gather_object(out, mine)
    return out


def _gather_cuda_rng(dist, device) -> list[torch.Tensor]:
    if device.type != "cuda":
        return []
    mine = torch.cuda.get_rng_state(device)
    if not dist.enabled:
        return [mine]
    out = [None] * dist.world_size
    torch.distributed.all_gather_object(out, mine)
    return out


def _environment() -> dict:
    try:
        from cadenza.doctor import doctor_summary

        return doctor_summary()
    except ImportError:  # pragma: no cover
        return environment_summary()


def _progress(enabled: bool, start: int, total: int):
    if not enabled:
        return None
    from tqdm import tqdm

    # In a log file (no terminal) one line every 30 s, not one per step.
    return tqdm(total=total, initial=start, unit="step", desc="train", file=sys.stderr, dynamic_ncols=True,
                mininterval=0.1 if sys.stderr.isatty() else 30)


def _log_scalars(writer, rec: dict, step: int, device) -> None:
    writer.add_scalar("train/loss", rec["loss"], step)
    writer.add_scalar("train/lr", rec["lr"], step)
    writer.add_scalar("train/grad_norm", rec["grad_norm"], step)
    writer.add_scalar("train/tokens_per_s", rec["tokens_per_s"], step)
    writer.add_scalar("train/peak_memory_mb", peak_memory_mb(device), step)


def _log_sample(writer, model, tok, step: int, n_tokens: int, device) -> None:
    """A short unconditional sample, logged as audio and as a piano roll."""
    from cadenza.sample import generate_ids

    g = torch.Generator(device=device).manual_seed(step)
    prompt = torch.full((1, 1), tok.bos_id, dtype=torch.long, device=device)
    ids = generate_ids(model, prompt, n_tokens, tok, temperature=1.0, top_p=0.95, generator=g)[0]
    model.train()
    try:
        from cadenza.midi import score_to_notes
        from cadenza.render import piano_roll, synthesize

        score, _ = tok.decode(ids)
        notes, _ = score_to_notes(score)
        if len(notes) == 0:
            return
        audio, _ = synthesize(notes, sample_rate=16000, backend="numpy")
        writer.add_audio("sample/audio", torch.from_numpy(audio)[None], step, sample_rate=16000)
        writer.add_image("sample/piano_roll", piano_roll(notes, title=f"step {step}"), step, dataformats="HWC")
    except Exception as e:  # a logging sample must never stop training
        print(f"(could not log a sample at step {step}: {type(e).__name__}: {e})", file=sys.stderr)
