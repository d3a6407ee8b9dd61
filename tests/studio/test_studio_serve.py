"""`cadenza serve` as a user starts it: its own process, answering on 127.0.0.1 (started the way
benchmarks/bench_serve.py starts it)."""

from __future__ import annotations

import os
import sys

import httpx
import pytest
from conftest import load_benchmark

from cadenza.env.allocator import RESTARTED, TCACHE_OFF, glibc


@pytest.fixture(scope="module")
def bench_serve():
    return load_benchmark("bench_serve")


@pytest.fixture
def served(bench_serve, tmp_path):
    """A `cadenza serve --no-compile` process, once it answers, started without allocator settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", RESTARTED)}
    proc = bench_serve.start_server(str(tmp_path), options=("--no-compile",), env=env)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.log.close()


def test_serve_answers_on_loopback_and_offers_the_shipped_model(served):
    health = httpx.get(f"{served.base}/api/health").json()
    assert health["ok"] and health["compiled_step"] == "off"  # --no-compile
    assert any(m["kind"] == "shipped" for m in httpx.get(f"{served.base}/api/models").json())


@pytest.mark.skipif(glibc() is None or not sys.platform.startswith("linux"), reason="glibc only")
def test_serve_runs_without_glibc_thread_caches_in_the_process_it_was_started_as(bench_serve, served):
    """The command restarts itself once (same PID) so that glibc reads the tunable at start."""
    assert bench_serve.process_environment(served.pid, ["GLIBC_TUNABLES"]) == {"GLIBC_TUNABLES": TCACHE_OFF}
