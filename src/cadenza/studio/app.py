"""The studio's web app: the page and a JSON API (OpenAPI at /docs) for scripts and DAW plugins.

Everything a client names (a model, a job, an upload) is an id the server handed out and looks up;
no client string is joined to a path. Settings are `SamplingConfig` JSON, refused with a 422 that
names the field and its range; every status an operation answers with is in its OpenAPI entry
(`contract`). Infill and accompaniment are in `edits`. See docs/studio.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import uuid
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI, File, HTTPException, Query, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles

from cadenza.atomic import write_bytes, write_json
from cadenza.data.midi import load_score
from cadenza.generation.config import SamplingConfig
from cadenza.generation.prompt import Continue
from cadenza.listen.pianoroll import piano_roll
from cadenza.settings import describe_range
from cadenza.studio import contract
from cadenza.studio.contract import Health, JobOut, ModelOut, SettingOut, UploadOut, errors
from cadenza.studio.duet import duet_routes
from cadenza.studio.edits import edit_routes
from cadenza.studio.guard import BodyLimit, Guard, origin_of
from cadenza.studio.jobs import FINISHED, Job, JobQueue
from cadenza.studio.media import ScoreError, engrave, keep_uploads, read_upload
from cadenza.studio.registry import Registry, UnknownModel
from cadenza.studio.requests import JobRequest, checked_settings, result_piece, submit, upload_piece
from cadenza.studio.runner import (
    Runner,
    bars_json,
    history,
    job_folder,
    notes_json,
    stored_job,
    stored_record,
    stored_summary,
    stored_variation,
)


@dataclass
class Limits:
    max_queued: int = 32  # jobs waiting; one more is a 429
    max_running: int = 2  # jobs sampling at once
    max_upload_bytes: int = 2 << 20
    max_body_bytes: int = 1 << 20  # a JSON body (a played melody of 2,000 notes is about 150 KiB)
    max_uploads: int = 256  # uploads kept, the oldest removed first ...
    max_upload_store_bytes: int = 256 << 20  # ... and their bytes together, sidecars included
    max_variations: int = 4
    max_seconds: float = 120.0
    max_tokens: int = 8000  # per variation
    max_melody_notes: int = 2000  # notes of a melody to accompany: posted, or an upload's
    # An upload's length and notes: a job renders and lists its primer or piece whole, so a 46-byte
    # file whose second note starts two hours in would make hours of audio. A 290 s piece peaks the
    # server at 870 MB, a 590 s one at 1.4 GB (docs/studio.md).
    max_piece_seconds: float = 300.0
    max_piece_notes: int = 20_000
    keep_finished: int = 16  # finished jobs kept in memory for late listeners; older ones are read from disk
    # Handlers that may block (a folder scan, a piano roll, a score) run in at most this many threads.
    # Starlette's default is 40, started as load peaks: each new thread's stack and malloc cache made
    # the server's memory creep up round after round of a steady load.
    max_threads: int = 4
    # A score is engraved one at a time in a child process, killed after `score_seconds`; music of
    # more notes than `max_score_notes` is not engraved (a 422 at once).
    score_seconds: float = 30.0
    max_score_notes: int = 3000


def create_app(data: Path, runs: Path | None = None, limits: Limits | None = None, device: str = "cpu",
               hosts: tuple[str, ...] = (), origins: tuple[str, ...] = ()) -> FastAPI:
    """The studio's app on the data folder `data`, offering the shipped models and the runs under
    `runs`; it answers a Host naming this machine or one of `hosts`, and browser writes from its own
    page or one of `origins` (`guard`)."""
    limits = limits or Limits()
    data = Path(data)
    (data / "uploads").mkdir(parents=True, exist_ok=True)
    _sweep(data)
    registry = Registry(runs, device=device)
    jobs = JobQueue(Runner(registry, data), limits.max_queued, limits.max_running, limits.keep_finished)
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        anyio.to_thread.current_default_thread_limiter().total_tokens = limits.max_threads
        yield
        await anyio.to_thread.run_sync(jobs.close)  # stop the jobs still running before the process ends

    app = FastAPI(title="cadenza studio", description="Generate, hear, see, continue, fill and accompany music "
                  "(docs/studio.md).", lifespan=lifespan)
    contract.install(app)
    # a multipart body carries some headers besides the file; the guard runs first (the last added)
    app.add_middleware(BodyLimit, limits={"/api/uploads": limits.max_upload_bytes + (16 << 10)},
                       default=limits.max_body_bytes)
    app.add_middleware(Guard, hosts=hosts, origins=[origin_of(o) for o in origins])  # a bad one: refused now
    app.state.jobs, app.state.registry, app.state.limits, app.state.data = jobs, registry, limits, data
    app.state.warm = {"compiled_step": "off"}  # `cadenza serve` starts the warm-up that updates it
    static = Path(str(resources.files("cadenza.studio") / "static"))
    app.mount("/static", StaticFiles(directory=static), name="static")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse((static / "index.html").read_text())

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        return FileResponse(static / "logo.svg", media_type="image/svg+xml")

    _model_routes(app, registry)
    _upload_routes(app, data, limits)
    _job_routes(app, jobs, registry, data, limits)
    edit_routes(app, jobs, registry, data, limits)
    duet_routes(app, registry)
    _file_routes(app, data, limits)
    return app


def _sweep(data: Path) -> None:
    """What a server killed mid-write left in its data folder: half-written job folders and files
    (`atomic` names them .NAME.*.tmp), and the temporary files of engravings."""
    shutil.rmtree(data / ".tmp", ignore_errors=True)
    for folder in (data / "jobs", data / "uploads"):
        for left in folder.glob(".*.tmp") if folder.is_dir() else ():
            if left.is_dir():
                shutil.rmtree(left, ignore_errors=True)
            else:
                left.unlink(missing_ok=True)


def _model_routes(app: FastAPI, registry: Registry) -> None:
    @app.get("/api/models", summary="The shipped models and the runs found under --runs, by id")
    def models() -> list[ModelOut]:
        return [e.public() for e in registry.entries()]

    @app.get("/api/settings", summary="Every SamplingConfig field: default, the range this server takes, meaning")
    async def settings() -> list[SettingOut]:
        limits = app.state.limits  # narrower than SamplingConfig's own ranges for these three
        server = {"num_samples": {"ge": 1, "le": limits.max_variations}, "seconds": {"gt": 0, "le": limits.max_seconds},
                  "max_tokens": {"ge": 1, "le": limits.max_tokens}}
        out = []
        for f in fields(SamplingConfig):
            if f.name == "use_cache":  # the tests' reference, not a musician's choice
                continue
            out.append({"name": f.name, "default": f.default, "doc": f.metadata.get("doc", ""),
                        "range": describe_range(server.get(f.name) or dict(f.metadata))})
        return out

    @app.get("/api/health", summary="Up; jobs running; the compiled decode step: off, building, ready or eager")
    async def health() -> Health:
        return {"ok": True, "running": app.state.jobs.running(), **app.state.warm}


def _upload_routes(app: FastAPI, data: Path, limits: Limits) -> None:
    @app.post("/api/uploads", status_code=201, responses=errors(400, 413, 422),
              summary="A MIDI file to continue, fill or accompany; read like `cadenza prepare` reads")
    async def upload(file: UploadFile = File(...)) -> UploadOut:
        raw = await file.read(limits.max_upload_bytes + 1)
        name = Path(file.filename or "upload.mid").name[:120]
        if len(raw) > limits.max_upload_bytes:
            raise HTTPException(413, f"{name}: larger than {limits.max_upload_bytes // 1024} KiB")
        try:
            notes = read_upload(raw, name)
        except ValueError as e:  # MidiReadError is a ValueError: the reason, one line
            raise HTTPException(400, str(e).splitlines()[0]) from None
        if notes.duration > limits.max_piece_seconds or len(notes) > limits.max_piece_notes:
            contract.refuse(("body", "file"), f"{name}: {notes.duration:.0f} s and {len(notes)} notes; this server "
                            f"takes at most {limits.max_piece_seconds:g} s and {limits.max_piece_notes} notes")
        upload_id = uuid.uuid4().hex[:12]
        write_bytes(data / "uploads" / f"{upload_id}.mid", raw)
        info = {"id": upload_id, "name": name, "seconds": notes.duration, "notes": notes_json(notes.by_time()),
                "bars": bars_json(notes)}
        write_json(data / "uploads" / f"{upload_id}.json", info)
        keep_uploads(data / "uploads", limits.max_uploads, limits.max_upload_store_bytes)
        return info


def _job_routes(app: FastAPI, jobs: JobQueue, registry: Registry, data: Path, limits: Limits) -> None:
    @app.post("/api/jobs", status_code=202, responses=errors(400, 404, 422, 429),
              summary="Start generating; stream its events, fetch its files")
    def start(req: JobRequest) -> JobOut:
        try:
            entry = registry.get(req.model)
        except UnknownModel:
            raise HTTPException(404, f"unknown model {req.model!r}; GET /api/models lists them") from None
        settings = checked_settings(req.settings, entry.styles, limits)
        return submit(jobs, Job(entry.id, settings, *_continuation(req, data, entry)))

    @app.get("/api/jobs/{job_id}", responses=errors(404), summary="A job's status and, when done, its result")
    async def status(job_id: str) -> JobOut:
        return _job(jobs, data, job_id).public()

    @app.delete("/api/jobs/{job_id}", responses=errors(404),
                summary="Cancel a job (its worker is freed within a token)")
    async def cancel(job_id: str) -> JobOut:
        job = _job(jobs, data, job_id)
        if job.status not in FINISHED:
            jobs.cancel(job_id)
        return job.public()

    @app.get("/api/jobs/{job_id}/events", response_class=StreamingResponse, responses={
        200: {"description": "server-sent events, one JSON object each", "content": {"text/event-stream": {}}},
        **errors(404, 422)}, summary="Server-sent events: queued, started, notes, done, ...")
    async def events(job_id: str, request: Request, after: int = Query(0, ge=0)) -> StreamingResponse:
        job = _job(jobs, data, job_id)
        return StreamingResponse(_stream(job, jobs, request, after), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/api/history", summary="Finished generations kept in the server's data folder, newest first")
    def past() -> list[dict]:
        return history(data)


# A variation's files: kind -> (file suffix or None for one made here, media type, what it is)
KINDS = {"midi": ("mid", "audio/midi", "the MIDI file"), "wav": ("wav", "audio/wav", "its audio"),
         "png": (None, "image/png", "a piano roll picture"),
         "score": (None, "image/svg+xml", "the engraved score's first page (a 422 when it cannot be engraved)"),
         "notes": (None, "application/json", "[start, end, pitch, velocity] per note, in onset order"),
         "new": (None, "application/json", "per note of `notes`: 1 if the model wrote it, 0 if it was given")}


def _file_routes(app: FastAPI, data: Path, limits: Limits) -> None:
    def folder(job_id: str, variation: int) -> Path:
        if (found := job_folder(data, job_id)) is None:
            raise HTTPException(404, f"no finished job {job_id!r}")
        base = found / f"sample-{variation}.mid"
        if not base.is_file():
            raise HTTPException(404, f"job {job_id} has no variation {variation}")
        return base

    def route(kind: str, suffix: str | None, media: str, what: str) -> None:
        @app.get(f"/api/jobs/{{job_id}}/{{variation}}/{kind}", name=f"variation_{kind}", response_class=Response,
                 responses={200: {"description": what, "content": {media: {}}}, **errors(404, 422)},
                 summary=f"A finished variation's {kind}: {what}")
        def result_file(job_id: str, variation: int) -> Response:
            base = folder(job_id, variation)
            if suffix is not None:
                return FileResponse(base.with_suffix(f".{suffix}"), media_type=media,
                                    filename=f"cadenza-{job_id}-{variation}.{suffix}")
            return _made(kind, base, data, job_id, variation)

    for kind, (suffix, media, what) in KINDS.items():
        if kind != "score":
            route(kind, suffix, media, what)
    turn = asyncio.Semaphore(1)  # one engraving at a time: each may take all of a core

    @app.get("/api/jobs/{job_id}/{variation}/score", name="variation_score", response_class=Response,
             responses={200: {"description": KINDS["score"][2], "content": {"image/svg+xml": {}}}, **errors(404, 422)},
             summary=f"A finished variation's score: {KINDS['score'][2]}")
    async def score(job_id: str, variation: int) -> Response:
        # async, and engraved in a child process: however long a score takes, no request thread waits on it
        base = await anyio.to_thread.run_sync(folder, job_id, variation)
        engraved = base.with_suffix(".svg").is_file()  # then engrave() reads it: nothing to count
        notes = 0 if engraved else (await anyio.to_thread.run_sync(load_score, base)).note_num()
        if notes > limits.max_score_notes:
            contract.refuse(("path", "variation"), f"no score for this music: {notes} notes, and this server "
                            f"engraves at most {limits.max_score_notes}")
        try:
            return Response(await engrave(base, turn, limits.score_seconds, data / ".tmp"), media_type="image/svg+xml")
        except ScoreError as e:
            contract.refuse(("path", "variation"), f"no score for this music ({e})")


def _made(kind: str, base: Path, data: Path, job_id: str, variation: int) -> Response:
    """A variation's file that is not stored as is: its notes, which are new, a picture."""
    if kind in ("notes", "new"):
        record = stored_record(data, job_id)
        v = stored_variation(record, variation) if record else None
        if v is None:
            raise HTTPException(404, f"job {job_id} has no variation {variation}")
        return JSONResponse(v["note_list"] if kind == "notes" else v["note_new"])
    return Response(_png(base), media_type="image/png")


