"""Stopping a training run from outside: Ctrl-C and SIGTERM save and exit 130 / 143; SIGKILL loses
nothing that was logged, and the run resumes from its newest checkpoint that verifies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cadenza.data.prepare import prepare
from cadenza.models import checkpoint as ckpt

ARGS = ["--quiet", "--precision", "fp32", "--device", "cpu", "context=128", "d_model=64", "n_layers=2", "n_heads=2",
        "d_ff=128", "batch_size=8", "warmup_steps=2", "eval_every=1000", "sample_tokens=0", "log_every=1"]


@pytest.fixture(scope="module")
def store(midi_folder, tmp_path_factory):
    return prepare([midi_folder], tmp_path_factory.mktemp("sig") / "store", workers=1, progress=False,
                   valid_fraction=0.2, test_fraction=0.0).store.path


def start(store: Path, run: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "cadenza", "train", "--data", str(store), "--out", str(run),
                             *ARGS, *extra], stderr=subprocess.PIPE, text=True, env=env)


def logged_steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if '"loss"' in line]


def wait_for_step(proc: subprocess.Popen, run: Path, step: int, timeout: float = 120.0) -> None:
    t0 = time.time()
    while max(logged_steps(run), default=0) < step:
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() - t0 < timeout, "training did not start"
        time.sleep(0.05)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_saves_then_exits_with_the_signal_code(store, tmp_path, sig, code):
    run = tmp_path / "run"
    proc = start(store, run, "--max-steps", "100000", "save_every=100000")
    wait_for_step(proc, run, 3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    step = ckpt.latest_checkpoint(run)
    assert step is not None and ckpt.verify(step) is None
    saved = ckpt.read_meta(step)["step"]
    assert f"after saving step {saved}" in err and "--resume" in err


def test_sigkill_keeps_every_logged_step_and_resume_skips_a_damaged_checkpoint(store, tmp_path):
    run = tmp_path / "run"
    proc = start(store, run, "--max-steps", "100000", "save_every=2", "keep_last=3")
    wait_for_step(proc, run, 7)
    proc.kill()
    proc.communicate(timeout=60)
    steps = logged_steps(run)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 7  # every step, no cut line
    ckpts = ckpt.list_checkpoints(run)
    newest = ckpts[-1][1]
    model = newest / "model.safetensors"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])  # the disk lost half of it
    target = ckpts[-1][0] + 4
    proc = start(store, run, "--resume", f"max_steps={target}")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert f"{newest} is not a valid checkpoint" in err and f"resuming from {ckpts[-2][1]}" in err
    again = logged_steps(run)
    assert again == list(range(1, target + 1))  # continued from the older step, logged once each
    assert ckpt.read_meta(ckpt.latest_checkpoint(run))["step"] == target
