"""What the compiled decode step and its attention kernel are built with: the C++ compiler, the CPU
and the cache folder.

`compiled` (the step's packages) and `kernel` (the attention kernel) both build native code for
this machine and key their caches by it; they share these probes so that neither imports the
other's internals.
"""

from __future__ import annotations

import os
import shutil
import sys
from functools import cache
from pathlib import Path

from cadenza.env.record import cache_dir as cache_root
from cadenza.env.record import cpu_info


def unavailable_reason() -> str | None:
    """None when native code can be built here, else why not (a short phrase for doctor and warnings)."""
    if os.environ.get("CADENZA_NO_COMPILE"):
        return "CADENZA_NO_COMPILE is set"
    if sys.platform == "win32":
        return "not built on Windows"
    if not compiler():
        return "no C++ compiler (install g++ or clang++)"
    return None


def compiler() -> str | None:
    """The C++ compiler Inductor will find: $CXX, else the first of g++, clang++, c++ on the PATH."""
    return _which(os.environ.get("CXX"))


@cache
def _which(cxx: str | None) -> str | None:
    # searched once per $CXX: a server asks at every generation
    return shutil.which(cxx) if cxx else next((w for c in ("g++", "clang++", "c++") if (w := shutil.which(c))), None)


def cpu_id() -> str:
    """The CPU model and its vector instruction sets: code built for one CPU is not reused on another."""
    info = cpu_info()
    return f"{info['model']}|{','.join(info['isa'])}"


def cache_dir(kind: str) -> Path:
    """``$CADENZA_CACHE/<kind>`` (default ``~/.cache/cadenza/<kind>``): where built code of one kind lives."""
    return cache_root() / kind
