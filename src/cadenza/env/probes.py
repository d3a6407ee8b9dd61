"""Every look `cadenza doctor` takes at the machine, in one `Probes` object, so each diagnosis is
tested by faking a probe; and `StageProbe`, the look a stage above env/ adds, passed in by its caller."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from cadenza.env import tools
from cadenza.env.record import cpu_info


def _line(x: object) -> str:
    """The first line of a message: diagnoses and the table stay one line each."""
    return (str(x).strip().splitlines() or [""])[0]


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=driver_version,name,memory.total --format=csv,noheader`."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            mem = parts[2].split()[0]
            gpus.append({"driver": parts[0], "name": parts[1], "memory_mib": int(mem) if mem.isdigit() else None})
    return gpus


@dataclass(frozen=True)
class StageProbe:
    """A stage's own check for `cadenza doctor` (e.g. whether generation's compiled decode step can
    be built): env/ imports no stage above it, so the caller hands doctor these."""

    key: str  # its field in the report
    probe: Callable[[], dict]  # the JSON-able record
    rows: Callable[[dict], list[tuple[str, str]]]  # the record as rows of the table


class Probes:
    """Everything doctor reads from the machine. Tests override single methods on an instance."""

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def module_version(self, dist: str) -> str | None:
        try:  # metadata only: importing e.g. miditok would cost seconds
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    def nvidia_smi(self, timeout: float = 10.0) -> dict | None:
        """None when there is no nvidia-smi; else {"ok", "error", "gpus": [{driver, name, memory_mib}]}."""
        exe = self.which("nvidia-smi")
        if not exe:
            return None
        try:
            r = subprocess.run([exe, "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as e:
            return {"ok": False, "error": _line(e), "gpus": []}
        if r.returncode != 0:
            return {"ok": False, "error": _line(r.stdout or r.stderr or f"exit code {r.returncode}"), "gpus": []}
        return {"ok": True, "error": None, "gpus": parse_nvidia_smi(r.stdout)}

    def torch_info(self) -> dict:
        try:
            import torch
        except ImportError as e:
            return {"installed": False, "error": str(e)}
        t: dict[str, Any] = {"installed": True, "version": torch.__version__, "cuda": torch.version.cuda,
                             "hip": getattr(torch.version, "hip", None), "cudnn": None, "nccl": None,
                             "cuda_available": False, "cuda_error": None, "device_count": 0, "gpus": [],
                             "arch_list": [], "mps": False, "threads": torch.get_num_threads(), "cpu_bf16": _cpu_bf16()}
        with warnings.catch_warnings(record=True) as caught:  # "driver too old" arrives as a warning
            warnings.simplefilter("always")
            t["cuda_available"] = bool(torch.cuda.is_available())
        if caught:
            t["cuda_error"] = _line(caught[0].message)
        try:
            t["mps"] = bool(torch.backends.mps.is_available())
        except AttributeError:
            pass
        if t["cuda"] or t["hip"]:
            t["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
            try:
                v = torch.cuda.nccl.version()
                t["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
            except (AttributeError, RuntimeError):
                t["nccl"] = None
        if t["cuda_available"]:
            t["device_count"] = torch.cuda.device_count()
            t["arch_list"] = list(torch.cuda.get_arch_list())  # the GPU code this build carries
            # A GPU the build has no code for warns "sm_XX is not compatible" here; doctor says so itself
            # (arch_unsupported), with the fix. A GPU in a bad state raises: report it, do not crash.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    for i in range(t["device_count"]):
                        t["gpus"].append(_gpu(torch, i, t["hip"]))
                except RuntimeError as e:
                    t["cuda_error"] = _line(e)
        return t

    def gpu_smoke(self, device: str, dtype: str) -> dict:
        """Allocate, matmul, and one autocast forward+backward of a Linear on `device`, with timings."""
        import torch

        out: dict[str, Any] = {"device": device, "dtype": dtype, "ok": False, "error": None}
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        try:
            t0 = time.perf_counter()
            x = torch.randn(1024, 1024, device=device)
            sync()
            t1 = time.perf_counter()
            (x @ x).sum().item()
            t2 = time.perf_counter()
            lin = torch.nn.Linear(256, 256).to(device)
            half = torch.bfloat16 if dtype == "bf16" else torch.float16
            with torch.autocast(device_type=device.split(":")[0], dtype=half):
                loss = lin(torch.randn(64, 256, device=device)).float().pow(2).mean()
            loss.backward()
            sync()
            t3 = time.perf_counter()
            ok = lin.weight.grad is not None and bool(torch.isfinite(lin.weight.grad).all())
            out.update(ok=ok, alloc_ms=round(1e3 * (t1 - t0), 2), matmul_ms=round(1e3 * (t2 - t1), 2),
                       autocast_step_ms=round(1e3 * (t3 - t2), 2), error=None if ok else "non-finite gradient")
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {_line(e)}"
        return out

    def shm_bytes(self) -> int | None:
        return shutil.disk_usage("/dev/shm").total if os.path.isdir("/dev/shm") else None

    def disk_free(self, path: str) -> int | None:
        p = Path(path).absolute()
        while not p.exists() and p != p.parent:  # the cache dir may not exist yet: its disk does
            p = p.parent
        try:
            return shutil.disk_usage(p).free
        except OSError:
            return None

    def container(self) -> str | None:
        env = self.env()
        if os.path.exists("/.dockerenv"):
            return "docker"
        if os.path.exists("/run/.containerenv"):
            return "podman"
        if env.get("KUBERNETES_SERVICE_HOST"):
            return "kubernetes"
        if env.get("container"):
            return env["container"]
        try:  # cgroup v1 names the runtime; v2 ("0::/") usually does not
            text = Path("/proc/1/cgroup").read_text()
        except OSError:
            return None
        return next((k for k in ("docker", "kubepods", "containerd", "libpod", "lxc") if k in text), None)

    def soundfonts(self) -> list[str]:
        found = []
        if (sf := self.env().get("CADENZA_SOUNDFONT")) and os.path.isfile(sf):
            found.append(sf)
        return found + [str(p) for p in tools.soundfonts()]

    def audio_backend(self) -> str:
        """Which synthesizer renders audio here, in the line `cadenza render` prints."""
        return tools.describe_backend()

    def cpu(self) -> dict:
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        info = cpu_info()
        return {"count": os.cpu_count(), "usable": usable, "model": info["model"], "isa": info["isa"]}


def _gpu(torch, i: int, hip: str | None) -> dict:
    p = torch.cuda.get_device_properties(i)
    native = p.major >= 8  # Ampere+: bf16 tensor cores and TF32
    return {"index": i, "name": p.name, "capability": f"{p.major}.{p.minor}", "memory_bytes": p.total_memory,
            "bf16": bool(torch.cuda.is_bf16_supported()) if hip else native, "tf32": native and not hip}


def _cpu_bf16() -> bool:
    from cadenza.env.device import cpu_supports_bf16  # lazy: it imports torch; doctor runs without torch

    return cpu_supports_bf16()
