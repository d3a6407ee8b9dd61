"""The memory of a long-running process (the studio): settings, collecting and trimming that keep it flat.

A server that runs generation jobs on worker threads for hours grows under the default settings,
though nothing leaks: glibc gives each thread its own malloc arena and raises its mmap threshold
after large frees, so freed blocks stay in the process; MKL keeps a GEMM buffer per thread; and
Python frees reference cycles (each finished HTTP connection is one) only at a full collection,
every few hundred jobs. With the settings below, the long-lived objects frozen at start and a full
collection and a trim after every job, the studio's memory grows by a few hundred KB after its first
round of jobs and then levels off (docs/benchmarks.md, "The studio server").

The settings are the process's own and affect only memory reuse, never results. A variable the user
has already set (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MKL_DISABLE_FAST_MM) wins.
"""

from __future__ import annotations

import ctypes
import functools
import gc
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


def freeze_long_lived() -> int:
    """Move every object alive now (modules, torch, the app) out of the cyclic collector's view, for
    good; returns how many. A server's startup leaves about 200,000 of them, and every full
    collection would walk them all (about 50 ms on 2 cores) to find a job's few hundred garbage
    objects; frozen, a full collection after each job (`release_memory`) takes a few ms. Call it once
    the process has imported and built what it keeps for its lifetime."""
    gc.collect()
    gc.freeze()
    gc.collect()  # resets the collector's count of long-lived objects to the unfrozen ones
    return gc.get_freeze_count()


# NumPy keeps freed blocks of under NUMPY_CACHED_BYTES bytes for reuse, up to NUMPY_CACHE_DEPTH of
# each size, and never returns them (numpy/_core/src/multiarray/alloc.c: 1024 buckets of 7).
NUMPY_CACHED_BYTES, NUMPY_CACHE_DEPTH = 1024, 7


def fill_numpy_cache() -> None:
    """Fill NumPy's cache of small freed blocks now (about 4 MB, once). Decoding a job's notes makes
    small arrays whose sizes depend on the notes, and the cache keeps blocks of each size it has not
    met before: a server's memory crept up for hours as jobs met new sizes. Full from the start, the
    cache serves every later small array from its own blocks and no longer grows."""
    import numpy as np

    held = [np.empty(n, np.uint8) for n in range(1, NUMPY_CACHED_BYTES) for _ in range(NUMPY_CACHE_DEPTH)]
    del held  # freed into the cache: NUMPY_CACHE_DEPTH blocks of every size


def release_memory() -> None:
    """After a job: free its reference cycles, then give freed heap memory back (`trim_heap`).

    Each finished HTTP connection leaves a cycle (uvicorn's protocol, the asyncio transport, the
    socket and their buffers), as does every ``json.dumps(..., indent=...)``. Python frees cycles
    only at a full collection, which it starts once the objects that survived earlier collections
    grew by a quarter: in a server holding 200,000 long-lived objects, every few hundred jobs. In
    between, each job's garbage took new memory instead of reusing the last job's, and the studio's
    resident memory crept up by about 3 KB a job (docs/benchmarks.md, "The studio server")."""
    gc.collect()
    trim_heap()


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
