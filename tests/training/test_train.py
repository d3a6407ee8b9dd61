"""The training engine: resume equivalence, DDP equivalence, checkpoints that never unpickle."""

from __future__ import annotations

import gc
import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cadenza.data.prepare import prepare
from cadenza.models import build_model, count_parameters
from cadenza.models import checkpoint as ckpt
from cadenza.training.config import presets, resolve
from cadenza.training.trainer import NonFiniteLoss, train

SMALL = ["context=64", "d_model=32", "n_layers=2", "n_heads=2", "d_ff=64", "batch_size=4", "warmup_steps=2",
         "eval_every=4", "eval_windows=4", "sample_tokens=0", "precision=\"fp32\"", "device=\"cpu\"",
         "transpose=2", "stretch=0.05"]


@pytest.fixture(scope="module")
def store(midi_folder, tmp_path_factory):
    return prepare([midi_folder], tmp_path_factory.mktemp("train") / "store", workers=1, progress=False,
                   valid_fraction=0.2, test_fraction=0.0).store.path


def cfg(*extra, preset="tiny"):
    return resolve(preset, None, SMALL + list(extra))


def losses(run: Path) -> dict[int, float]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:
            out[rec["step"]] = rec["loss"]
    return out


def test_resumed_run_reproduces_the_uninterrupted_losses(store, tmp_path):
    full = train(cfg("max_steps=10", "save_every=5"), store, tmp_path / "full", progress=False)
    assert full.step == 10
    # the same run, stopped after step 5 (lr_horizon keeps the schedule of a 10-step run) ...
    train(cfg("max_steps=5", "lr_horizon=10", "save_every=5"), store, tmp_path / "split", progress=False)
    # ... and resumed to step 10
    c = cfg("max_steps=10", "lr_horizon=10", "save_every=5")
    train(c, store, tmp_path / "split", resume=True, progress=False)
    a, b = losses(tmp_path / "full"), losses(tmp_path / "split")
    assert sorted(b) == list(range(1, 11))
    assert [a[s] for s in range(1, 11)] == [b[s] for s in range(1, 11)]  # bit for bit on CPU


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_lstm_with_dropout_resumes_bit_for_bit(store, tmp_path, precision):
    # Dropout between the LSTM's layers draws from the RNG the checkpoint restores: nothing else
    # (under bf16, the check of what autocast makes of the cell) may draw from it on resume.
    c = ("model=lstm", "embed_dim=32", "lstm_hidden=32", "lstm_layers=2", "dropout=0.25", f"precision={precision}",
         "save_every=3", "transpose=0")
    train(cfg(*c, "max_steps=6"), store, tmp_path / "full", progress=False)
    train(cfg(*c, "max_steps=3", "lr_horizon=6"), store, tmp_path / "split", progress=False)
    train(cfg(*c, "max_steps=6", "lr_horizon=6"), store, tmp_path / "split", resume=True, progress=False)
    a, b = losses(tmp_path / "full"), losses(tmp_path / "split")
    assert [a[s] for s in range(1, 7)] == [b[s] for s in range(1, 7)]


def _fp16(monkeypatch) -> None:
    """What `auto` picks on a GPU without bf16 (a T4, a V100); PyTorch's CPU autocast and grad scaler
    run fp16 too, so the switch is testable here."""
    from cadenza.training import session

    monkeypatch.setattr(session, "resolve_precision", lambda pref, device: "fp16")


def test_a_run_saved_in_fp32_resumes_in_fp16_with_a_fresh_grad_scaler(store, tmp_path, monkeypatch):
    train(cfg("max_steps=3", "save_every=3"), store, tmp_path / "r", progress=False)
    _fp16(monkeypatch)
    res = train(cfg("max_steps=6", "save_every=3"), store, tmp_path / "r", resume=True, progress=False)
    assert res.step == 6 and sorted(losses(tmp_path / "r")) == list(range(1, 7))
    assert ckpt.load_state(ckpt.latest_checkpoint(tmp_path / "r"))["scaler"]["scale"] > 0  # fp16 saved its scaler


def test_a_run_saved_in_fp16_resumes_in_fp32(store, tmp_path, monkeypatch):
    _fp16(monkeypatch)
    train(cfg("max_steps=3", "save_every=3"), store, tmp_path / "r", progress=False)
    assert ckpt.load_state(ckpt.latest_checkpoint(tmp_path / "r"))["scaler"]
    monkeypatch.undo()
    res = train(cfg("max_steps=6", "save_every=3"), store, tmp_path / "r", resume=True, progress=False)
    assert res.step == 6 and all(map(math.isfinite, losses(tmp_path / "r").values()))


