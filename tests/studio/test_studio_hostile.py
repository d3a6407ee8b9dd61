"""The studio under hostile and clumsy input (issue 45's findings, replayed against the app): a page
of another site cannot drive it, a value that would fail a job is a 422 at the door, no input gets a
500, and a tiny file that spans hours is refused before it costs anything."""

from __future__ import annotations

import numpy as np
import pytest
from studio_client import LOCAL, events, local

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


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST"])
def test_this_machine_s_names_are_served(client, host):
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
