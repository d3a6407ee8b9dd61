"""Filling a span and accompanying a melody through the studio's API: the given notes come back as they
went in, the events say which notes are new, and every bad request is a 4xx naming its field while
the server keeps serving."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import wait_until
from studio_client import blocking, events, keyed, local, midi_rows

from cadenza.data.midi import Notes, read_notes, write_midi
from cadenza.studio.app import Limits, create_app

MODEL = "run:notes"  # the note vocabulary: it can infill and accompany
# 12 s in four parts, quarter notes at 120 bpm: a piece to fill, with a melody on top
CHORALE = [(b * 0.5, b * 0.5 + 0.45, base + b % 3, 80) for b in range(24) for base in (72, 65, 60, 48)]
TUNE = [{"start": i * 0.5, "end": i * 0.5 + 0.4, "pitch": p, "velocity": 90}
        for i, p in enumerate([67, 69, 71, 72, 74, 72, 71, 69])]


@pytest.fixture(scope="module")
def client(studio_edit_runs, tmp_path_factory):
    app = create_app(tmp_path_factory.mktemp("data"), studio_edit_runs,
                     Limits(max_queued=2, max_running=1, max_seconds=30, max_melody_notes=50))
    with local(app) as c:
        c.app_state = app.state
        yield c


@pytest.fixture(scope="module")
def upload(client, tmp_path_factory) -> dict:
    s, e, p, v = map(np.array, zip(*CHORALE))
    path = write_midi(Notes.from_arrays(s, e, p, v), tmp_path_factory.mktemp("in") / "chorale.mid")
    r = client.post("/api/uploads", files={"file": ("chorale.mid", path.read_bytes(), "audio/midi")})
    assert r.status_code == 201, r.text
    return r.json()


def run(client, path: str, **body) -> tuple[dict, list[dict]]:
    """Start an infill or an accompaniment; its id and its events once it is over."""
    r = client.post(path, json={"model": MODEL, **body})
    assert r.status_code == 202, r.text
    evs = events(client, r.json()["id"])
    assert evs[-1]["event"] == "done", evs[-1]
    return r.json(), evs


def downloaded(client, job_id: str, variation: int) -> set:
    r = client.get(f"/api/jobs/{job_id}/{variation}/midi")
    assert r.status_code == 200
    return keyed(midi_rows(r.content))


def test_a_span_of_an_upload_is_filled_and_every_other_note_kept(client, upload):
    job, evs = run(client, "/api/infill", upload=upload["id"], start=4, end=8,
                   settings={"num_samples": 2, "seed": 3, "style": "chorale"})
    outside = keyed(n for n in upload["notes"] if not 4 <= n[0] < 8)
    for k in range(2):
        kept = {n for n in downloaded(client, job["id"], k) if not 4 * 480 <= n[0] < 8 * 480}
        assert kept == outside  # nothing outside the span moved
        notes = client.get(f"/api/jobs/{job['id']}/{k}/notes").json()
        new = client.get(f"/api/jobs/{job['id']}/{k}/new").json()
        assert len(new) == len(notes) and keyed(n for n, f in zip(notes, new) if not f) == outside
        assert all(4 <= n[0] < 8 for n, f in zip(notes, new) if f)  # what the model wrote is in the span
    streamed = [e for e in evs if e["event"] == "notes"]
    assert streamed and all(len(e["new"]) == len(e["notes"]) for e in streamed)
    past = client.get("/api/history").json()[0]
    assert past["id"] == job["id"] and past["primer"]["task"] == "infill" and past["primer"]["span"] == [4, 8]


def test_a_span_of_a_result_is_filled(client, upload):
    first, _ = run(client, "/api/infill", upload=upload["id"], start=2, end=3)
    again, _ = run(client, "/api/infill", result={"job": first["id"], "variation": 0}, start=6, end=9)
    before = client.get(f"/api/jobs/{first['id']}/0/notes").json()
    after = downloaded(client, again["id"], 0)
    assert keyed(n for n in before if not 6 <= n[0] < 9) == {n for n in after if not 6 * 480 <= n[0] < 9 * 480}


def test_a_played_melody_comes_back_note_for_note_with_voices_under_it(client):
    job, evs = run(client, "/api/accompany", notes=TUNE, settings={"style": "jig", "seed": 1})
    notes = client.get(f"/api/jobs/{job['id']}/0/notes").json()
    new = client.get(f"/api/jobs/{job['id']}/0/new").json()
    tune = keyed((n["start"], n["end"], n["pitch"]) for n in TUNE)
    assert keyed(n for n, f in zip(notes, new) if not f) == tune  # given: exactly the melody
    assert tune <= downloaded(client, job["id"], 0)
    assert evs[-1]["result"]["primer"]["name"] == "played melody (8 notes)"
    melody = read_notes(client.app_state.data / "jobs" / job["id"] / "melody.mid")[0]  # kept with the job
    assert keyed(zip(melody.start, melody.end, melody.pitch)) == tune


def test_an_upload_and_a_results_top_line_are_accompanied(client, upload):
    job, _ = run(client, "/api/accompany", upload=upload["id"])
    top = keyed(n for n in upload["notes"] if n[2] >= 72)  # the soprano: the top line
    assert top <= downloaded(client, job["id"], 0)
    again, _ = run(client, "/api/accompany", result={"job": job["id"], "variation": 0})
    before = client.get(f"/api/jobs/{job['id']}/0/notes").json()
    notes = client.get(f"/api/jobs/{again['id']}/0/notes").json()
    given = [n for n, f in zip(notes, client.get(f"/api/jobs/{again['id']}/0/new").json()) if not f]
    # each from the result (one part now: a note its twin on another instrument overlapped ends earlier)
    assert all(any(g[2] == b[2] and abs(g[0] - b[0]) < 0.005 and g[1] < b[1] + 0.005 for b in before) for g in given)
    assert max(n[2] for n in before) == max(n[2] for n in given)  # taken from the result, highest note included
    assert len({n[0] for n in given}) == len(given)  # one line: one note at each onset
    assert client.get("/api/history").json()[0]["primer"]["name"] == f"top line of job {job['id']}"


TOO_MANY = [{"start": i * 0.1, "end": i * 0.1 + 0.05, "pitch": 60} for i in range(51)]


@pytest.mark.parametrize("path,body,code,field,words", [
    ("/api/infill", {"start": 40, "end": 44}, 422, "start", "start must be before the piece ends (11.95 s)"),
    ("/api/infill", {"start": 4, "end": 4}, 422, "end", "end must be after start (4 s)"),
    ("/api/infill", {"start": 0, "end": 31}, 422, "end", "the span must be at most 30 s"),
    ("/api/infill", {"start": -1, "end": 2}, 422, "start", "greater than or equal to 0"),
    ("/api/infill", {"start": 1, "end": 2, "upload": None}, 422, "upload", "give exactly one of upload or result"),
    ("/api/infill", {"start": 1, "end": 2, "upload": "0123456789ab"}, 404, None, "upload: no upload '0123456789ab'"),
    ("/api/infill", {"start": 1, "end": 2, "upload": None, "result": {"job": "../../etc"}}, 404, None,
     "result: no finished job '../../etc'"),
    ("/api/infill", {"start": 1, "end": 2, "model": "run:tiny"}, 422, "model", "run:tiny cannot infill"),
    ("/api/infill", {"start": 1, "end": 2, "model": "nope"}, 404, None, "model: unknown model 'nope'"),
    ("/api/accompany", {"notes": []}, 422, "notes", "at least 1 item"),
    ("/api/accompany", {"notes": TOO_MANY}, 422, "notes", "notes: at most 50 on this server, got 51"),
    ("/api/accompany", {"notes": [{"start": 0, "end": 1, "pitch": 128}]}, 422, "pitch", "less than or equal to 127"),
    ("/api/accompany", {"notes": [{"start": 2, "end": 1, "pitch": 60}]}, 422, "end", "must be after start (2 s)"),
    ("/api/accompany", {"notes": [{"start": -1, "end": 1, "pitch": 60}]}, 422, "start", "greater than or equal"),
    ("/api/accompany", {"notes": [{"start": 1, "end": 31, "pitch": 60}]}, 422, "end", "at most 30 s on this server"),
    ("/api/accompany", {}, 422, "upload", "give exactly one of upload, result or notes"),
    ("/api/accompany", {"notes": TUNE, "result": {"job": "0123456789ab"}}, 422, "notes", "give exactly one"),
    ("/api/accompany", {"result": {"job": "0123456789ab", "variation": 0}}, 404, None, "result: no finished job"),
    ("/api/accompany", {"notes": TUNE, "settings": {"accompany": "/etc/passwd"}}, 422, "accompany",
     "accompany is not a sampling setting"),
    ("/api/jobs", {"settings": {"infill": "1:2"}}, 422, "infill", "infill is not a sampling setting"),
])
def test_bad_requests_are_4xx_naming_the_field_and_the_server_keeps_serving(client, upload, path, body, code,
                                                                            field, words):
    if path == "/api/infill" and "upload" not in body:
        body = {**body, "upload": upload["id"]}
    jobs = len(client.get("/api/history").json())
    r = client.post(path, json={"model": MODEL, **body})
    assert r.status_code == code, r.text
    detail = r.json()["detail"]
    if field is None:
        assert words in detail
    else:
        assert detail[0]["loc"][-1] == field and words in detail[0]["msg"], detail
    assert client.get("/api/health").json()["ok"] and len(client.get("/api/history").json()) == jobs


def test_a_full_queue_is_a_429_and_queued_jobs_leave_no_folder(client, upload):
    real, jobs = client.app_state.jobs._run, client.app_state.data / "jobs"
    folders = lambda: {p.name for p in jobs.iterdir()} if jobs.exists() else set()  # noqa: E731
    before = folders()
    gate, held = blocking(client.app_state), []
    try:
        held = [client.post("/api/accompany", json={"model": MODEL, "notes": TUNE}) for _ in range(3)]
        assert [r.status_code for r in held] == [202] * 3  # one running, two waiting
        full = client.post("/api/accompany", json={"model": MODEL, "notes": TUNE})
        assert full.status_code == 429 and full.headers["retry-after"] == "5"
        assert client.post("/api/infill", json={"model": MODEL, "upload": upload["id"], "start": 1,
                                                "end": 2}).status_code == 429
        assert folders() == before  # a job's melody is held in memory until it is done
    finally:
        gate.set()
        for r in held:
            wait_until(lambda r=r: client.get(f"/api/jobs/{r.json()['id']}").json()["status"] == "done", timeout=30)
        client.app_state.jobs._run = real


def test_a_cancelled_accompaniment_leaves_no_folder_behind(client):
    real, jobs = client.app_state.jobs._run, client.app_state.data / "jobs"
    gate = blocking(client.app_state)
    try:
        running, waiting = (client.post("/api/accompany", json={"model": MODEL, "notes": TUNE}).json()
                            for _ in range(2))
        wait_until(lambda: client.get(f"/api/jobs/{running['id']}").json()["status"] == "running", timeout=30)
        for job in (waiting, running):  # one that never started, one stopped mid-way
            client.delete(f"/api/jobs/{job['id']}")
            wait_until(lambda job=job: client.get(f"/api/jobs/{job['id']}").json()["status"] == "cancelled",
                       timeout=30)
            assert not (jobs / job["id"]).exists()
    finally:
        gate.set()
        client.app_state.jobs._run = real
