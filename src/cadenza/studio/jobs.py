"""Generation jobs: a bounded queue, a bounded number running at once, events to stream, cancelling.

A job moves queued -> running -> done | failed | cancelled, each move made under the queue's lock.
Everything that happens to it is an event appended to `job.events` (a progress step, new notes, the
result); a client streams them from any index, so a late listener still gets the whole story.
Cancelling sets a flag the running job checks after every token, so it frees its worker within a
step. What stays in memory is bounded: a `notes` event replaces the previous one of its variation
(each holds all the notes so far), and only the newest finished jobs are kept (all stay on disk).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cadenza.generation.prompt import Task
from cadenza.studio import memory

FINISHED = ("done", "failed", "cancelled")
KEEP_ENDED = 256  # cancelled or failed jobs remembered (a few hundred bytes each), past `keep_finished`


class QueueFull(RuntimeError):
    pass


class Cancelled(Exception):
    """Raised inside a running job when it was cancelled."""


@dataclass
class Job:
    model: str
    settings: dict[str, Any]
    task: Task | None = None  # what it starts from (None: a new piece)
    source: dict[str, Any] | None = None  # that music as job.json shows it: task, name, end (seconds)
    keeps_melody: bool = False  # the melody was made by the server (played in, a top line): saved with the job
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    status: str = "queued"
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    error: str | None = None
    result: dict[str, Any] | None = None
    events: list[bytes | None] = field(default_factory=list)  # server-sent events; None: superseded
    cancel_requested: bool = False  # set by `JobQueue.cancel`, read by the worker after every token
    _changed: threading.Condition = field(default_factory=threading.Condition, repr=False)  # an event came
    _latest_notes: dict[int, int] = field(default_factory=dict, repr=False)  # variation -> index in events

    def emit(self, kind: str, **data: Any) -> None:
        text = json.dumps({"event": kind, "t": round(time.time() - self.created, 3), **data})
        with self._changed:
            index = len(self.events)
            if kind == "notes":  # the newest notes event of a variation holds all its notes so far
                before = self._latest_notes.get(data["variation"])
                if before is not None:
                    self.events[before] = None
                self._latest_notes[data["variation"]] = index
            # its id is its position + 1: a client that reconnects asks for what came after it
            self.events.append(f"id: {index + 1}\nevent: {kind}\ndata: {text}\n\n".encode())
            self._changed.notify_all()

    def wait(self, after: int, timeout: float) -> bool:
        """Whether the job has more than `after` events, waiting up to `timeout` seconds for them (a job
        that finishes emits its last event, so this also waits for the end)."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.events) > after, timeout)

    def ended(self) -> Job:
        """This finished job without its music: its record and its last event (cancelled or failed)."""
        return Job(self.model, self.settings, id=self.id, status=self.status, created=self.created,
                   started=self.started, finished=self.finished, error=self.error, events=self.events[-1:])

    def check(self) -> None:
        if self.cancel_requested:
            raise Cancelled()

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "model": self.model, "settings": self.settings, "status": self.status,
                "created": self.created, "started": self.started, "finished": self.finished, "error": self.error,
                "result": self.result, "events": len(self.events)}


class JobQueue:
    """`max_queued` jobs may wait; `max_running` run at once, each in a worker thread; the newest
    `keep_finished` finished jobs stay in memory (a few KB each) for their status and events."""

    def __init__(self, run: Callable[[Job], dict], max_queued: int = 32, max_running: int = 2,
                 keep_finished: int = 16):
        self._run, self.max_queued, self.keep_finished = run, max_queued, keep_finished
        self._waiting: queue.Queue[Job] = queue.Queue()
        self._jobs: dict[str, Job] = {}
        self._ended: dict[str, Job] = {}  # cancelled and failed jobs past keep_finished, oldest first
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
            self._jobs[job.id] = job  # old records were forgotten as their jobs finished (`_finish`)
        job.emit("queued", position=waiting)
        self._waiting.put(job)
        return job

    def get(self, job_id: str) -> Job:
        with self._lock:
            return self._jobs[job_id] if job_id in self._jobs else self._ended[job_id]

    def cancel(self, job_id: str) -> Job:
        with self._lock:  # a worker takes a queued job under the same lock: never both
            job = self._jobs[job_id]
            never_started = job.status == "queued"
            if job.status not in FINISHED:
                job.cancel_requested = True
            if never_started:  # it ends now; the worker will skip it
                job.status = "cancelled"
        if never_started:
            self._finish(job, "cancelled")
        return job

    def close(self, timeout: float = 10.0) -> None:
        """Cancel every job not finished and wait up to `timeout` seconds for the running ones to stop
        (within a token each): the server calls this as it shuts down, since a process that exits while
        a worker is inside torch aborts (`terminate called without an active exception`)."""
        with self._lock:
            live = [j.id for j in self._jobs.values() if j.status not in FINISHED]
        for job_id in live:
            self.cancel(job_id)
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.02)

    def running(self) -> int:
        with self._lock:  # workers forget old jobs as they finish: never iterate while one deletes
            return sum(j.status == "running" for j in self._jobs.values())

    def _work(self) -> None:
        while True:
            job = self._waiting.get()
            with self._lock:
                if job.status != "queued":  # cancelled while it waited
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
            memory.collect_after_job()

    def _finish(self, job: Job, status: str) -> None:
        with self._lock:  # at most `keep_finished` between bursts too, not only when the next job comes
            job.status, job.finished = status, time.time()
            self._forget_old()
        extra = {"result": job.result} if job.result else {"error": job.error} if job.error else {}
        job.emit(status, **extra)

    def _forget_old(self) -> None:
        """Finished jobs stay in memory for a while; then a done one is read from its folder, and a
        cancelled or failed one, which has none, is kept as its status and last event alone (up to
        KEEP_ENDED of them), so that it never turns into a 404."""
        done = [j for j in self._jobs.values() if j.status in FINISHED]
        for j in sorted(done, key=lambda j: j.created)[:max(0, len(done) - self.keep_finished)]:
            del self._jobs[j.id]
            if j.status != "done":
                self._ended[j.id] = j.ended()
        while len(self._ended) > KEEP_ENDED:
            self._ended.pop(next(iter(self._ended)))
