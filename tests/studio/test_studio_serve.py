"""`cadenza serve` as a user starts it: its own process, answering on 127.0.0.1 (`launch`, which
benchmarks/bench_serve.py and tools/studio_screenshots.py start it with too)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from cadenza.studio.server import launch


def test_serve_answers_on_loopback_and_offers_the_shipped_model(tmp_path):
    with launch(tmp_path, "--no-compile") as served:
        assert served.url.startswith("http://127.0.0.1:")
        health = httpx.get(f"{served.url}/api/health").json()
        assert health["ok"] and health["compiled_step"] == "off"  # --no-compile
        assert any(m["kind"] == "shipped" for m in httpx.get(f"{served.url}/api/models").json())
    assert served.process.poll() is not None  # stopped on leaving


def test_a_server_that_cannot_start_is_reported_with_its_log(tmp_path):
    with pytest.raises(RuntimeError, match=r"exited \(2\)") as failed, launch(tmp_path, "--jobs", "not-a-number"):
        pass
    assert "argument --jobs: invalid int value" in str(failed.value)


def test_sigterm_stops_a_busy_server_within_seconds(tmp_path):
    """A job running and its event stream open: the server still stops promptly when told to (open
    streams get 3 s; scores, which held every request thread past 40 s, are now engraved in child
    processes: test_studio_hostile.py)."""
    with launch(tmp_path, "--no-compile") as served:
        job = httpx.post(f"{served.url}/api/jobs", json={"model": "styles", "settings": {
            "seconds": 120, "num_samples": 4}}).json()

        def listen():
            try:
                with httpx.stream("GET", f"{served.url}/api/jobs/{job['id']}/events", timeout=60) as r:
                    for _ in r.iter_lines():
                        pass
            except httpx.HTTPError:
                pass

        threading.Thread(target=listen, daemon=True).start()
        time.sleep(2)
        served.process.terminate()
        served.process.wait(timeout=20)  # a TimeoutExpired fails the test


def test_a_server_leaves_nothing_in_the_system_temp_folder(tmp_path, monkeypatch):
    """Loading a compiled decode step unpacks its package (40 MB) into $TMPDIR on every start: the
    server keeps that in its data folder, which it empties at exit (and every start sweeps)."""
    import os

    from tests.conftest import allow_compiling

    allow_compiling(monkeypatch, tmp_path / "cache")
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(system_tmp)}
    with launch(tmp_path / "data", env=env) as served:
        deadline = time.monotonic() + 600  # a first build of the compiled step takes about a minute
        while httpx.get(f"{served.url}/api/health").json()["compiled_step"] == "building":
            assert time.monotonic() < deadline, "the compiled step was not ready in 10 minutes"
            time.sleep(1)
        assert httpx.get(f"{served.url}/api/health").json()["compiled_step"] == "ready"
    assert list(system_tmp.iterdir()) == []
    assert not any((tmp_path / "data" / ".tmp").glob("process-*"))
