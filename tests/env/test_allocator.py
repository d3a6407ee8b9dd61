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


def _probe(pre: str = "", **env: str) -> dict:
    import json

    clean = {k: v for k, v in os.environ.items()
             if k not in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MKL_DISABLE_FAST_MM")}
    out = subprocess.run([sys.executable, "-c", PROBE.format(pre=pre)], env={**clean, **env},
                         capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


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
