"""What keeps a long-running studio server's memory level, each measured over a 1,000-job run
(docs/benchmarks.md, "The studio server"): malloc bounded before worker threads start, the objects
loaded at start frozen, and after each job its garbage collected and the freed heap handed back."""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys

M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # glibc's mallopt() parameters (malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The process's glibc; None elsewhere (macOS, Windows, musl: other allocators, other knobs)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        return None
    return libc


def settle_malloc(arenas: int = 2, mmap_threshold: int = 1 << 20) -> None:
    """At most `arenas` malloc arenas (each new thread would get one, holding its freed blocks), and
    blocks of `mmap_threshold` bytes or more mapped on their own, so they go back to the system when
    freed (glibc raises that threshold after each large free, up to 32 MB, and then keeps a job's
    buffers in its heap). A setting in the environment (MALLOC_ARENA_MAX, ...) wins. Call it before
    worker threads start."""
    if (libc := _glibc()) is None:
        return
    for env, param, value in (("MALLOC_ARENA_MAX", M_ARENA_MAX, arenas),
                              ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, mmap_threshold)):
        if env not in os.environ:
            libc.mallopt(param, value)


def freeze_startup_objects() -> None:
    """Keep what start-up loaded (modules, torch, the app) out of every later collection: the
    collection after each job then walks only what jobs made."""
    gc.collect()
    gc.freeze()


def collect_after_job() -> None:
    """Free a job's reference cycles now (a finished HTTP connection leaves one), not at Python's next
    full collection hundreds of jobs later, and hand the heap pages freed back to the system (glibc
    keeps them otherwise, in its arenas and its threads' caches)."""
    gc.collect()
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)
