"""What a training run holds between steps, and how it starts: fresh, resumed from its newest
checkpoint, or initialised from another model (fine-tuning, with new style tokens).

With `ema` the run also holds a moving average of its weights (`training.ema`): a checkpoint's
model is the average, its state the weights being trained, and a resumed run restores both.

The tokenizer a model is trained with is the store's, plus the style tokens of its styles: a
fresh run takes the store's styles; a run initialised from a model keeps that model's styles, in
its order, and appends the store's new ones (their embeddings start fresh, the old ids keep their
meaning); a resumed run takes exactly the tokenizer its checkpoint saved.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from cadenza.data.anticipation import TaskMix, training_windows
from cadenza.data.dataset import StepSampler, fixed_windows
from cadenza.data.statistics import pitch_ranges
from cadenza.data.store import TokenStore
from cadenza.data.tokenizers import Tokenizer
from cadenza.env.device import DistInfo, loader_workers, resolve_precision
from cadenza.models import build_model, zoo
from cadenza.models import checkpoint as ckpt
from cadenza.models.config import ModelConfig
from cadenza.training.augment import RangeTransposed
from cadenza.training.config import RunConfig
from cadenza.training.ema import WeightAverage
from cadenza.training.runlog import RunLog, say


@dataclass
class Session:
    """Everything one run holds between steps."""

    cfg: RunConfig
    out: Path
    dist: DistInfo
    precision: str
    store: TokenStore
    tok: Tokenizer  # the store's tokenizer, with the run's style tokens
    raw: torch.nn.Module  # the plain model: saved, evaluated, sampled
    fwd: Any  # what the step calls: raw, or its DDP / compiled wrapper
    opt: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    loader: Any
    step: int
    horizon: int
    best: float | None = None
    valid_windows: torch.Tensor | None = None
    unigram: float | None = None
    since_best: int = 0
    log: RunLog | None = None
    run_meta: dict | None = None
    ema: WeightAverage | None = None

    @property
    def device(self) -> torch.device:
        return self.dist.device

    @property
    def model(self) -> torch.nn.Module:
        """The model a run validates and saves: the moving average of the weights, or the weights."""
        return self.ema.model if self.ema is not None else self.raw


def setup(cfg: RunConfig, data: Path, out: Path, resume: bool, dist: DistInfo) -> Session:
    """Store, tokenizer, model, optimizer and loader; on resume, every state restored from the
    newest checkpoint that verifies; with `init`, the weights of another model."""
    tc, device = cfg.train, dist.device
    store = TokenStore(data)
    if not resume and ckpt.list_checkpoints(out):
        raise FileExistsError(f"{out} already has checkpoints: add --resume to continue it, or choose a new --out")
    point = ckpt.resume_point(out) if resume else None
    meta = ckpt.read_meta(point) if point else None
    tok = _tokenizer(store, cfg, meta)
    cfg.model.vocab_size = tok.vocab_size
    if tc.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=False)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(tc.seed + dist.rank)
    model = build_model(cfg.model)
    state = None
    if point is not None:
        if meta["config"]["model"] != asdict(cfg.model):
            raise ValueError(f"{point}: model config differs from the resumed run's; keep the model settings")
        if meta.get("data_fingerprint") not in (None, store.fingerprint):  # an exact resume reads the same windows
            raise ValueError(f"{data} is not the store {out} was trained on (its manifest differs): resume with "
                             f"that store, or fine-tune on this one in a new run (--init {out} --out NEW)")
        ckpt.load_weights(model, point)
        state = ckpt.load_state(point)
    elif tc.init:
        grown = ckpt.load_grown(model, init_checkpoint(tc.init))
        if grown and dist.is_main:
            say(f"new style tokens for {', '.join(tok.styles[len(_init_styles(tc.init)):])}: "
                f"{', '.join(grown)} grown")
    model.grad_checkpoint = tc.grad_checkpoint
    model.to(device)
    if state is not None and "train_weights" in state:  # the checkpoint's model is the average
        model.load_state_dict(state["train_weights"])
    precision = resolve_precision(tc.precision, device)
    s = Session(cfg, out, dist, precision, store, tok, model, model, _optimizer(model, tc, device),
                torch.amp.GradScaler(device.type, enabled=precision == "fp16"), None,
                meta["step"] if meta else 0, horizon=state["horizon"] if state else (tc.lr_horizon or tc.max_steps),
                best=meta.get("best_valid_loss") if meta else None)
    if state is not None:
        _restore(s, state)
    _wrap(s)
    if tc.ema:  # after DDP's wrapper has given every rank rank 0's weights
        s.ema = WeightAverage(s.raw, tc.ema)
        if state is not None and "train_weights" in state:
            ckpt.load_weights(s.ema.model, point)
    s.loader = _loader(s)
    if store.split("valid"):
        valid = training_windows(store, "valid", cfg.model.context, tok, _tasks(tc), seed=1234)
        s.valid_windows = fixed_windows(valid, tc.eval_windows)
        s.unigram = store.unigram_nll("valid")
    return s


def init_checkpoint(name_or_path: str) -> Path:
    """A run folder, a checkpoint folder, or the name of a shipped model (`cadenza models`)."""
    return ckpt.resolve(zoo.resolve_model(name_or_path))


def _init_styles(init: str) -> tuple[str, ...]:
    return tuple(ckpt.read_meta(init_checkpoint(init))["tokenizer"].get("styles", ()))


def _tokenizer(store: TokenStore, cfg: RunConfig, meta: dict | None) -> Tokenizer:
    if meta is not None:  # resumed: exactly the tokenizer the run started with
        return ckpt.tokenizer_of(meta)
    if not cfg.train.init:
        return store.tokenizer.with_styles(store.styles)
    init_meta = ckpt.read_meta(init_checkpoint(cfg.train.init))
    base = ckpt.tokenizer_of(init_meta)
    if not base.same_as(store.manifest["tokenizer"], ids_only=True):
        raise ValueError(f"{store.path} was tokenized differently from {cfg.train.init}'s training data; "
                         "prepare it with the same tokenizer")
    known = tuple(base.styles)
    init_model = ModelConfig(**init_meta["config"]["model"])
    cfg.model = ModelConfig(**{**asdict(init_model), "vocab_size": cfg.model.vocab_size})  # its architecture
    # the store's window settings (a new anticipation, say), the model's style ids and then the new ones
    return store.tokenizer.with_styles(known + tuple(s for s in store.styles if s not in known))


def _wrap(s: Session) -> None:
    if s.dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        s.fwd = DDP(s.raw, device_ids=[s.device.index] if s.device.type == "cuda" else None)
    if s.cfg.train.compile:
        s.fwd = torch.compile(s.fwd)


def _optimizer(model: torch.nn.Module, tc, device) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not biases, norms or relative-position tables)."""
    def decays(name: str, p) -> bool:
        return p.dim() >= 2 and "rel" not in name.split(".")[-1]

    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if decays(n, p)], "weight_decay": tc.weight_decay},
              {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}]
    # fused AdamW exists for CUDA and (since torch 2.4) CPU: one kernel instead of a loop of ops
    fused = {"fused": True} if device.type in ("cuda", "cpu") else {}
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(tc.beta1, tc.beta2), **fused)


