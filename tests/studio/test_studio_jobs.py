"""The studio's job records and queue: what a long-running server keeps per job stays small and
bounded, waiters wake when something happens, and cancelling never races a worker."""

from __future__ import annotations

import gc
import json
import threading
import time
import weakref

from conftest import wait_until

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


def test_a_waiter_wakes_when_an_event_comes_not_at_its_timeout():
    job = Job("m", {})
    assert not job.wait(after=0, timeout=0.05)  # nothing happened
    threading.Timer(0.1, job.emit, args=("started",)).start()
    t0 = time.monotonic()
    assert job.wait(after=0, timeout=30)
    assert time.monotonic() - t0 < 10


def test_finished_jobs_beyond_the_newest_are_forgotten_as_jobs_finish():
    """Between bursts of jobs the server holds `keep_finished` records, not those of the last burst too."""
    queue = JobQueue(lambda job: {"ok": True}, max_queued=8, max_running=1, keep_finished=3)
    jobs = [queue.submit(Job("m", {})) for _ in range(6)]
    for job in jobs:
        assert job.wait(after=2, timeout=10)  # queued, started, done
        assert job.status in FINISHED
    kept = []
    for job in jobs:
        try:
            kept.append(queue.get(job.id).id)
        except KeyError:
            pass
    assert kept == [j.id for j in jobs[-3:]]


def test_closing_the_queue_cancels_every_job_and_waits_for_the_running_ones():
    """A server that shuts down stops its jobs first: one running, one waiting."""
    queue = JobQueue(lambda job: wait_until(lambda: job.check(), timeout=60), max_queued=4, max_running=1)
    running, waiting = queue.submit(Job("m", {})), queue.submit(Job("m", {}))
    wait_until(lambda: running.status == "running", timeout=10)
    t0 = time.monotonic()
    queue.close(timeout=30)
    assert time.monotonic() - t0 < 10 and queue.running() == 0
    assert (running.status, waiting.status) == ("cancelled", "cancelled")


def test_a_jobs_reference_cycles_are_freed_when_it_ends():
    """A long-running server frees each job's garbage as the job ends, not hundreds of jobs later."""
    class Node:
        pass

    made = []

    def run(job):
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only a collection frees it
        made.append(weakref.ref(a))
        return {"ok": True}

    gc.disable()  # no automatic collection: only the queue's own frees the cycle
    try:
        job = JobQueue(run, max_running=1).submit(Job("m", {}))
        assert job.wait(after=2, timeout=10)
        wait_until(lambda: made[0]() is None, timeout=10)
    finally:
        gc.enable()


class HeldUp(Job):
    """A job whose worker is held up for a moment right after reading its status "queued", as a
    thread switch there would hold it."""

    def __init__(self):
        self.test_thread, self.read_by_worker = threading.get_ident(), threading.Event()
        super().__init__("m", {})

    @property
    def status(self) -> str:
        value = self.__dict__["_status"]
        if value == "queued" and threading.get_ident() != self.test_thread and not self.read_by_worker.is_set():
            self.read_by_worker.set()
            time.sleep(0.2)  # the test cancels the job now
        return value

    @status.setter
    def status(self, value: str) -> None:
        self.__dict__["_status"] = value


def test_a_job_cancelled_as_a_worker_takes_it_either_never_starts_or_runs_to_its_end():
    queue = JobQueue(lambda job: {"ok": True}, max_running=1)
    job = queue.submit(HeldUp())
    wait_until(job.read_by_worker.is_set, timeout=10)
    queue.cancel(job.id)
    assert job.wait(after=2, timeout=10)
    wait_until(lambda: job.status in FINISHED, timeout=10)
    time.sleep(0.3)  # a worker that took the cancelled job would emit its events now
    story = [json.loads(e.split(b"\ndata: ")[1])["event"] for e in job.events]
    assert story in (["queued", "cancelled"], ["queued", "started", "done"]), story
