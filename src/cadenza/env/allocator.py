"""The C heap of a long-running process (the studio): settings and trimming that keep its memory flat.

A server that runs generation jobs on worker threads for hours grows in steps under the default
settings, though nothing leaks: glibc gives each thread its own malloc arena and raises its mmap
threshold after large frees, so freed blocks stay in the process, and MKL keeps a GEMM buffer per
thread. With the settings below the studio reaches a steady size after a few rounds of jobs and
stays there (docs/benchmarks.md, "The studio server").

The settings are the process's own and affect only memory reuse, never results. A variable the user
has already set (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MKL_DISABLE_FAST_MM) wins.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

# glibc's mallopt() parameters (malloc.h)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


def settle_allocator(arenas: int = 2, mmap_threshold: int = 1 << 20) -> dict[str, str]:
    """Bound malloc arenas, fix the mmap threshold and turn off MKL's buffer cache; returns what was
    set. Call it before torch is imported (MKL reads its variable once) and before worker threads
    start (each thread picks its arena on first use). Anything not applicable is skipped quietly:
    another C library, torch already imported, a setting the user chose."""
    done: dict[str, str] = {}
    if "torch" not in sys.modules and "MKL_DISABLE_FAST_MM" not in os.environ:
        os.environ["MKL_DISABLE_FAST_MM"] = "1"
        done["MKL_DISABLE_FAST_MM"] = "1"
    libc = glibc()
    if libc is None:
        return done
    for env, param, value in (("MALLOC_ARENA_MAX", M_ARENA_MAX, arenas),
                              ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, mmap_threshold)):
        if env not in os.environ and libc.mallopt(param, value) == 1:  # mallopt returns 1 on success
            done[env] = str(value)
    return done


def trim_heap() -> None:
    """Give freed heap memory back to the system. glibc keeps a freed multi-megabyte buffer (a job's
    audio, its KV cache) in the process for reuse, so a server's resident memory would creep up with
    every job of a new size though nothing is alive; trimming after a job keeps it at what is."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The process's glibc, with mallopt and malloc_trim typed; None elsewhere (macOS, Windows,
    musl: their allocators have other knobs, and musl's mallopt is a no-op)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - present only in glibc
        libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc
