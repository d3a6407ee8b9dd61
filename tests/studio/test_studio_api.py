"""The studio's JSON API: every endpoint, and every bad input a client can send."""

from __future__ import annotations

import json
import threading
import time

import pytest
import symusic
from conftest import make_score, wait_until
from studio_client import blocking, events, local

from cadenza.studio.app import Limits, create_app

MODEL = "run:tiny"


@pytest.fixture
def client(studio_runs, tmp_path):
    app = create_app(tmp_path / "data", studio_runs, Limits(max_queued=4, max_running=1, max_upload_bytes=50_000))
    with local(app) as c:
        c.app_state = app.state
        yield c


def start(client, **settings) -> dict:
    r = client.post("/api/jobs", json={"model": MODEL, "settings": {"seconds": 3, "seed": 1, **settings}})
    assert r.status_code == 202, r.text
    return r.json()


def status(client, job: dict) -> str:
    return client.get(f"/api/jobs/{job['id']}").json()["status"]


def test_models_and_settings_name_ids_never_paths(client):
    models = client.get("/api/models").json()
    tiny = next(m for m in models if m["id"] == MODEL)
    assert tiny["styles"] == ["chorale", "jig"] and "path" not in json.dumps(models)
    settings = {s["name"]: s for s in client.get("/api/settings").json()}
    assert settings["top_p"]["range"] == "in (0, 1]" and "primer" not in settings
    assert client.get("/api/health").json() == {"ok": True, "running": 0, "compiled_step": "off"}  # no warm-up here
    assert client.get("/").status_code == 200 and "cadenza studio" in client.get("/").text
    assert "/api/jobs" in client.get("/openapi.json").json()["paths"]


def test_a_job_streams_notes_then_its_files(client):
    job = start(client, style="jig", guidance=1.5, num_samples=2, stop_at_eos=False)
    evs = events(client, job["id"])
    kinds = [e["event"] for e in evs]
    assert kinds[0] == "queued" and "started" in kinds and kinds[-1] == "done"
    assert any(e["event"] == "notes" and e["notes"] for e in evs)  # notes arrive while sampling
    result = client.get(f"/api/jobs/{job['id']}").json()["result"]
    assert [v["index"] for v in result["variations"]] == [0, 1]
    # the last notes event of each variation holds all its notes, however fast the generation was
    last = {e["variation"]: e["notes"] for e in evs if e["event"] == "notes"}
    assert [len(last[v["index"]]) for v in result["variations"]] == [v["notes"] for v in result["variations"]]
    midi = client.get(f"/api/jobs/{job['id']}/1/midi")
    assert midi.status_code == 200
    assert symusic.Score.from_midi(midi.content).note_num() == result["variations"][1]["notes"]
    assert client.get(f"/api/jobs/{job['id']}/0/wav").content[:4] == b"RIFF"
    assert client.get(f"/api/jobs/{job['id']}/0/png").content[:4] == b"\x89PNG"
    notes = client.get(f"/api/jobs/{job['id']}/0/notes").json()
    assert len(notes) == result["variations"][0]["notes"] and all(len(n) == 4 for n in notes)
    score = client.get(f"/api/jobs/{job['id']}/0/score")
    assert score.status_code in (200, 422) and (score.status_code == 422 or "<svg" in score.text)
    assert client.get("/api/history").json()[0]["id"] == job["id"]


@pytest.mark.parametrize("settings,field,words", [
    ({"top_p": 1.5}, "top_p", "top_p must be in (0, 1], got 1.5"),
    ({"temperature": 0}, "temperature", "temperature must be in (0, 100], got 0"),
    ({"seconds": -1}, "seconds", "seconds must be in (0, 3600], got -1"),
    ({"num_samples": 9}, "num_samples", "num_samples must be in [1, 4] on this server, got 9"),
    ({"seconds": 500}, "seconds", "seconds must be in (0, 120] on this server, got 500"),
    ({"style": "reel"}, "style", "style must be one of chorale, jig, got 'reel'"),
    ({"guidance": 2}, "guidance", "guidance needs a style to guide towards"),
    ({"primer": "/etc/passwd"}, "primer", "primer is not a sampling setting"),
    ({"bpm": 120}, "bpm", "bpm is not a sampling setting"),
])
def test_bad_settings_are_a_422_naming_the_field(client, settings, field, words):
    r = client.post("/api/jobs", json={"model": MODEL, "settings": settings})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"][-1] == field and words in detail["msg"]


def test_unknown_ids_are_404s(client):
    assert client.post("/api/jobs", json={"model": "../../etc", "settings": {}}).status_code == 404
    assert client.get("/api/jobs/nope").status_code == 404
    assert client.delete("/api/jobs/nope").status_code == 404
    assert client.get("/api/jobs/..%2F..%2Fetc/0/midi").status_code == 404
    assert client.post("/api/jobs", json={"model": MODEL, "primer": "deadbeef0000"}).status_code == 404
    r = client.post("/api/jobs", json={"model": MODEL, "primer": {"job": "../../x", "variation": 0}})
    assert r.status_code == 404


