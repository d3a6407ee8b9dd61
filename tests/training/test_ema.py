"""`ema`: a moving average of the weights is what a run validates and saves, and resumes exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cadenza.data.anticipation import training_windows
from cadenza.data.dataset import fixed_windows
from cadenza.data.prepare import prepare
from cadenza.data.store import TokenStore
from cadenza.evaluation.nll import window_loss
from cadenza.models import build_model
from cadenza.models import checkpoint as ckpt
from cadenza.training.config import resolve
from cadenza.training.ema import WeightAverage
from cadenza.training.trainer import train

HERE = Path(__file__).resolve().parent
SMALL = ["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64", "batch_size=4", "warmup_steps=2",
         "eval_every=5", "eval_windows=4", "sample_tokens=0", 'precision="fp32"', 'device="cpu"', "ema=0.9"]


@pytest.fixture(scope="module")
def store(midi_folder, tmp_path_factory):
    return prepare([midi_folder], tmp_path_factory.mktemp("ema") / "store", workers=1, progress=False,
                   valid_fraction=0.2, test_fraction=0.0).store.path


def cfg(*extra):
    return resolve("tiny", None, SMALL + list(extra))


def weights(step_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(step_dir / "model.safetensors"))


def test_the_average_of_weights_that_never_change_is_those_weights():
    model = build_model(cfg().model)
    avg = WeightAverage(model, 0.999)
    for n in range(50):
        avg.update(model, n)
    for a, b in zip(avg.model.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)


def test_the_average_follows_new_weights_fast_at_first_then_slowly():
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    avg = WeightAverage(model, 0.99)
    with torch.no_grad():
        model.weight.fill_(1.0)
    avg.update(model, 0)  # rate 0.1: the first update is mostly the new weights
    assert avg.model.weight.item() == pytest.approx(0.9)
    assert avg.rate(10_000) == 0.99 and avg.rate(0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="ema decay"):
        WeightAverage(model, 1.0)


def test_a_checkpoint_holds_the_average_as_its_model_and_validates_it(store, tmp_path):
    train(cfg("max_steps=10", "save_every=5"), store, tmp_path / "r", progress=False)
    step_dir = ckpt.latest_checkpoint(tmp_path / "r")
    saved, trained = weights(step_dir), ckpt.load_state(step_dir)["train_weights"]
    assert any(not torch.equal(saved[k], trained[k]) for k in saved)
    # the validation loss recorded is the loss of the model the checkpoint holds
    model, meta = (c := ckpt.load(step_dir)).model, c.meta
    st = TokenStore(store)
    c = cfg()
    valid = fixed_windows(training_windows(st, "valid", c.model.context, st.tokenizer, seed=1234), c.train.eval_windows)
    assert window_loss(model, valid, st.tokenizer.pad_id, "cpu", "fp32") == pytest.approx(meta["valid_loss"], rel=1e-6)


def test_a_resumed_run_continues_the_average_exactly(store, tmp_path):
    train(cfg("max_steps=10", "save_every=5"), store, tmp_path / "full", progress=False)
    train(cfg("max_steps=5", "lr_horizon=10", "save_every=5"), store, tmp_path / "split", progress=False)
    train(cfg("max_steps=10", "lr_horizon=10", "save_every=5"), store, tmp_path / "split", resume=True,
          progress=False)
    a, b = (ckpt.latest_checkpoint(tmp_path / r) for r in ("full", "split"))
    wa, wb = weights(a), weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # the average, bit for bit on CPU
    ta, tb = ckpt.load_state(a)["train_weights"], ckpt.load_state(b)["train_weights"]
    assert all(torch.equal(ta[k], tb[k]) for k in ta)  # and the weights being trained


@pytest.mark.slow
def test_every_ddp_rank_holds_the_same_average_and_rank_0_saves_it(store, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(HERE / "ema_ddp_run.py"), str(store), str(tmp_path / "run"), str(results), *SMALL,
           "max_steps=6", "save_every=6", "log_every=3"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    found = sorted(results.glob("rank-*.pt"))
    assert len(found) == 2, f"exit {r.returncode}: {r.stderr[-3000:]}"
    ranks = [torch.load(f, weights_only=True) for f in found]
    saved = weights(ckpt.latest_checkpoint(tmp_path / "run"))
    for name, tensor in saved.items():
        assert torch.equal(ranks[0][name], ranks[1][name]) and torch.equal(ranks[0][name], tensor)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["ema"] == 0.9
