"""The studio under hostile and clumsy input (issue 45's findings, replayed against the app): a page
of another site cannot drive it, a value that would fail a job is a 422 at the door, no input gets a
500, and a tiny file that spans hours is refused before it costs anything."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from studio_client import LOCAL, events, local, serving

from cadenza.data.midi import Notes, write_midi
from cadenza.settings import SettingError
from cadenza.studio.app import Limits, create_app

MODEL = "run:notes"
FOREIGN = "http://evil.example:8000"
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def client(studio_edit_runs, tmp_path_factory):
    app = create_app(tmp_path_factory.mktemp("data"), studio_edit_runs,
                     Limits(max_running=1, max_seconds=30, max_piece_seconds=120), origins=("http://localhost:5173",))
    with local(app) as c:
        yield c


def _midi(tmp_path, starts, name="piece.mid") -> bytes:
    starts = np.asarray(starts, dtype=float)
    notes = Notes.from_arrays(starts, starts + 0.5, [60 + i % 12 for i in range(len(starts))], [80] * len(starts))
    return write_midi(notes, tmp_path / name).read_bytes()


def _upload(client, data: bytes, name="piece.mid", **headers):
    return client.post("/api/uploads", files={"file": (name, data, "audio/midi")}, headers=headers)


@pytest.mark.parametrize("host", ["evil.example:8000", "evil.example", "127.0.0.1.evil.example:8000", ""])
def test_a_foreign_host_is_refused_on_every_route(client, host):
    """DNS rebinding: a page whose name re-resolves to 127.0.0.1 sends its own name as the Host."""
    for path in ("/", "/api/models", "/api/history", "/openapi.json"):
        r = client.get(path, headers={"host": host})
        assert r.status_code == 403 and "is not this server's" in r.json()["detail"], (path, r.text)


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST", "192.168.1.5:8000"])
def test_this_machine_s_names_and_any_address_are_served(client, host):
    """An address cannot be rebound to another machine: 192.168.1.5 is this one, served on its network."""
    assert client.get("/api/models", headers={"host": host}).status_code == 200


def test_a_server_told_its_host_answers_to_that_name(studio_edit_runs, tmp_path):
    app = create_app(tmp_path / "data", studio_edit_runs, hosts=("studio.lan",))
    with local(app) as c:
        assert c.get("/api/models", headers={"host": "studio.lan:8000"}).status_code == 200
        assert c.get("/api/models", headers={"host": "evil.example"}).status_code == 403


def test_a_foreign_origin_may_read_nothing_into_a_write(client, tmp_path):
    body = {"model": MODEL, "settings": {"seconds": 1, "max_tokens": None}}
    r = client.post("/api/jobs", json=body, headers={"origin": FOREIGN})
    assert r.status_code == 403 and "--allow-origin" in r.json()["detail"]
    assert _upload(client, _midi(tmp_path, [0, 1]), origin=FOREIGN).status_code == 403  # a form: no preflight
    assert client.request("DELETE", "/api/jobs/0123456789ab", headers={"origin": "null"}).status_code == 403
    assert client.get("/api/models", headers={"origin": FOREIGN}).status_code == 200  # its page cannot read it
    for origin in (LOCAL, "http://localhost:5173", None):  # its own page, the allowed one, a script
        headers = {"origin": origin} if origin else {}
        job = client.post("/api/jobs", json={"model": MODEL, "settings": {"seconds": 1}}, headers=headers)
        assert job.status_code == 202, job.text
        assert events(client, job.json()["id"])[-1]["event"] == "done"


def test_the_duet_socket_takes_only_its_own_page(client):
    """WebSockets ignore CORS: the live socket is refused to another site's page, a foreign Host and
    bad settings, and served to the studio's own page (and a script with no Origin)."""
    from starlette.websockets import WebSocketDisconnect

    here = {"host": "127.0.0.1:8000"}  # the test client names no host of its own for a socket
    for headers, url in (({**here, "origin": FOREIGN}, "/api/duet"), ({"host": "evil.example"}, "/api/duet"),
                         (here, f"/api/duet?model={MODEL}&reply=-1"), (here, "/api/duet?model=nope")):
        with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect(url, headers=headers) as ws:
            ws.receive_json()
        assert refused.value.code in (1008, 403), (headers, url)
    for headers in ({**here, "origin": LOCAL}, here):
        with client.websocket_connect(f"/api/duet?model={MODEL}&reply=1", headers=headers) as ws:
            assert ws.receive_json() == {"type": "ready"}
            ws.send_json({"type": "on", "pitch": 60, "velocity": 90})
            ws.send_json({"type": "off", "pitch": 60})


