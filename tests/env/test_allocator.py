"""The studio's memory: allocator settings before torch loads (never overriding a user's), cycles freed
after each job, caches filled or made resident at start, and a server restarting itself without glibc's
thread caches."""

import os
import subprocess
import sys

import pytest

from cadenza.env.allocator import RESTARTED, glibc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")

PROBE = """
import json, sys
{pre}
from cadenza.env.allocator import settle_allocator
done = settle_allocator(arenas=3, mmap_threshold=262144)
import os
print(json.dumps({{"done": done, "mkl": os.environ.get("MKL_DISABLE_FAST_MM")}}))
"""


def _run(code: str, env: dict | None = None) -> dict:
    """The JSON a fresh Python process running `code` prints last."""
    import json

    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _probe(pre: str = "", **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MKL_DISABLE_FAST_MM")}
    return _run(PROBE.format(pre=pre), env={**clean, **env})


def test_fresh_process_gets_every_setting():
    r = _probe()
    assert r["mkl"] == "1" and r["done"]["MKL_DISABLE_FAST_MM"] == "1"
    if glibc() is not None:
        assert r["done"]["MALLOC_ARENA_MAX"] == "3"
        assert r["done"]["MALLOC_MMAP_THRESHOLD_"] == "262144"


def test_the_users_own_settings_win():
    r = _probe(MALLOC_ARENA_MAX="8", MKL_DISABLE_FAST_MM="0")
    assert "MALLOC_ARENA_MAX" not in r["done"] and "MKL_DISABLE_FAST_MM" not in r["done"]
    assert r["mkl"] == "0"


def test_mkl_is_left_alone_once_torch_is_loaded():
    # MKL reads its variable when torch loads it: setting it later would claim an effect it cannot have
    r = _probe(pre="import torch")
    assert r["mkl"] is None and "MKL_DISABLE_FAST_MM" not in r["done"]




CYCLE = """
import gc, json, weakref
from cadenza.env.allocator import freeze_long_lived, release_memory
import cadenza.studio.app  # what a server has loaded when it freezes
frozen = freeze_long_lived()
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle, as a finished HTTP connection leaves one
alive = weakref.ref(a)
del a, b
before = alive() is not None
release_memory()
print(json.dumps({"frozen": frozen, "before": before, "after": alive() is not None}))
"""


def test_a_jobs_reference_cycles_are_freed_after_it_and_startup_objects_are_frozen():
    """The studio frees each job's cycles when it ends, instead of every few hundred jobs: with the
    startup's objects frozen that full collection walks only what jobs made."""
    r = _run(CYCLE)
    assert r["frozen"] > 10_000  # modules, FastAPI, torch: out of every later collection's way
    assert r["before"] and not r["after"]


NUMPY_CACHE = """
import json, numpy as np
from cadenza.env.allocator import NUMPY_CACHED_BYTES, NUMPY_CACHE_DEPTH, fill_numpy_cache
def anon_kb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon"))
{fill}
before = anon_kb()
# a long run's small arrays: every size numpy caches, as many at once as it keeps of each
held = [np.ones(n, np.uint8) for n in range(1, NUMPY_CACHED_BYTES) for _ in range(NUMPY_CACHE_DEPTH)]
del held
print(json.dumps({{"grew_kb": anon_kb() - before}}))
"""


def test_numpy_small_array_cache_is_full_from_the_start():
    """Once filled, arrays of sizes never seen before cost no new memory; unfilled, the same arrays
    leave about 4 MB behind in numpy's cache for good."""
    filled = _run(NUMPY_CACHE.format(fill="fill_numpy_cache()"))["grew_kb"]
    unfilled = _run(NUMPY_CACHE.format(fill=""))["grew_kb"]
    assert filled < 1024 and unfilled > 2048, (filled, unfilled)


OBJECT_POOLS = """
import json
from cadenza.env.allocator import pretouch_object_pools
def anon_kb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon"))
live = [object() for _ in range(200_000)]  # what a server keeps: its arenas are full
slots = [None] * 10_000
{pretouch}
before = anon_kb()
for i in range(len(slots)):  # a round of jobs: 1 MB of new small objects, 48 to 160 bytes
    slots[i] = bytes(15 + (i % 8) * 16)
print(json.dumps({{"grew_kb": anon_kb() - before}}))
"""


@pytest.mark.skipif(sys.implementation.name != "cpython" or "PYTHONMALLOC" in os.environ,
                    reason="pymalloc's pools are CPython's")
def test_small_objects_after_the_pretouch_take_no_new_memory():
    """After `pretouch_object_pools`, a megabyte of new small objects lands on pages already resident;
    without it, each one reaches into pages never touched before."""
    pretouched = _run(OBJECT_POOLS.format(pretouch="pretouch_object_pools()"))["grew_kb"]
    cold = _run(OBJECT_POOLS.format(pretouch=""))["grew_kb"]
    assert pretouched < 200 and cold > 600, (pretouched, cold)


RESTART = """
import ctypes, json, os, sys
print(json.dumps({"pid": os.getpid()}), flush=True)  # printed again by the restarted program
from cadenza.env.allocator import restart_without_tcache
restart_without_tcache()
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype, libc.malloc.restype = Info, ctypes.c_void_p
libc.malloc.argtypes, libc.free.argtypes = [ctypes.c_size_t], [ctypes.c_void_p]
block = libc.malloc(200)
in_use = libc.mallinfo2().uordblks
libc.free(block)  # a thread cache would keep it, still counted in use
print(json.dumps({"pid": os.getpid(), "tunables": os.environ.get("GLIBC_TUNABLES"),
                  "freed": in_use - libc.mallinfo2().uordblks}))
"""


def _restart(**env: str) -> list[dict]:
    import json

    clean = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", RESTARTED)}
    out = subprocess.run([sys.executable, "-c", RESTART], env={**clean, **env}, capture_output=True, text=True,
                         check=True, timeout=120)
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.skipif(glibc() is None or not hasattr(glibc(), "mallinfo2"), reason="glibc 2.33 or later only")
def test_a_server_restarts_itself_once_without_thread_caches():
    first, again, last = _restart()
    assert first["pid"] == again["pid"] == last["pid"]  # the same process, run again
    assert last["tunables"] == "glibc.malloc.tcache_count=0" and last["freed"] > 0  # a freed block is free


@pytest.mark.skipif(glibc() is None or not hasattr(glibc(), "mallinfo2"), reason="glibc 2.33 or later only")
def test_the_users_tunables_are_kept_and_their_tcache_choice_wins():
    *_, last = _restart(GLIBC_TUNABLES="glibc.malloc.arena_max=2")
    assert last["tunables"] == "glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0"
    runs = _restart(GLIBC_TUNABLES="glibc.malloc.tcache_count=3")
    assert len(runs) == 2 and runs[-1]["tunables"] == "glibc.malloc.tcache_count=3"  # not restarted
    assert runs[-1]["freed"] == 0  # the user's cache is on: the freed block waits in it