def _restore(s: Session, state: dict) -> None:
    s.opt.load_state_dict(state["optimizer"])
    # A run saved without fp16 saved an empty scaler state: resumed in fp16 (a T4 picks it), the
    # scaler starts fresh. Resumed without fp16, the scaler is off and ignores a saved state.
    if state["scaler"]:
        s.scaler.load_state_dict(state["scaler"])
    rank = s.dist.rank
    torch.set_rng_state(state["rng_cpu"][rank % len(state["rng_cpu"])])
    if s.device.type == "cuda" and state.get("rng_cuda"):
        torch.cuda.set_rng_state(state["rng_cuda"][rank % len(state["rng_cuda"])], s.device)


def _tasks(tc) -> TaskMix:
    return TaskMix(tc.task_autoregress, tc.task_infill, tc.task_accompany)


def _loader(s: Session):
    tc, dist = s.cfg.train, s.dist
    in_data = tc.transpose_range == "data"
    on_notes = in_data and s.tok.anticipates  # notes, not voices: each style's pitch range bounds a shift
    extra = {"pitch_ranges": pitch_ranges(s.store)} if on_notes and tc.transpose else {}
    if tc.transpose_styles:
        extra["transpose_styles"] = [x.strip() for x in tc.transpose_styles.split(",") if x.strip()]
    ds = training_windows(s.store, "train", s.cfg.model.context, s.tok, _tasks(tc), seed=tc.seed,
                          transpose=0 if in_data and not on_notes else tc.transpose, stretch=tc.stretch,
                          style_dropout=tc.style_dropout, balance_styles=tc.balance_styles, **extra)
    if in_data and not on_notes and tc.transpose:
        ds = RangeTransposed(ds, s.store, s.tok, tc.transpose, tc.seed)
    sampler = StepSampler(tc.batch_size, s.step, dist.rank, dist.world_size, tc.grad_accum)
    workers = loader_workers(tc.num_workers, dist.device)  # each window depends on its index only
    # The loader gets its own generator: creating an iterator draws a seed, and drawing it from the
    # global RNG would shift the dropout masks of a resumed run.
    return iter(DataLoader(ds, batch_size=tc.batch_size, sampler=sampler, num_workers=workers,
                           pin_memory=dist.device.type == "cuda", persistent_workers=workers > 0,
                           generator=torch.Generator().manual_seed(tc.seed)))
