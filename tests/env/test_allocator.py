"""settle_allocator: the studio's memory settings apply before torch loads and never override a user's."""

import os
import subprocess
import sys

import pytest

from cadenza.env.allocator import glibc

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
