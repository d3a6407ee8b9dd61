"""`cadenza.benchmark(...)`: train on a benchmark's official training split, select on its
validation split, score the test split once, and keep the evidence in ``RUN/bench.json``."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from cadenza.atomic import write_json
from cadenza.bench import jsb16, polyphonic
from cadenza.data.store import StoreError, TokenStore
from cadenza.env.device import pick_device
from cadenza.env.record import command_line, cpu_info, git_commit, library_versions
from cadenza.evaluation.nll import token_nll
from cadenza.models import checkpoint as ckpt
from cadenza.training.config import resolve
from cadenza.training.trainer import train

TASKS = ("polyphonic", "jsb16")


def task_module(task: str):
    if task not in TASKS:
        raise ValueError(f"unknown benchmark {task!r}; choose from {', '.join(TASKS)}")
    return polyphonic if task == "polyphonic" else jsb16


def benchmark(task: str, data: str | os.PathLike, out: str | os.PathLike | None = None, *,
              evaluate: str | os.PathLike | None = None, dataset: str | None = None, preset: str | None = None,
              config_file: str | None = None, overrides: list[str] = (), device: str | None = None,
              resume: bool = False, progress: bool = True, command: str | None = None,
              **settings: Any) -> dict[str, Any]:
    """Train and score (`out`), or only score an existing run (`evaluate`). `settings` are training
    settings (max_steps, max_minutes, seed, transpose, precision, ...) over the task's preset; with
    `resume`, over the saved config of the interrupted run in `out`, which continues exactly."""
    mod = task_module(task)
    key = (dataset or mod.dataset_key(data)) if task == "polyphonic" else "jsb16"
    if not (evaluate or out):
        raise ValueError("give a run folder to train and score (--out) or one to score only (--evaluate)")
    run_dir = Path(evaluate or out)
    store_dir = run_dir / "store"
    if resume and (evaluate or preset):
        raise ValueError("--resume continues the run in --out with its saved config; drop --evaluate / --preset")
    if not evaluate:  # every setting is checked before any data is read
        cfg = resolve(preset or f"bench-{key}", config_file, list(overrides), device=device,
                      run_dir=run_dir if resume else None, **settings)
    try:
        store = TokenStore(store_dir)
    except StoreError:
        store = mod.build_store(data, store_dir)
    train_info: dict[str, Any] = {}
    if not evaluate:
        t0 = time.time()
        res = train(cfg, store_dir, run_dir, resume=resume, progress=progress, command=command)
        train_info = {"steps": res.step, "stopped_by": res.stopped_by, "train_minutes": (time.time() - t0) / 60}
        if resume:  # the minutes before the interruption are not known here; say so beside the figure
            start = json.loads((run_dir / "run.json").read_text())["resumes"][-1]["step"]
            train_info["note"] = (f"interrupted and resumed at step {start} with --resume; its train minutes "
                                  f"count steps {start}-{res.step} only")
    result = score(run_dir, store, mod, key, device or "auto")
    result.update(train_info)
    result.update(evidence(run_dir))
    result["command"] = command or command_line()
    write_json(run_dir / ("bench.json" if not evaluate else "bench-evaluate.json"), result)
    return result


def score(run_dir: Path, store, mod, key: str, device: str = "auto") -> dict[str, Any]:
    """Best checkpoint (by validation loss) scored on valid and test, each exactly once."""
    dev = pick_device(device)
    loaded = ckpt.load(run_dir, dev, prefer="best")
    model, meta = loaded.model, loaded.meta
    tc = meta["config"]["train"]
    out = {"dataset": key, "checkpoint": meta["path"], "step": meta["step"], "seed": tc["seed"],
           "transpose": tc["transpose"], "model": describe(meta["config"]["model"], tc), "hardware": hardware(dev)}
    for split in ("valid", "test"):
        nll = token_nll(model, store, split, device=dev)
        out[split] = mod.score_split(store, nll.per_piece, split).nll
        out[f"{split}_token_nll"] = nll.nll
    return out


def evidence(run_dir: Path) -> dict[str, Any]:
    """What a reader needs to trust and re-run a result: the validation curve the checkpoint was
    selected on, the code commit, the CPU with its instruction-set flags, threads and versions."""
    curve = []
    log = run_dir / "metrics.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a crash
                continue
            if "valid_loss" in rec:
                curve.append([rec["step"], round(rec["valid_loss"], 5)])
    run = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    env = run.get("environment", {})
    return {"valid_curve": curve, "code_commit": env.get("git_commit") or git_commit(),
            "cpu": cpu_info(), "torch_threads": torch.get_num_threads(),
            "versions": library_versions(("cadenza", "torch", "numpy"))}


def describe(m: dict, t: dict | None = None) -> str:
    """The model in a few words, with what its training changed about it (a weight average,
    transposition kept within the voices' ranges)."""
    t = t or {}
    name = (f"lstm {m['lstm_layers']}x{m['lstm_hidden']}" if m["model"] == "lstm"
            else f"{m['attention']} transformer {m['n_layers']}x{m['d_model']}")
    if t.get("ema"):
        name += f", weights EMA {t['ema']}"
    if t.get("transpose") and t.get("transpose_range") == "data":
        name += ", transposed within the voices' ranges"
    return name


def hardware(dev) -> str:
    if str(dev).startswith("cuda"):
        return torch.cuda.get_device_name(0)
    # Two runs sharing a machine each get fewer threads, and the wall time depends on it.
    return (f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores, "
            f"{torch.get_num_threads()} torch threads")
