"""The studio's job records: what a long-running server keeps in memory per job stays small and bounded."""

from __future__ import annotations

import json

from cadenza.studio.jobs import FINISHED, Job, JobQueue


def test_a_notes_event_replaces_the_previous_one_of_its_variation():
    job = Job("m", {})
    job.emit("started")
    for k in range(1, 4):  # each notes event carries every note so far
        job.emit("notes", variation=0, notes=[[0.1 * i, 0.2, 60, 80] for i in range(k)])
        job.emit("notes", variation=1, notes=[[0.0, 0.5, 64, 80]] * k)
    kept = [json.loads(e.split(b"\ndata: ")[1]) for e in job.events if e is not None]
    notes = [e for e in kept if e["event"] == "notes"]
    assert [(e["variation"], len(e["notes"])) for e in notes] == [(0, 3), (1, 3)]
    assert len(job.events) == 7  # indices stay stable for clients streaming from `after`
    assert job.events[-1].startswith(b"id: 7\nevent: notes\n")  # its id is its index + 1


def test_finished_jobs_beyond_the_newest_are_forgotten_as_jobs_finish():
    """Between bursts of jobs the server holds `keep_finished` records, not those of the last burst too."""
    queue = JobQueue(lambda job: {"ok": True}, max_queued=8, max_running=1, keep_finished=3)
    jobs = [queue.submit(Job("m", {})) for _ in range(6)]
    for job in jobs:
        job.wait(after=2, timeout=10)  # queued, started, done
        assert job.status in FINISHED
    kept = []
    for job in jobs:
        try:
            kept.append(queue.get(job.id).id)
        except KeyError:
            pass
    assert kept == [j.id for j in jobs[-3:]]