def test_checkpoint_is_self_describing_and_reloads_without_flags(store, tmp_path):
    res = train(cfg("max_steps=4", "save_every=4", "attention=\"rope\""), store, tmp_path / "r", progress=False)
    model, meta = (c := ckpt.load(tmp_path / "r")).model, c.meta
    assert meta["step"] == 4 and meta["config"]["model"]["attention"] == "rope"
    assert meta["tokenizer"]["name"] == "performance" and meta["data_fingerprint"]
    assert meta["versions"]["torch"] if "versions" in meta else meta["environment"]
    keys = open(Path(meta["path"]) / "model.safetensors", "rb").read(20000)
    assert b"module." not in keys and b"_orig_mod" not in keys
    x = torch.randint(0, 300, (1, 20))
    again = ckpt.load(res.checkpoint).model
    assert torch.equal(model(x)[0], again(x)[0])
    assert (tmp_path / "r" / "config.json").exists() and (tmp_path / "r" / "run.json").exists()
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["command"] and run["environment"]


def test_existing_run_needs_resume_and_resume_needs_a_checkpoint(store, tmp_path):
    train(cfg("max_steps=2", "save_every=2"), store, tmp_path / "r", progress=False)
    with pytest.raises(FileExistsError, match="--resume"):
        train(cfg("max_steps=2"), store, tmp_path / "r", progress=False)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(cfg("max_steps=2"), store, tmp_path / "empty", resume=True, progress=False)


def test_a_run_resumes_only_on_the_store_it_was_trained_on(store, midi_folder, tmp_path):
    train(cfg("max_steps=2", "save_every=2"), store, tmp_path / "r", progress=False)
    other = prepare([midi_folder], tmp_path / "other", workers=1, progress=False, valid_fraction=0.5,
                    test_fraction=0.0).store.path  # the same files, split otherwise: other windows
    with pytest.raises(ValueError, match=r"is not the store .* was trained on .*--init"):
        train(cfg("max_steps=4"), other, tmp_path / "r", resume=True, progress=False)
    assert train(cfg("max_steps=4"), store, tmp_path / "r", resume=True, progress=False).step == 4


def test_keep_last_and_best_are_kept(store, tmp_path):
    train(cfg("max_steps=12", "save_every=2", "eval_every=2", "keep_last=2"), store, tmp_path / "r", progress=False)
    steps = [s for s, _ in ckpt.list_checkpoints(tmp_path / "r")]
    best = ckpt.best_checkpoint(tmp_path / "r")
    assert steps[-2:] == [10, 12] and len(steps) <= 3 and best in [d for _, d in ckpt.list_checkpoints(tmp_path / "r")]


def test_malicious_pickle_in_a_checkpoint_is_refused(store, tmp_path):
    train(cfg("max_steps=2", "save_every=2"), store, tmp_path / "r", progress=False)
    step_dir = ckpt.latest_checkpoint(tmp_path / "r")
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(step_dir / "state.pt", "wb") as f:
        pickle.dump({"optimizer": Evil()}, f)
    with pytest.raises(ckpt.CheckpointError, match="refused to load"):
        ckpt.load_state(step_dir)
    with pytest.raises(ckpt.CheckpointError):
        train(cfg("max_steps=4"), store, tmp_path / "r", resume=True, progress=False)
    assert not marker.exists()


def test_non_finite_loss_stops_with_a_message_naming_the_step(store, tmp_path):
    with pytest.raises(NonFiniteLoss, match=r"at step \d+"):
        train(cfg("max_steps=50", "lr=1e6", "min_lr=1e6", "grad_clip=1e9"), store, tmp_path / "r", progress=False)


