"""The studio's OpenAPI schema is a contract a generated client can trust: schemathesis (`st run
--checks all`) sends generated requests, valid and not, to a live server and finds nothing the
schema does not describe (a status, a body, a content type, an Allow header).

The schema cannot say everything; where it cannot, the run is told, per operation, and why (the
same words are in docs/studio.md): the bytes of an upload must be a MIDI file with notes (400), a
few rules join two fields (a note's end after its start, one melody source): a 422, and music that
cannot be engraved has no score (a 422). `DELETE /api/jobs/{id}` cancels a job, whose record and
files stay readable, so the check that a deleted resource is gone does not apply. The job read
operations are given a real finished job, so their answers are checked too. A fixed seed and a
bounded number of cases keep the run reproducible and under a minute; speed is bench_serve's to
measure, so a response may take up to a minute here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from studio_client import serving

if shutil.which("st", path=str(Path(sys.executable).parent)) is None and not os.environ.get("CI"):
    pytest.skip("schemathesis is not installed (pip install -e .[dev])", allow_module_level=True)

CASES = 25  # per operation and phase

CONFIG = """
[checks]
max_response_time = 60  # `--checks all` allows 10 s a response: a score engraved on a busy machine takes more

[[operations]]
include-name = "POST /api/uploads"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "404", "409", "429"]

[[operations]]
include-name = ["POST /api/accompany", "POST /api/infill", "POST /api/jobs"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "404", "409", "422", "429"]

[[operations]]
include-path-regex = "^/api/jobs/[{]job_id[}]"
include-method = "GET"
parameters = { job_id = "JOB", variation = 0 }

[[operations]]
include-name = "GET /api/jobs/{job_id}/{variation}/score"
checks.positive_data_acceptance.expected-statuses = ["2xx", "404", "422"]
"""


def test_the_api_answers_only_as_its_schema_says(studio_runs, tmp_path):
    from cadenza.studio.app import Limits, create_app

    app = create_app(tmp_path / "data", studio_runs, Limits(max_running=1))
    with serving(app) as url:
        job = httpx.post(f"{url}/api/jobs", json={"model": "run:tiny", "settings": {"seconds": 2, "seed": 0}}).json()
        with httpx.stream("GET", f"{url}/api/jobs/{job['id']}/events", timeout=60) as events:
            assert any(line.startswith("event: done") for line in events.iter_lines())
        (tmp_path / "schemathesis.toml").write_text(CONFIG.replace("JOB", job["id"]))
        st = shutil.which("st", path=str(Path(sys.executable).parent))
        assert st, "schemathesis is a dev dependency: pip install -e .[dev]"
        run = subprocess.run([st, "--config-file", str(tmp_path / "schemathesis.toml"), "--no-color", "run",
                              f"{url}/openapi.json", "--checks", "all", "--exclude-checks", "use_after_free",
                              "-n", str(CASES), "--seed", "1",
                              "--generation-database", "none", "--request-timeout", "30"],
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        assert httpx.get(f"{url}/api/health").json()["ok"]  # and it still serves