def test_uploads_are_read_like_prepare_reads_and_bounded(client, tmp_path):
    good = bytes(make_score([[(0, 480, 60, 90), (480, 480, 64, 90), (960, 960, 67, 90)]]).dumps_midi())
    r = client.post("/api/uploads", files={"file": ("opening.mid", good, "audio/midi")})
    assert r.status_code == 201 and r.json()["name"] == "opening.mid" and len(r.json()["notes"]) == 3
    bad = client.post("/api/uploads", files={"file": ("notes.mid", b"hello, not MIDI", "audio/midi")})
    assert bad.status_code == 400 and "notes.mid: not a MIDI file" in bad.json()["detail"]
    big = client.post("/api/uploads", files={"file": ("huge.mid", good + b"\0" * 60_000, "audio/midi")})
    assert big.status_code == 413 and "larger than" in big.json()["detail"]
    job = client.post("/api/jobs", json={"model": MODEL, "primer": r.json()["id"], "primer_seconds": 1.0,
                                         "settings": {"seconds": 2, "stop_at_eos": False}}).json()
    assert events(client, job["id"])[-1]["event"] == "done"
    again = client.post("/api/jobs", json={"model": MODEL, "primer": {"job": job["id"], "variation": 0},
                                           "settings": {"seconds": 2}}).json()  # "continue this"
    assert events(client, again["id"])[-1]["event"] == "done"
    assert client.get("/api/history").json()[0]["primer"]["name"] == f"job {job['id']}"


def test_a_full_queue_is_a_429_and_a_cancelled_job_frees_its_place(client):
    gate = blocking(client.app_state)
    running = start(client)
    wait_until(lambda: status(client, running) == "running")
    waiting = [start(client) for _ in range(4)]
    full = client.post("/api/jobs", json={"model": MODEL, "settings": {"seconds": 3}})
    assert full.status_code == 429 and full.headers["retry-after"] == "5"
    assert client.delete(f"/api/jobs/{waiting[0]['id']}").json()["status"] == "cancelled"
    assert client.post("/api/jobs", json={"model": MODEL, "settings": {"seconds": 3}}).status_code == 202
    client.delete(f"/api/jobs/{running['id']}")
    wait_until(lambda: status(client, running) == "cancelled", timeout=5)  # it freed its worker
    gate.set()


def test_a_client_that_disconnects_mid_stream_frees_its_job(client):
    gate = blocking(client.app_state)
    job = start(client)
    got = events(client, job["id"], stop_after="started")  # then the client goes away
    assert got[-1]["event"] == "started"
    wait_until(lambda: status(client, job) == "cancelled", timeout=5)
    gate.set()


def test_history_survives_a_restart(studio_runs, tmp_path):
    with local(create_app(tmp_path / "data", studio_runs)) as c:
        job = start(c)
        assert events(c, job["id"])[-1]["event"] == "done"
    with local(create_app(tmp_path / "data", studio_runs)) as c:  # a new server on the same folder
        assert [j["id"] for j in c.get("/api/history").json()] == [job["id"]]
        assert c.get(f"/api/jobs/{job['id']}/0/midi").status_code == 200
        assert c.get(f"/api/jobs/{job['id']}").json()["status"] == "done"  # read from its folder


def test_finished_jobs_leave_memory_but_stay_reachable(studio_runs, tmp_path):
    """The server keeps only the newest finished jobs in memory; an older one is answered from disk."""
    app = create_app(tmp_path / "data", studio_runs, Limits(max_running=1, keep_finished=1))
    with local(app) as c:
        first, second = start(c), start(c)
        assert events(c, first["id"])[-1]["event"] == "done"
        in_memory = c.get(f"/api/jobs/{first['id']}").json()
        assert events(c, second["id"])[-1]["event"] == "done"
        with pytest.raises(KeyError):  # finishing the second dropped the first's record
            app.state.jobs.get(first["id"])
        old = c.get(f"/api/jobs/{first['id']}").json()
        assert old["status"] == "done" and old["result"]["id"] == first["id"] and len(old["result"]["variations"]) == 1
        # the same times as while it was in memory (how long it ran is started -> finished)
        assert old["created"] == in_memory["created"] and old["started"] == in_memory["started"]
        assert old["started"] <= old["finished"]
        assert [e["event"] for e in events(c, first["id"])] == ["done"]
        assert c.delete(f"/api/jobs/{first['id']}").json()["status"] == "done"  # nothing left to cancel
        assert c.get("/api/jobs/0123456789ab").status_code == 404


def test_the_shipped_model_plays_every_style_in_the_studio(client):
    from cadenza.models import zoo

    shipped = next((m for m in client.get("/api/models").json() if m["kind"] == "shipped"), None)
    assert shipped and shipped["id"] == zoo.DEFAULT, "the package ships no style model (tools/ship_model.py)"
    for style in shipped["styles"]:
        r = client.post("/api/jobs", json={"model": shipped["id"],
                                           "settings": {"style": style, "seconds": 3, "seed": 2, "stop_at_eos": False}})
        assert r.status_code == 202, r.text
        assert events(client, r.json()["id"])[-1]["event"] == "done", style
        result = client.get(f"/api/jobs/{r.json()['id']}").json()["result"]
        assert result["variations"][0]["notes"] >= 3, f"{style}: {result['variations'][0]['notes']} notes in 3 s"


def test_a_burst_of_requests_runs_in_a_bounded_number_of_threads(studio_runs, tmp_path):
    """Handlers that may block share `max_threads` threads: a burst queues for them instead of
    starting a thread per request (each new thread's stack and malloc cache stays in the process)."""
    app = create_app(tmp_path / "data", studio_runs, Limits(max_threads=3))
    inside, peak, lock = [0], [0], threading.Lock()
    scan = app.state.registry.entries

    def slow_scan():  # a --runs folder on a slow disk
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        time.sleep(0.2)
        with lock:
            inside[0] -= 1
        return scan()

    app.state.registry.entries = slow_scan
    with local(app) as c:
        codes = []
        burst = [threading.Thread(target=lambda: codes.append(c.get("/api/models").status_code)) for _ in range(12)]
        for t in burst:
            t.start()
        for t in burst:
            t.join(timeout=30)
        assert codes == [200] * 12
        assert 1 < peak[0] <= 3  # concurrent, within the bound
        assert c.get("/api/health").json()["ok"]  # cheap handlers run on the event loop meanwhile