def test_a_bad_allowed_origin_is_refused_at_start(studio_edit_runs, tmp_path):
    with pytest.raises(SettingError, match="^allow_origin must be scheme://host"):
        create_app(tmp_path / "data", studio_edit_runs, origins=("localhost:5173",))


@pytest.mark.parametrize("path,body,field", [
    ("/api/jobs", '{"model": NaN}', "model"),
    ("/api/jobs", '{"model": "run:notes", "primer_seconds": Infinity}', "primer_seconds"),
    ("/api/jobs", '{"model": "run:notes", "settings": {"seconds": NaN}}', "seconds"),
    ("/api/jobs", '{"model": "run:notes", "settings": {"num_samples": 2.5}}', "num_samples"),
    ("/api/jobs", '{"model": "run:notes", "settings": {"max_note_seconds": 1e308}}', "max_note_seconds"),
    ("/api/jobs", '{"model": "run:notes", "settings": {"temperature": -Infinity}}', "temperature"),
    ("/api/infill", '{"model": "run:notes", "upload": "0123456789ab", "start": NaN, "end": 2}', "start"),
    ("/api/accompany", '{"model": "run:notes", "notes": [{"start": 0, "end": NaN, "pitch": 60}]}', "end"),
])
def test_a_value_that_would_fail_a_job_is_a_422_naming_it(client, path, body, field):
    r = client.post(path, content=body, headers=JSON)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][-1] == field


def test_the_settings_list_says_the_server_s_own_limits(client):
    ranges = {s["name"]: s["range"] for s in client.get("/api/settings").json()}
    assert ranges["num_samples"] == "in [1, 4]" and ranges["seconds"] == "in (0, 30]"
    assert ranges["max_tokens"] == "in [1, 8000]" and ranges["top_p"] == "in (0, 1]"


def test_a_tiny_file_that_spans_hours_is_refused_at_upload(client, tmp_path):
    """Two notes, the second two hours in: 46 bytes of MIDI that would make hours of audio."""
    r = _upload(client, _midi(tmp_path, [0.0, 7199.0]))
    assert r.status_code == 422 and "at most 120 s" in r.json()["detail"][0]["msg"]


def test_an_accompaniment_is_bounded_like_new_music(client, tmp_path):
    """The voices of an accompaniment last as long as its melody: an upload's melody over the
    server's seconds was accompanied past every token limit."""
    long = _upload(client, _midi(tmp_path, np.arange(0, 100, 2.0)))  # within the upload limit, not the job's
    assert long.status_code == 201
    r = client.post("/api/accompany", json={"model": MODEL, "upload": long.json()["id"]})
    assert r.status_code == 422 and "at most 2000 notes over 30 s" in r.json()["detail"][0]["msg"]
    short = _upload(client, _midi(tmp_path, np.arange(0, 8, 0.5), "short.mid"))
    job = client.post("/api/accompany", json={"model": MODEL, "upload": short.json()["id"]})
    assert job.status_code == 202 and events(client, job.json()["id"])[-1]["event"] == "done"


