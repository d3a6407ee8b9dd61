"""Device-wide settings decided in env/device.py: TF32 on CUDA only, DataLoader workers per device."""

from __future__ import annotations

import pytest
import torch

from cadenza.env.device import enable_tf32, loader_workers


@pytest.fixture
def exact_matmuls():
    yield
    torch.set_float32_matmul_precision("highest")  # the process default, for the tests after this one


def test_tf32_is_for_cuda_matmuls_and_cpu_matmuls_stay_exact(exact_matmuls):
    a, b = torch.randn(64, 64, generator=torch.Generator().manual_seed(0)), torch.randn(64, 64)
    before = a @ b
    enable_tf32(torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == "highest"
    enable_tf32(torch.device("cuda", 0))  # only sets the flag: no GPU is touched
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.equal(a @ b, before)


def test_loader_workers_auto_on_cuda_only(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert loader_workers(-1, torch.device("cpu")) == 0
    assert loader_workers(-1, torch.device("cuda", 0)) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # 8 ranks share the 16 cores
    assert loader_workers(-1, torch.device("cuda", 0)) == 1
    assert loader_workers(3, torch.device("cpu")) == 3 and loader_workers(0, torch.device("cuda", 0)) == 0
