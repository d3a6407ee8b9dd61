"""What a run needs to record to be reproduced: library versions, git commit, command, hashes."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

_DEFAULT_LIBS = ("cadenza", "torch", "numpy", "symusic", "safetensors", "music21", "miditok")


def library_versions(names=_DEFAULT_LIBS) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


@cache
def git_commit(path: str | None = None) -> str | None:
    """The commit of the cadenza checkout (or of `path`), with "-dirty" when it has local changes;
    outside a checkout, the commit an image was built from ($CADENZA_GIT_COMMIT, set by the
    Dockerfile from the build's GIT_COMMIT)."""
    where = Path(path) if path else Path(__file__).resolve().parent
    built = os.environ.get("CADENZA_GIT_COMMIT") if path is None else None
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return built or None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=5)
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return built or None


def command_line() -> str:
    """The command that started this process, shell-quoted; `python -m cadenza` reads as `cadenza`."""
    import shlex

    if not sys.argv:
        return ""
    prog = Path(sys.argv[0]).name
    if prog == "__main__.py" and Path(sys.argv[0]).parent.name in ("cadenza", "cli"):
        prog = "cadenza"
    return shlex.join([prog, *sys.argv[1:]])


# Instruction-set extensions that change which kernels PyTorch runs (and so speed and, for bf16,
# whether a path works at all); recorded with every benchmark.
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
             "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve")


@cache
def cpu_info() -> dict:
    """The CPU model and its instruction-set flags (Linux /proc/cpuinfo; platform elsewhere)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "machine": platform.machine(), "cores": os.cpu_count(),
            "isa": [f for f in ISA_FLAGS if f in flags]}


def cache_dir() -> Path:
    """Where cadenza caches converted corpora: $CADENZA_CACHE, else $XDG_CACHE_HOME/cadenza."""
    if os.environ.get("CADENZA_CACHE"):
        return Path(os.environ["CADENZA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cadenza"