def test_the_schema_documents_the_guard_s_403(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert all("403" in op["responses"] for ops in paths.values() for op in ops.values())


def test_scores_engraved_at_once_leave_the_server_answering(studio_edit_runs, tmp_path):
    """Four score requests on long music held every request thread, for minutes: engraving now runs
    in a child process, one at a time, each killed at its deadline."""
    import concurrent.futures
    import time

    import httpx

    app = create_app(tmp_path / "data", studio_edit_runs, Limits(score_seconds=3, max_score_notes=3000))
    with serving(app) as url:
        job = httpx.post(f"{url}/api/jobs", json={"model": MODEL, "settings": {"seconds": 1}}).json()
        with httpx.stream("GET", f"{url}/api/jobs/{job['id']}/events", timeout=60) as stream:
            assert any(line.startswith("event: done") for line in stream.iter_lines())
        rng = np.random.default_rng(0)  # the variation becomes 2,000 dense notes: long to engrave
        start = np.sort(rng.uniform(0, 120, 2000))
        notes = Notes.from_arrays(start, start + rng.uniform(0.05, 2, 2000), rng.integers(30, 100, 2000), [80] * 2000)
        write_midi(notes, tmp_path / "data" / "jobs" / job["id"] / "sample-0.mid")
        score = f"{url}/api/jobs/{job['id']}/0/score"
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            scores = [pool.submit(httpx.get, score, timeout=60) for _ in range(4)]
            time.sleep(0.5)
            slowest = 0.0
            while not all(s.done() for s in scores):
                t = time.monotonic()
                assert httpx.get(f"{url}/api/models", timeout=10).status_code == 200
                slowest = max(slowest, time.monotonic() - t)
                time.sleep(0.2)
        assert slowest < 2.0
        answers = [s.result() for s in scores]
        assert all(r.status_code in (200, 422) for r in answers)
        assert any("not engraved within 3 s" in r.text for r in answers), [r.text[:200] for r in answers]
        assert not list((tmp_path / "data" / ".tmp").iterdir())  # a killed engraving's files are swept


def test_music_too_long_to_engrave_is_a_422_at_once(studio_edit_runs, tmp_path):
    app = create_app(tmp_path / "data", studio_edit_runs, Limits(max_score_notes=1))
    with local(app) as c:
        job = c.post("/api/jobs", json={"model": MODEL, "settings": {"seconds": 2, "seed": 1}}).json()
        assert events(c, job["id"])[-1]["event"] == "done"
        write_midi(Notes.from_arrays([0, 1], [1, 2], [60, 64], [80, 80]),
                   tmp_path / "data" / "jobs" / job["id"] / "sample-0.mid")
        r = c.get(f"/api/jobs/{job['id']}/0/score")
        assert r.status_code == 422 and "2 notes, and this server engraves at most 1" in r.json()["detail"][0]["msg"]


def test_an_oversized_body_is_refused_before_it_is_stored(studio_edit_runs, tmp_path):
    """The 2 MiB cap was checked once a 300 MB upload sat in a temporary file."""
    import httpx

    app = create_app(tmp_path / "data", studio_edit_runs, Limits(max_upload_bytes=50_000, max_body_bytes=10_000))
    with local(app) as c:
        big = c.post("/api/uploads", files={"file": ("big.mid", b"\0" * 200_000, "audio/midi")})
        assert big.status_code == 413 and "KiB" in big.json()["detail"]
        melody = [{"start": i * 0.01, "end": i * 0.01 + 0.005, "pitch": 60} for i in range(400)]  # ~20 KB
        assert c.post("/api/accompany", json={"model": MODEL, "notes": melody}).status_code == 413
    with serving(app) as url:  # streamed, with no Content-Length: stopped once past the cap
        sent = []

        def chunks():
            for _ in range(100):
                sent.append(1)
                yield b"x" * 10_000

        try:
            r = httpx.post(f"{url}/api/jobs", content=chunks(), headers=JSON, timeout=30)
            assert r.status_code == 413
        except httpx.HTTPError:  # the server may close the connection before the client has sent all
            pass
        assert httpx.get(f"{url}/api/health").json()["ok"]


def test_uploads_are_kept_within_a_quota_oldest_out_first(studio_edit_runs, tmp_path):
    app = create_app(tmp_path / "data", studio_edit_runs, Limits(max_uploads=3))
    with local(app) as c:
        ids = [_upload(c, _midi(tmp_path, [0, k + 1])).json()["id"] for k in range(5)]
        kept = sorted(p.stem for p in (tmp_path / "data" / "uploads").glob("*.mid"))
        assert kept == sorted(ids[2:])
        assert c.post("/api/jobs", json={"model": MODEL, "primer": ids[0]}).status_code == 404  # evicted
        newest = c.post("/api/jobs", json={"model": MODEL, "primer": ids[4], "settings": {"seconds": 1}})
        assert newest.status_code == 202 and events(c, newest.json()["id"])[-1]["event"] == "done"


def test_a_restart_sweeps_what_a_killed_server_left(studio_edit_runs, tmp_path):
    data = tmp_path / "data"
    for left in (data / "jobs" / ".0123456789ab.x1.tmp", data / ".tmp" / "engrave-x1" / "cadenza-score-y"):
        left.mkdir(parents=True)
        (left / "part.mid").write_bytes(b"MThd")
    (data / "uploads").mkdir()
    (data / "uploads" / ".0123456789ab.mid.x2.tmp").write_bytes(b"MThd")
    (data / "jobs" / "0123456789ab").mkdir()  # a finished job's folder stays
    create_app(data, studio_edit_runs)
    assert sorted(p.name for p in data.rglob("*")) == ["0123456789ab", "jobs", "uploads"]


def test_an_edit_whose_tokens_pass_the_limit_is_refused_at_the_door(studio_edit_runs, tmp_path):
    """An infill or an accompaniment runs to where its new notes stop, whatever the settings say:
    it wrote 9,796 tokens and went on, past the server's 8,000."""
    app = create_app(tmp_path / "data", studio_edit_runs, Limits(max_tokens=200))
    melody = [{"start": i * 0.5, "end": i * 0.5 + 0.4, "pitch": 60 + i % 8} for i in range(16)]
    with local(app) as c:
        r = c.post("/api/accompany", json={"model": MODEL, "notes": melody, "settings": {"max_tokens": 100}})
        assert r.status_code == 422 and "this server writes at most 200" in r.json()["detail"][0]["msg"], r.text
        up = _upload(c, _midi(tmp_path, np.arange(0, 16, 0.5))).json()
        r = c.post("/api/infill", json={"model": MODEL, "upload": up["id"], "start": 2, "end": 14,
                                        "settings": {"max_tokens": 100}})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "end"


def test_a_melody_note_of_a_nanosecond_is_accompanied_not_failed(client):
    """It was written to a MIDI file and read back: 0 ticks long, gone, and the job failed with
    "no melody". The notes now reach the model as they were posted, a note at least a step long."""
    melody = [{"start": 0, "end": 1e-9, "pitch": 60}, {"start": 0.5, "end": 1.0, "pitch": 62}]
    job = client.post("/api/accompany", json={"model": MODEL, "notes": melody})
    assert job.status_code == 202 and events(client, job.json()["id"])[-1]["event"] == "done"


def test_a_cancelled_job_is_still_known_after_many_newer_ones(studio_edit_runs, tmp_path):
    """It has no folder, and was a 404 once 16 newer jobs had finished."""
    from studio_client import blocking

    app = create_app(tmp_path / "data", studio_edit_runs, Limits(keep_finished=2))
    with local(app) as c:
        gate = blocking(app.state)
        cancelled = c.post("/api/jobs", json={"model": MODEL}).json()
        c.delete(f"/api/jobs/{cancelled['id']}")
        gate.set()
        for _ in range(4):
            job = c.post("/api/jobs", json={"model": MODEL}).json()
            assert events(c, job["id"])[-1]["event"] == "done"
        again = c.get(f"/api/jobs/{cancelled['id']}")
        assert again.status_code == 200 and again.json()["status"] == "cancelled"
        assert events(c, cancelled["id"])[-1]["event"] == "cancelled"


def test_a_cancel_while_rendering_stops_the_job(studio_edit_runs, tmp_path, monkeypatch):
    """DELETE was ignored once a job had begun rendering its audio."""
    import threading

    from cadenza.studio import runner

    rendering, release = threading.Event(), threading.Event()
    real = runner.synthesize

    def slow(*args, **kwargs):
        rendering.set()
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "synthesize", slow)
    app = create_app(tmp_path / "data", studio_edit_runs)
    with local(app) as c:
        job = c.post("/api/jobs", json={"model": MODEL, "settings": {"seconds": 1, "num_samples": 2}}).json()
        assert rendering.wait(60)
        c.delete(f"/api/jobs/{job['id']}")
        release.set()
        assert events(c, job["id"])[-1]["event"] == "cancelled"
        assert not (tmp_path / "data" / "jobs" / job["id"]).exists()


