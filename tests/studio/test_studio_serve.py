"""`cadenza serve` as a user starts it: its own process, answering on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cadenza.env.allocator import TCACHE_OFF, glibc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    """A `cadenza serve --no-compile` process and its address, once it answers."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "CADENZA_RESTARTED_FOR_MALLOC")}
    log = open(tmp_path / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "cadenza", "serve", "--port", str(port), "--data",
                             str(tmp_path / "data"), "--no-compile"], stderr=log, env=env)
    base, deadline = f"http://127.0.0.1:{port}", time.time() + 120
    try:
        while True:
            try:
                if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                log.seek(0)
                pytest.fail(f"cadenza serve did not start: {log.read()[-800:]}")
            time.sleep(0.1)
        yield proc, base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_serve_answers_on_loopback_and_offers_the_shipped_model(served):
    proc, base = served
    health = httpx.get(f"{base}/api/health").json()
    assert health["ok"] and health["compiled_step"] == "off"  # --no-compile
    assert any(m["kind"] == "shipped" for m in httpx.get(f"{base}/api/models").json())


@pytest.mark.skipif(glibc() is None or not sys.platform.startswith("linux"), reason="glibc only")
def test_serve_runs_without_glibc_thread_caches_in_the_process_it_was_started_as(served):
    """The command restarts itself once (same PID) so that glibc reads the tunable at start."""
    proc, _ = served
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
    assert f"GLIBC_TUNABLES={TCACHE_OFF}".encode() in environ
