"""Generation jobs: a bounded queue, a bounded number running at once, events to stream, cancelling.

A job moves queued -> running -> done | failed | cancelled. Everything that happens to it is an
event appended to `job.events` (a progress step, new notes, the result); a client streams them from
any index, so a late listener still gets the whole story. Cancelling sets a flag the running job
checks after every token, so a cancelled job frees its worker within one step.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

FINISHED = ("done", "failed", "cancelled")


class QueueFull(RuntimeError):
    pass


class Cancelled(Exception):
    """Raised inside a running job when it was cancelled."""


@dataclass
class Job:
    model: str
    settings: dict[str, Any]
    primer: dict[str, Any] | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    status: str = "queued"
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    error: str | None = None
    result: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def emit(self, kind: str, **data: Any) -> None:
        with self._changed:
            self.events.append({"event": kind, "t": round(time.time() - self.created, 3), **data})
            self._changed.notify_all()

    def wait(self, after: int, timeout: float) -> None:
        """Return when there are more than `after` events, or after `timeout` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.events) > after, timeout)

    def check(self) -> None:
        if self.cancel_requested.is_set():
            raise Cancelled()

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "settings": self.settings, "status": self.status,
                "created": self.created, "started": self.started, "finished": self.finished, "error": self.error,
                "result": self.result, "events": len(self.events)}


class JobQueue:
    """`max_queued` jobs may wait; `max_running` run at once, each in a worker thread."""

    def __init__(self, run: Callable[[Job], dict], max_queued: int = 32, max_running: int = 2):
        self._run, self.max_queued = run, max_queued
        self._waiting: queue.Queue[Job] = queue.Queue()
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._workers = [threading.Thread(target=self._work, daemon=True, name=f"studio-worker-{i}")
                         for i in range(max_running)]
        for w in self._workers:
            w.start()

    def submit(self, job: Job) -> Job:
        with self._lock:
            waiting = sum(j.status == "queued" for j in self._jobs.values())
            if waiting >= self.max_queued:
                raise QueueFull(f"{waiting} jobs are waiting already (at most {self.max_queued}); try again soon")
            self._jobs[job.id] = job
            self._forget_old()
        job.emit("queued", position=waiting)
        self._waiting.put(job)
        return job

    def get(self, job_id: str) -> Job:
        return self._jobs[job_id]

    def cancel(self, job_id: str) -> Job:
        job = self._jobs[job_id]
        if job.status not in FINISHED:
            job.cancel_requested.set()
            if job.status == "queued":  # never started: it ends now; the worker will skip it
                self._finish(job, "cancelled")
        return job

    def running(self) -> int:
        return sum(j.status == "running" for j in self._jobs.values())

    def _work(self) -> None:
        while True:
            job = self._waiting.get()
            if job.status != "queued":
                continue
            job.status, job.started = "running", time.time()
            job.emit("started")
            try:
                job.result = self._run(job)
                self._finish(job, "done")
            except Cancelled:
                self._finish(job, "cancelled")
            except Exception as e:  # a job's failure is reported to its client, never kills the server
                job.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                self._finish(job, "failed")

    def _finish(self, job: Job, status: str) -> None:
        job.status, job.finished = status, time.time()
        extra = {"result": job.result} if job.result else {"error": job.error} if job.error else {}
        job.emit(status, **extra)

    def _forget_old(self, keep: int = 500) -> None:
        """Finished jobs stay in memory for a while (their files stay on disk, in the history)."""
        done = [j for j in self._jobs.values() if j.status in FINISHED]
        for j in sorted(done, key=lambda j: j.created)[:max(0, len(done) - keep)]:
            del self._jobs[j.id]