def test_the_history_reads_each_job_s_summary_not_its_notes(studio_edit_runs, tmp_path):
    """A job.json holds every note of every variation (one was 18.9 MB): the history re-read all of
    them on each call."""
    app = create_app(tmp_path / "data", studio_edit_runs)
    with local(app) as c:
        jobs = [c.post("/api/jobs", json={"model": MODEL, "settings": {"seconds": 1, "seed": k}}).json()
                for k in range(3)]
        for job in jobs:
            assert events(c, job["id"])[-1]["event"] == "done"
        record = tmp_path / "data" / "jobs" / jobs[0]["id"] / "job.json"
        record.write_text(record.read_text()[:-1] + " " * 5_000_000 + "}")  # megabytes of notes, say
        record.write_text("{" + record.read_text())  # and, to be sure the history does not read it, unreadable
        listed = c.get("/api/history").json()
        assert [j["id"] for j in listed] == [j["id"] for j in reversed(jobs)]
        assert "note_list" not in json.dumps(listed)
        assert c.get(f"/api/jobs/{jobs[0]['id']}").json()["status"] == "done"


def test_an_engraving_stops_with_its_request(tmp_path):
    """A server that stops cancels its requests: the engraving child of one must not live on."""
    import asyncio
    import shutil
    import subprocess

    from cadenza.studio.media import engrave

    if shutil.which("pgrep") is None:
        pytest.skip("pgrep is not installed")
    rng = np.random.default_rng(0)
    start = np.sort(rng.uniform(0, 120, 2000))
    midi = write_midi(Notes.from_arrays(start, start + 0.5, rng.integers(30, 100, 2000), [80] * 2000),
                      tmp_path / "long.mid")

    def children() -> list[str]:
        return subprocess.run(["pgrep", "-f", f"cadenza.studio.media {midi}"], capture_output=True,
                              text=True).stdout.split()

    async def cancelled() -> list[str]:
        task = asyncio.create_task(engrave(midi, asyncio.Semaphore(1), 60, tmp_path / ".tmp"))
        for _ in range(100):  # until the child runs (a 10 s deadline)
            await asyncio.sleep(0.1)
            if children():
                break
        running = children()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return running, children()  # while the event loop still runs, which would end it on closing

    running, after = asyncio.run(cancelled())
    assert running and not after
