"""Typed configuration: the model and the training run, presets from TOML files, overrides.

A preset (``src/cadenza/presets/<name>.toml``) has a ``[model]`` and a ``[train]`` table; a
user's ``--config FILE`` (TOML or JSON) has the same shape, and ``key=value`` overrides on the
command line (``model.d_model=384``, ``train.lr=3e-4`` or unambiguous bare keys like ``lr=3e-4``)
come last. The resolved config is saved as JSON in the run folder and in every checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any


@dataclass
class ModelConfig:
    model: str = "transformer"  # transformer | lstm
    vocab_size: int = 391
    context: int = 512  # tokens the model attends to (and trains on)
    # transformer
    attention: str = "relative"  # relative (Music Transformer) | rope | absolute
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1  # residual and embedding dropout
    attn_dropout: float = 0.0  # on attention weights; > 0 disables the fused kernels
    tie_weights: bool = True
    bias: bool = True
    attn_chunk: int = 128  # queries per block of the blockwise kernel (see models/attention.py)
    attn_kernel: str = "auto"  # rope/absolute: auto | sdpa | blockwise
    # lstm
    embed_dim: int = 256
    lstm_hidden: int = 512
    lstm_layers: int = 2

    def validate(self) -> "ModelConfig":
        if self.model not in ("transformer", "lstm"):
            raise ValueError(f"model must be transformer or lstm, got {self.model!r}")
        if self.attention not in ("relative", "rope", "absolute"):
            raise ValueError(f"attention must be relative, rope or absolute, got {self.attention!r}")
        if self.model == "transformer" and self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.attention == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError("rope needs an even head dimension")
        return self


@dataclass
class TrainConfig:
    batch_size: int = 16  # sequences per optimizer step per process (before accumulation)
    grad_accum: int = 1
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    max_steps: int = 5000
    max_minutes: float = 0.0  # wall-clock budget; 0 = none. The cosine schedule then ends with it.
    lr_horizon: int = 0  # steps the cosine schedule spans; 0 = max_steps (set it to stop early and resume)
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    compile: bool = False
    grad_checkpoint: bool = False
    deterministic: bool = False
    seed: int = 0
    transpose: int = 0  # +- semitones of pitch augmentation
    stretch: float = 0.0  # +- fraction of time-stretch augmentation
    num_workers: int = 0
    eval_every: int = 200
    eval_windows: int = 64
    log_every: int = 10
    save_every: int = 500
    keep_last: int = 2
    sample_tokens: int = 256  # sample logged to TensorBoard at each validation; 0 = none

    def validate(self) -> "TrainConfig":
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise ValueError(f"precision must be auto, fp32, bf16 or fp16, got {self.precision!r}")
        if self.batch_size < 1 or self.grad_accum < 1 or self.max_steps < 1:
            raise ValueError("batch_size, grad_accum and max_steps must be >= 1")
        return self


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        return cls(model=_build(ModelConfig, d.get("model", {})), train=_build(TrainConfig, d.get("train", {})))

    def validate(self) -> "RunConfig":
        self.model.validate()
        self.train.validate()
        return self


def _build(cls, d: dict[str, Any]):
    known = {f.name for f in fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {', '.join(sorted(unknown))}")
    return cls(**d)


def presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("cadenza.presets").iterdir() if p.name.endswith(".toml"))


def load_preset(name: str) -> dict[str, Any]:
    f = resources.files("cadenza.presets") / f"{name}.toml"
    if not f.is_file():
        raise ValueError(f"unknown preset {name!r}; available: {', '.join(presets())}")
    return tomllib.loads(f.read_text())


def load_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: config file not found")
    text = p.read_text()
    try:
        return json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{p}: cannot parse config ({e})") from None


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`section.key=value` or unambiguous `key=value`; values parsed as JSON when they parse."""
    d = merge({"model": {}, "train": {}}, d)
    owners = {f.name: "model" for f in fields(ModelConfig)}
    owners.update({f.name: "train" for f in fields(TrainConfig)})
    shared = {f.name for f in fields(ModelConfig)} & {f.name for f in fields(TrainConfig)}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        section, _, name = key.rpartition(".")
        if not section:
            if name in shared:
                raise ValueError(f"{name!r} is ambiguous: write model.{name}= or train.{name}=")
            if name not in owners:
                raise ValueError(f"unknown setting {name!r}")
            section = owners[name]
        if section not in ("model", "train"):
            raise ValueError(f"unknown section {section!r} in {item!r} (use model. or train.)")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        d[section][name] = value
    return d


def resolve(preset: str | None = "tiny", config_file: str | None = None, overrides: list[str] = (),
            **direct: Any) -> RunConfig:
    """preset < config file < direct keyword settings (from named CLI flags) < key=value overrides."""
    d: dict[str, Any] = load_preset(preset) if preset else {}
    if config_file:
        d = merge(d, load_file(config_file))
    d = apply_overrides(d, [f"{k}={json.dumps(v)}" for k, v in direct.items() if v is not None])
    d = apply_overrides(d, list(overrides))
    cfg = RunConfig.from_dict(d)
    # ints given as floats in TOML/JSON ("max_steps=1e3") are a common slip: coerce by field type
    for sub in (cfg.model, cfg.train):
        for f in fields(sub):
            v = getattr(sub, f.name)
            if f.type in ("int", int) and isinstance(v, float) and v.is_integer():
                setattr(sub, f.name, int(v))
    return cfg.validate()


def replace(cfg, **kw):
    return dataclasses.replace(cfg, **kw)
