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
from cadenza.settings import SettingError, from_dict, setting, validate


@dataclass
class TrainConfig:
    batch_size: int = setting(16, ge=1, doc="sequences per optimizer step per process (before accumulation)")
    grad_accum: int = setting(1, ge=1, doc="micro-batches summed into one optimizer step (a larger batch in the "
                                            "same memory)")
    lr: float = setting(1e-3, gt=0, doc="peak learning rate (AdamW), reached after the warm-up")
    min_lr: float = setting(1e-4, ge=0, doc="learning rate at the end of the cosine schedule")
    warmup_steps: int = setting(100, ge=0, doc="steps of linear learning-rate warm-up")
    max_steps: int = setting(5000, ge=1, doc="optimizer steps to train for")
    max_minutes: float = setting(0.0, ge=0, doc="stop (and save) after this much wall time; 0 = none. The cosine "
                                                "schedule then ends with it")
    lr_horizon: int = setting(0, ge=0, doc="steps the cosine schedule spans; 0 = max_steps")
    weight_decay: float = setting(0.1, ge=0, doc="AdamW weight decay")
    beta1: float = setting(0.9, ge=0, lt=1, doc="AdamW's first-moment decay")
    beta2: float = setting(0.99, ge=0, lt=1, doc="AdamW's second-moment decay")
    grad_clip: float = setting(1.0, gt=0, doc="clip the gradient's norm to this")
    precision: str = setting("auto", choices=PRECISIONS,
                             doc="auto: bf16 where the device does it natively, fp16 on older GPUs, else fp32")
    device: str = setting("auto", doc="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")  # pick_device checks it
    compile: bool = setting(False, doc="torch.compile the model")
    grad_checkpoint: bool = setting(False, doc="recompute activations per block (less memory, more time)")
    deterministic: bool = setting(False, doc="PyTorch deterministic algorithms (slower; see docs/reproducibility.md)")
    seed: int = setting(0, ge=0, doc="seeds the weights, the order of the windows and the augmentation")
    transpose: int = setting(0, ge=0, le=24, doc="+- semitones of pitch augmentation")
    transpose_range: str = setting("vocabulary", choices=("vocabulary", "data"),
                                   doc="where transposed pitches may go: anywhere the vocabulary holds, or only "
                                       "within the range each voice (frames, satb) or each style (notes, "
                                       "metrical) spans in the training split")
    transpose_styles: str = setting("", doc="the styles whose windows are transposed, such as bach,palestrina (empty: "
                                    "every style); the keys of the others stay as written")
    stretch: float = setting(0.0, ge=0, lt=1, doc="+- fraction of time-stretch augmentation")
    num_workers: int = setting(-1, ge=-1, doc="data-loading processes (0: in the training process; -1: a few per "
                                              "GPU on CUDA, none elsewhere)")
    eval_every: int = setting(200, ge=1, doc="steps between validations (and best-checkpoint checks)")
    eval_windows: int = setting(64, ge=1, doc="validation windows scored at each validation")
    log_every: int = setting(10, ge=1, doc="steps between two lines of the training log")
    save_every: int = setting(500, ge=1, doc="steps between checkpoints")
    keep_last: int = setting(2, ge=1, doc="checkpoints kept besides the best")
    sample_tokens: int = setting(256, ge=0, doc="sample logged to TensorBoard at each validation; 0 = none")
    patience: int = setting(0, ge=0, doc="stop after this many validations without a new best; 0 = never")
    ema: float = setting(0.0, ge=0, lt=1, doc="decay of an exponential moving average of the weights, which is "
                                              "validated and saved as the model; 0 = off, e.g. 0.995. Early "
                                              "steps average faster: min(ema, (1 + step) / (10 + step))")
    init: str | None = setting(None, doc="start from this model (a run, a checkpoint, or a shipped model's name "
                                         "such as styles): its architecture and weights; new styles get new "
                                         "style tokens")
    style_dropout: float = setting(0.1, ge=0, le=1, doc="share of windows whose style token is NO_STYLE")
    balance_styles: bool = setting(True, doc="each style equally often, whatever its size")
    # what anticipatory windows train (tokenizers that anticipate, such as `notes`): relative weights
    task_autoregress: float = setting(0.4, ge=0, doc="weight of windows without controls (continuing music)")
    task_infill: float = setting(0.3, ge=0, doc="weight of windows that give a time span's notes as controls")
    task_accompany: float = setting(0.3, ge=0, doc="weight of windows that give the melody as controls")

    def validate(self) -> TrainConfig:
        validate(self)
        if self.task_autoregress + self.task_infill + self.task_accompany <= 0:
            raise SettingError("task_autoregress", "and task_infill, task_accompany are all 0: give one a weight")
        return self


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        return cls(model=from_dict(ModelConfig, d.get("model", {}), "model"),
                   train=from_dict(TrainConfig, d.get("train", {}), "training"))

    def validate(self) -> RunConfig:
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


def _section(key: str, item: str) -> tuple[str, str]:
    """(section, name) of `section.name` or of an unambiguous bare setting name."""
    section, _, name = key.rpartition(".")
    if not section:
        in_model = name in {f.name for f in fields(ModelConfig)}
        in_train = name in {f.name for f in fields(TrainConfig)}
        if in_model and in_train:
            raise ValueError(f"{name!r} is ambiguous: write model.{name}= or train.{name}=")
        if not (in_model or in_train):
            raise ValueError(f"unknown setting {name!r}")
        section = "model" if in_model else "train"
    if section not in ("model", "train"):
        raise ValueError(f"unknown section {section!r} in {item!r} (use model. or train.)")
    return section, name


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`section.key=value` or unambiguous `key=value`; values parsed as JSON when they parse."""
    d = merge({"model": {}, "train": {}}, d)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        section, name = _section(key, item)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        d[section][name] = value
    return d


def resolve(preset: str | None = "tiny", config_file: str | None = None, overrides: list[str] = (), *,
            run_dir: str | Path | None = None, **direct: Any) -> RunConfig:
    """preset (or the saved config of `run_dir`, to resume it) < config file < direct keyword
    settings (from named CLI flags; None leaves a setting as it is) < key=value overrides."""
    if run_dir is not None:
        saved = Path(run_dir) / "config.json"
        if not saved.exists():
            raise FileNotFoundError(f"{saved}: not found; --resume needs a run folder made by `cadenza train`")
        d: dict[str, Any] = json.loads(saved.read_text())
    else:
        d = load_preset(preset) if preset else {}
    if config_file:
        d = merge(d, load_file(config_file))
    d = merge({"model": {}, "train": {}}, d)
    for key, value in direct.items():
        if value is not None:
            section, name = _section(key, key)
            d[section][name] = value
    d = apply_overrides(d, list(overrides))
    return RunConfig.from_dict(d).validate()
