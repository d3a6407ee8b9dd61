"""The one place that decides the device, the precision and the distributed setup."""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass

import torch


def pick_device(pref: str = "auto", local_rank: int = 0) -> torch.device:
    """cuda, then mps, then cpu, unless `pref` names one. Errors say what to do."""
    if pref in ("auto", None, ""):
        if torch.cuda.is_available():
            return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(pref)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was requested but CUDA is not available "
                               f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}); "
                               "run `cadenza doctor` to see why, or use --device cpu")
        if dev.index is None:
            dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise RuntimeError("--device mps was requested but MPS is not available; use --device cpu")
    return dev


def cpu_supports_bf16() -> bool:
    """Native bf16 arithmetic (AVX512-BF16 or AMX), where bf16 autocast is faster than fp32."""
    cpu = getattr(torch, "cpu", None)
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        fn = getattr(cpu, probe, None)
        if fn is not None and fn():
            return True
    return False


def cuda_supports_bf16(device=None) -> bool:
    """Native bf16 (compute capability 8.0+); emulated bf16 on older GPUs is slower than fp16."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch < 2.3 has no including_emulation and reports native support only
        return bool(torch.cuda.is_bf16_supported())


def resolve_precision(pref: str, device: torch.device) -> str:
    """auto: bf16 where the hardware does it natively (Ampere+ GPUs, AVX512-BF16 CPUs), fp16 on
    older GPUs (with a grad scaler), fp32 otherwise."""
    if pref != "auto":
        if pref == "fp16" and device.type == "cpu":
            raise ValueError("fp16 training on CPU is not supported by PyTorch autocast; use bf16 or fp32")
        if pref == "bf16" and device.type == "cuda" and not cuda_supports_bf16(device):
            raise ValueError(f"{torch.cuda.get_device_name(device)} has no bf16 support; use --precision fp16")
        return pref
    if device.type == "cuda":
        return "bf16" if cuda_supports_bf16(device) else "fp16"
    if device.type == "cpu":
        return "bf16" if cpu_supports_bf16() else "fp32"
    return "fp32"


def enable_tf32(device: torch.device) -> None:
    """TF32 for fp32 matmuls on CUDA: Ampere and later GPUs run them several times faster at a
    precision (10 mantissa bits) that training and sampling do not notice. Called by whatever runs
    a model on `device` (training, its preview sample, generation); CPU matmuls stay exact, so runs
    on a CPU reproduce bit for bit. The setting is the process's (PyTorch has no other)."""
    if torch.device(device).type == "cuda":
        torch.set_float32_matmul_precision("high")  # cuDNN convolutions and RNNs use TF32 by default


def loader_workers(requested: int, device: torch.device) -> int:
    """DataLoader worker processes: `requested` when >= 0. Auto (< 0): on CUDA a few per training
    process, so the next batches are cut while the GPU computes, with a core left for the process
    itself; none elsewhere, where workers would take cores from the model's own threads."""
    if requested >= 0:
        return requested
    if torch.device(device).type != "cuda":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    per_process = cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))  # torchrun sets it
    return max(0, min(4, per_process - 1))


def autocast(device: torch.device, precision: str):
    """The single autocast context every forward pass runs under."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


@dataclass
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup_distributed(device_pref: str = "auto") -> DistInfo:
    """DDP from torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE); one process otherwise.

    NCCL on CUDA, gloo on CPU. Each process uses the GPU of its local rank.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo(device=pick_device(device_pref))
    import torch.distributed as dist
    import torch.distributed.nn  # before init, so its defaults hold no group (see cleanup_distributed)

    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_pref, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, device_id=device if backend == "nccl" else None)
    return DistInfo(rank, local_rank, world, device)


def cleanup_distributed() -> None:
    """Destroy the process group and join its threads, so that none outlives the interpreter.

    A gloo thread alive at exit that frees a work holding a Python object aborts the process
    ("terminate called without an active exception"). The group (and its threads) goes only when
    nothing refers to it: DDP wrappers sit in reference cycles, hence the collection; and
    torch.distributed.nn binds the default group into its functions' defaults when first imported
    after init (DDP imports it), hence setup_distributed imports it first.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()  # DDP wrappers the caller dropped still hold the group until collected
        dist.destroy_process_group()


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    except ImportError:  # pragma: no cover - Windows
        return float("nan")