def _png(midi: Path) -> bytes:
    png = midi.with_suffix(".png")
    if not png.is_file():
        piano_roll(midi, png, title=None)
    return png.read_bytes()


def _job(jobs: JobQueue, data: Path, job_id: str) -> Job:
    """The job in memory, or a finished one rebuilt from its folder."""
    try:
        return jobs.get(job_id)
    except KeyError:
        if (job := stored_job(data, job_id)) is None:
            raise HTTPException(404, f"no job {job_id!r}") from None
        return job


def _continuation(req: JobRequest, data: Path, entry) -> tuple[Continue | None, dict | None]:
    """What a continuation starts from (an upload, or a finished job's variation, its end the longest
    variation's), read with the model's tokenizer, and how job.json shows it; (None, None): a new piece."""
    if req.primer is None:
        return None, None
    if isinstance(req.primer, str):
        piece = upload_piece(data, req.primer, "primer")
    else:
        piece = result_piece(data, req.primer, "primer")
        piece.end = max(v["seconds"] or 0 for v in stored_summary(data, req.primer.job)["variations"])
    source = {"task": "continue", "seconds": req.primer_seconds, "name": piece.name, "end": piece.end}
    return Continue(piece.read(entry.tokenizer), req.primer_seconds), source


async def _stream(job: Job, jobs: JobQueue, request: Request, after: int):
    """The job's events from index `after` as server-sent events; a client that goes away before the
    job is over cancels it, which frees its worker."""
    sent, finished = after, False
    try:
        while True:
            while sent < len(job.events):
                frame = job.events[sent]
                sent += 1
                if frame is not None:  # None: a notes event that a newer one of its variation replaced
                    yield frame  # bytes made once by `Job.emit`: no copy per listener
            if job.status in FINISHED and sent >= len(job.events):
                finished = True
                return
            if await request.is_disconnected():
                return
            await asyncio.sleep(0.05)
    finally:
        if not finished and job.status not in FINISHED:
            jobs.cancel(job.id)
