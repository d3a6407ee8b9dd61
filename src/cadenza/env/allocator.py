"""The memory of a long-running process (the studio): settings and collecting that keep it flat.

A server that runs generation jobs on worker threads for hours grows under the default settings,
though nothing leaks: glibc gives each thread its own malloc arena and raises its mmap threshold
after large frees, so freed buffers stay in the process; each thread's cache of freed blocks fills
round after round; MKL keeps a GEMM buffer per thread; Python frees reference cycles (each finished
HTTP connection is one) only at a full collection, every few hundred jobs; and its object pools and
NumPy's small-block cache reach into new pages as jobs meet new sizes. With the settings below, the
long-lived objects frozen at start, a full collection after every job and the caches filled at start,
the studio's memory holds still from its first round of jobs on (docs/benchmarks.md, "The studio
server").

The settings are the process's own and affect only memory reuse, never results. A variable the user
has already set (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MKL_DISABLE_FAST_MM, a tcache tunable) wins.
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
    """After a job: free its reference cycles.

    Each finished HTTP connection leaves a cycle (uvicorn's protocol, the asyncio transport, the
    socket and their buffers), as does every ``json.dumps(..., indent=...)``. Python frees cycles
    only at a full collection, which it starts once the objects that survived earlier collections
    grew by a quarter: in a server holding 200,000 long-lived objects, every few hundred jobs. In
    between, each job's garbage took new memory instead of reusing the last job's, and the studio's
    resident memory crept up by about 3 KB a job (docs/benchmarks.md, "The studio server").

    The heap is not trimmed (`malloc_trim`): a job's buffers of 1 MB and more are mapped memory that
    goes back to the system when freed (`settle_allocator`), and trimming the smaller freed ones only
    handed pages back for the next job to fault in again, in places that moved from round to round:
    trimmed after every job, the studio settled 0.08 MB higher over the rounds after its first;
    untrimmed, its heap stays at the most its jobs have needed at once, a few MB, and holds still."""
    gc.collect()


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The process's glibc, with mallopt typed; None elsewhere (macOS, Windows, musl: their
    allocators have other knobs, and musl's mallopt is a no-op)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - present only in glibc
        libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


# CPython's small-object allocator (pymalloc) serves requests of up to 512 bytes in 16-byte size
# classes, from 16 KB pools carved out of 1 MB arenas (Objects/obmalloc.c).
PYMALLOC_LARGEST, PYMALLOC_STEP = 512, 16


def pretouch_object_pools(kb_per_size: int = 256) -> None:
    """Make the Python small-object heap's free room resident now, as a JVM's AlwaysPreTouch does
    for its heap. pymalloc never gives back a page of an arena that holds a live object, and it
    touches a pool's pages only as blocks are handed out: a server's resident memory crept up for
    rounds, each time a job reached into a pool page never used before. Allocating `kb_per_size` KB
    of objects of every size class (8 MB in all) and freeing them fills every free pool the process
    holds, to its end; later jobs reuse those pages. Arenas the burst needed beyond that become empty
    and are mostly returned, so this costs about 1 to 2 MB of resident memory. Call it once start-up
    work is done."""
    n = kb_per_size * 1024
    held: list = [object() for _ in range(n // 16)]  # 16 bytes
    held += [float(i) for i in range(n // 32)]  # 24 bytes: the 32-byte class
    for size in range(48, PYMALLOC_LARGEST + 1, PYMALLOC_STEP):  # bytes(k) takes 33 + k bytes
        held += [bytes(size - 33) for _ in range(n // size)]
    del held


# glibc's per-thread cache of freed small blocks (tcache: 7 of each of 64 sizes, per thread), read
# from the environment only when a process starts.
TCACHE_OFF = "glibc.malloc.tcache_count=0"
RESTARTED = "CADENZA_RESTARTED_FOR_MALLOC"  # set once restarted: never a loop, even where glibc drops tunables


def restart_without_tcache() -> None:
    """Run this program again in this process (same PID, `os.execve`) with glibc's thread caches
    off, unless they already are, the C library is not glibc, or the user set a tcache tunable.
    Blocks sitting in a thread's cache count as in use, so a long-running server's memory rose by a
    few KB a round as each of its threads' caches filled; without them, malloc's in-use bytes hold
    still between rounds, at no measurable cost in speed (docs/benchmarks.md, "The studio server").
    Call it first thing in a command that serves for hours, never from a library function: it
    replaces the running program. Returns only when it does not restart."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if glibc() is None or "tcache" in tunables or os.environ.get(RESTARTED):
        return
    env = {**os.environ, RESTARTED: "1", "GLIBC_TUNABLES": f"{tunables}:{TCACHE_OFF}" if tunables else TCACHE_OFF}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError as e:  # only the memory's flatness is at stake: serve on
        print(f"cadenza: could not restart without glibc's thread caches ({e}); going on with them",
              file=sys.stderr)