def test_tokens_per_s_counts_training_steps_not_validation(store, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from cadenza.training import trainer

    clock = SimpleNamespace(now=0.0)  # the trainer's clock: each step takes 1 s, each validation 100 s
    monkeypatch.setattr(trainer, "time", SimpleNamespace(time=lambda: clock.now))
    step, evaluate = trainer._train_step, trainer._evaluate

    def timed(fn, seconds):
        def run(s):
            clock.now += seconds
            return fn(s)
        return run

    monkeypatch.setattr(trainer, "_train_step", timed(step, 1.0))
    monkeypatch.setattr(trainer, "_evaluate", timed(evaluate, 100.0))
    train(cfg("max_steps=6", "log_every=2", "eval_every=2"), store, tmp_path / "r", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    speed = {r["step"]: r["tokens_per_s"] for r in rows if "tokens_per_s" in r}
    assert speed == {n: 4 * 64 for n in range(1, 7)}  # batch 4 x context 64 a second, validations left out


def test_tensorboard_gets_scalars_images_and_audio(store, tmp_path):
    train(cfg("max_steps=4", "eval_every=4", "sample_tokens=48"), store, tmp_path / "r", progress=False)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "r" / "tb"), size_guidance={"images": 0, "audio": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "valid/loss"} <= set(tags["scalars"])
    assert "sample/piano_roll" in tags["images"] and "sample/audio" in tags["audio"]


def _threads() -> int | None:
    task = Path("/proc/self/task")  # every native thread, gloo's included (Linux)
    return len(os.listdir(task)) if task.is_dir() else None


def _ddp_worker(rank: int, world: int, port: int, store: str, out: str) -> None:
    from cadenza.data.dataset import StepSampler, WindowDataset
    from cadenza.data.store import TokenStore
    from cadenza.env.device import cleanup_distributed, setup_distributed
    from cadenza.models.loss import inputs_targets

    torch.set_num_threads(1)  # no intra-op pool, so the thread count below is the process's own
    gc.disable()  # cleanup must free the dropped DDP wrapper itself, not wait for a lucky collection
    before = _threads()
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    setup_distributed("cpu")
    c = cfg("dropout=0.0")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(build_model(c.model))
    ds = WindowDataset(TokenStore(store), "train", c.model.context, seed=3)
    it = iter(StepSampler(2, rank=rank, world_size=world))
    batch = torch.stack([ds[next(it)] for _ in range(2)])
    x, y = inputs_targets(batch, 388)
    _, loss = model(x, y)
    loss.backward()
    if rank == 0:
        torch.save([p.grad for p in model.module.parameters()], out)
    torch.distributed.barrier()  # as the trainer does: a barrier's work outlives its wait on gloo's threads
    del model
    cleanup_distributed()
    # A gloo thread left running at exit aborted the process now and then; none may outlive cleanup.
    after = _threads()
    assert after == before, f"rank {rank}: {after} threads after cleanup, {before} before"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_gloo_ddp_gives_the_single_process_gradients(store, tmp_path):
    from cadenza.data.dataset import StepSampler, WindowDataset
    from cadenza.data.store import TokenStore
    from cadenza.models.loss import inputs_targets

    out = tmp_path / "ddp.pt"
    torch.multiprocessing.spawn(_ddp_worker, args=(2, _free_port(), str(store), str(out)), nprocs=2, join=True)
    c = cfg("dropout=0.0")
    torch.manual_seed(0)
    model = build_model(c.model)
    ds = WindowDataset(TokenStore(store), "train", c.model.context, seed=3)
    it = iter(StepSampler(4))
    batch = torch.stack([ds[next(it)] for _ in range(4)])  # the global batch of both ranks
    x, y = inputs_targets(batch, 388)
    assert not (y == -100).any()  # equal token counts per rank, so the means compose exactly
    _, loss = model(x, y)
    loss.backward()
    ddp = torch.load(out, weights_only=True)
    for a, b in zip(ddp, [p.grad for p in model.parameters()]):
        assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_torchrun_two_processes_on_cpu(store, tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "cadenza", "train", "--data", str(store), "--out", str(tmp_path / "r"), "--device", "cpu",
           "--max-steps", "4", "--quiet", *SMALL, "save_every=4"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    meta = ckpt.read_meta(ckpt.latest_checkpoint(tmp_path / "r"))
    assert meta["step"] == 4 and meta["world_size"] == 2


@pytest.mark.parametrize("name", presets())
def test_every_shipped_preset_resolves_and_builds(name):
    # A recipe named in the docs (e.g. the GPU benchmark ones, not run on this CPU machine) must at
    # least load, validate and build; the meta device skips allocating the weights.
    c = resolve(name)
    with torch.device("meta"):
        model = build_model(c.model)
    assert count_parameters(model) > 0
    assert c.train.max_steps > 0 and c.train.batch_size > 0
