"""Two ranks under torchrun (gloo, CPU) stay in step: one learning-rate schedule for a time-bounded
run, and a non-finite loss on one rank stops both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadenza.data.prepare import prepare

HERE = Path(__file__).resolve().parent
SMALL = ["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64", "batch_size=4", "warmup_steps=2",
         "eval_windows=4", "sample_tokens=0", 'precision="fp32"', 'device="cpu"', "log_every=5"]


@pytest.fixture(scope="module")
def store(midi_folder, tmp_path_factory):
    return prepare([midi_folder], tmp_path_factory.mktemp("ddp") / "store", workers=1, progress=False,
                   valid_fraction=0.2, test_fraction=0.0).store.path


def run_two_ranks(store: Path, tmp_path: Path, mode: str, *overrides: str) -> list[dict]:
    results = tmp_path / "results"
    results.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "ddp_run.py"), str(store), str(tmp_path / "run"), str(results), mode, *SMALL, *overrides]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    found = sorted(results.glob("rank-*.json"))
    assert len(found) == 2, f"exit {r.returncode}: {r.stderr[-3000:]}"
    return [json.loads(f.read_text()) for f in found]


@pytest.mark.slow
def test_a_time_bounded_run_steps_every_rank_with_the_same_learning_rate(store, tmp_path):
    ranks = run_two_ranks(store, tmp_path, "late", "max_minutes=0.1", "max_steps=100000", "eval_every=100000",
                          "save_every=100000")
    assert [r["stopped_by"] for r in ranks] == ["max_minutes", "max_minutes"]
    lrs0, lrs1 = ranks[0]["lrs"], ranks[1]["lrs"]
    assert len(lrs0) > 40 and lrs0 == lrs1  # one schedule, fitted to the budget by one rank
    assert lrs0[-1] < max(lrs0)  # the cosine decay ran with the budget


@pytest.mark.slow
def test_a_non_finite_loss_on_one_rank_stops_both(store, tmp_path):
    ranks = run_two_ranks(store, tmp_path, "nan@7", "max_steps=40", "eval_every=100000", "save_every=100000")
    for r in ranks:
        assert "at step 7 " in r.get("error", ""), r
