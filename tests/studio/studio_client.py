"""What the studio's tests do as a client: read a job's events, hold jobs back, serve an app on a port,
compare the notes of MIDI files."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator

from conftest import wait_until

from cadenza.data.midi import read_notes

LOCAL = "http://127.0.0.1:8000"  # what a browser on this machine names the studio (its Host is checked)


def local(app, **kwargs):
    """A test client that talks to `app` as a page or a script on this machine does."""
    from fastapi.testclient import TestClient

    return TestClient(app, base_url=LOCAL, **kwargs)


def events(client, job_id: str, stop_after: str | None = None) -> list[dict]:
    """A job's events, read from its stream until it ends (or until `stop_after`)."""
    out = []
    with client.stream("GET", f"/api/jobs/{job_id}/events") as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
                if out[-1]["event"] in (stop_after, "done", "failed", "cancelled"):
                    break
    return out


def blocking(app_state):
    """Make jobs wait for a signal, so the queue's bounds can be seen at work."""
    gate = threading.Event()

    def run(job):
        wait_until(lambda: job.check() or gate.is_set(), timeout=60)  # a cancelled job stops at `check`
        return {"variations": []}

    app_state.jobs._run = run
    return gate


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """`app` served by uvicorn on a free 127.0.0.1 port, in a thread: yields its address."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    wait_until(lambda: srv.started, timeout=30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def midi_rows(raw: bytes) -> list[tuple[float, float, int]]:
    """(start, end, pitch) per note of a MIDI file's bytes, in seconds."""
    notes, _ = read_notes(raw, programs=True)
    return [(float(a), float(b), int(p)) for a, b, p in zip(notes.start, notes.end, notes.pitch)]


def keyed(rows) -> set:
    """Notes as (start, end, pitch), to the MIDI file's tick (1/960 s at 120 bpm and 480 per quarter)."""
    return {(round(float(s) * 480), round(float(e) * 480), int(p)) for s, e, p, *_ in rows}
