"""Typed configuration of a training run: the model and the training settings, presets, overrides.

A preset (``src/cadenza/training/presets/<name>.toml``) has a ``[model]`` and a ``[train]`` table; a
user's ``--config FILE`` (TOML or JSON) has the same shape, and ``key=value`` overrides on the
command line (``model.d_model=384``, ``train.lr=3e-4`` or unambiguous bare keys like ``lr=3e-4``)
come last. The resolved config is saved as JSON in the run folder and in every checkpoint.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from cadenza.env import PRECISIONS
from cadenza.models.config import ModelConfig
from cadenza.settings import from_dict, setting, validate


@dataclass
class TrainConfig:
    batch_size: int = setting(16, ge=1, doc="sequences per optimizer step per process (before accumulation)")
    grad_accum: int = setting(1, ge=1)
    lr: float = setting(1e-3, gt=0)
    min_lr: float = setting(1e-4, ge=0)
    warmup_steps: int = setting(100, ge=0)
    max_steps: int = setting(5000, ge=1)
    max_minutes: float = setting(0.0, ge=0, doc="wall-clock budget; 0 = none. The cosine schedule then ends with it")
    lr_horizon: int = setting(0, ge=0, doc="steps the cosine schedule spans; 0 = max_steps")
    weight_decay: float = setting(0.1, ge=0)
    beta1: float = setting(0.9, ge=0, lt=1)
    beta2: float = setting(0.99, ge=0, lt=1)
    grad_clip: float = setting(1.0, gt=0)
    precision: str = setting("auto", choices=PRECISIONS)
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps (checked by env.device.pick_device)
    compile: bool = False
    grad_checkpoint: bool = False
    deterministic: bool = False
    seed: int = setting(0, ge=0)
    transpose: int = setting(0, ge=0, le=24, doc="+- semitones of pitch augmentation")
    stretch: float = setting(0.0, ge=0, lt=1, doc="+- fraction of time-stretch augmentation")
    num_workers: int = setting(0, ge=0)
    eval_every: int = setting(200, ge=1)
    eval_windows: int = setting(64, ge=1)
    log_every: int = setting(10, ge=1)
    save_every: int = setting(500, ge=1)
    keep_last: int = setting(2, ge=1)
    sample_tokens: int = setting(256, ge=0, doc="sample logged to TensorBoard at each validation; 0 = none")
    patience: int = setting(0, ge=0, doc="stop after this many validations without a new best; 0 = never")
    init: str | None = setting(None, doc="start from this model: a run, a checkpoint or a shipped model's name")
    style_dropout: float = setting(0.1, ge=0, le=1, doc="share of windows whose style token is NO_STYLE")
    balance_styles: bool = setting(True, doc="each style equally often, whatever its size")

    def validate(self) -> "TrainConfig":
        return validate(self)


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        return cls(model=from_dict(ModelConfig, d.get("model", {}), "model"),
                   train=from_dict(TrainConfig, d.get("train", {}), "training"))

    def validate(self) -> "RunConfig":
        self.model.validate()
        self.train.validate()
        return self


def setting_names() -> set[str]:
    """Every model and training setting's name (a flag named like one overrides it)."""
    return {f.name for f in fields(ModelConfig)} | {f.name for f in fields(TrainConfig)}


def presets() -> list[str]:
    folder = resources.files("cadenza.training.presets")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_preset(name: str) -> dict[str, Any]:
    f = resources.files("cadenza.training.presets") / f"{name}.toml"
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


def resolve(preset: str | None = "tiny", config_file: str | None = None, overrides: list[str] = (), *,
            run_dir: str | Path | None = None, **direct: Any) -> RunConfig:
    """preset (or the saved config of `run_dir`, to resume it) < config file < direct keyword
    settings (from named CLI flags) < key=value overrides."""
    if run_dir is not None:
        saved = Path(run_dir) / "config.json"
        if not saved.exists():
            raise FileNotFoundError(f"{saved}: not found; --resume needs a run folder made by `cadenza train`")
        d: dict[str, Any] = json.loads(saved.read_text())
    else:
        d = load_preset(preset) if preset else {}
    if config_file:
        d = merge(d, load_file(config_file))
    d = apply_overrides(d, [f"{k}={json.dumps(v)}" for k, v in direct.items() if v is not None])
    d = apply_overrides(d, list(overrides))
    return RunConfig.from_dict(d).validate()
