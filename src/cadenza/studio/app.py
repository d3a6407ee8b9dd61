"""The studio's web app: the page and a JSON API (OpenAPI at /docs) for scripts and DAW plugins.

Everything a client names (a model, a job, an upload) is an id the server handed out and looks up;
no client string is joined to a path. Settings are `SamplingConfig` JSON, refused with a 422 that
names the field and its range. See docs/studio.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, File, HTTPException, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from cadenza.generation.config import SamplingConfig
from cadenza.settings import SettingError, describe_range
from cadenza.studio.jobs import FINISHED, Job, JobQueue, QueueFull
from cadenza.studio.registry import Registry, UnknownModel
from cadenza.studio.runner import SERVER_ID, Runner, history, notes_json, stored_job, stored_notes, stored_summary


@dataclass
class Limits:
    max_queued: int = 32  # jobs waiting; one more is a 429
    max_running: int = 2  # jobs sampling at once
    max_upload_bytes: int = 2 << 20
    max_variations: int = 4
    max_seconds: float = 120.0
    max_tokens: int = 8000  # per variation
    keep_finished: int = 16  # finished jobs kept in memory for late listeners; older ones are read from disk
    # Handlers that may block (a folder scan, a piano roll, a score) run in at most this many threads.
    # Starlette's default is 40, started as load peaks: each new thread's stack and malloc cache made
    # the server's memory creep up round after round of a steady load.
    max_threads: int = 4


class PrimerFromJob(BaseModel):
    job: str
    variation: int = 0


class JobRequest(BaseModel):
    model: str = Field(description="a model id from GET /api/models")
    settings: dict[str, Any] = Field(default_factory=dict, description="SamplingConfig fields (GET /api/settings)")
    primer: str | PrimerFromJob | None = Field(None, description="an upload id, or a previous job's variation")
    primer_seconds: float | None = Field(None, description="continue from this point of the primer")


def create_app(data: Path, runs: Path | None = None, limits: Limits | None = None, device: str = "cpu") -> FastAPI:
    limits = limits or Limits()
    data = Path(data)
    (data / "uploads").mkdir(parents=True, exist_ok=True)
    registry = Registry(runs, device=device)
    jobs = JobQueue(Runner(registry, data), limits.max_queued, limits.max_running, limits.keep_finished)
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        anyio.to_thread.current_default_thread_limiter().total_tokens = limits.max_threads
        yield

    app = FastAPI(title="cadenza studio", description="Generate, hear, see and continue music (docs/studio.md).",
                  lifespan=lifespan)
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
    return app


def _model_routes(app: FastAPI, registry: Registry) -> None:
    @app.get("/api/models", summary="The shipped models and the runs found under --runs, by id")
    def models() -> list[dict]:
        return [e.public() for e in registry.entries()]

    @app.get("/api/settings", summary="Every SamplingConfig field: default, valid range, meaning")
    async def settings() -> list[dict]:
        out = []
        for f in fields(SamplingConfig):
            if f.name in ("primer", "primer_seconds", "use_cache"):
                continue
            out.append({"name": f.name, "default": f.default, "range": describe_range(dict(f.metadata)),
                        "doc": f.metadata.get("doc", "")})
        return out

    @app.get("/api/health", summary="Up; jobs running; the compiled decode step: off, building, ready or eager")
    async def health() -> dict:
        return {"ok": True, "running": app.state.jobs.running(), **app.state.warm}


def _upload_routes(app: FastAPI, data: Path, limits: Limits) -> None:
    from cadenza.atomic import write_bytes, write_json
    from cadenza.studio.media import read_upload

    @app.post("/api/uploads", status_code=201, summary="A MIDI file to continue; read like `cadenza prepare` reads")
    async def upload(file: UploadFile = File(...)) -> dict:
        raw = await file.read(limits.max_upload_bytes + 1)
        name = Path(file.filename or "upload.mid").name[:120]
        if len(raw) > limits.max_upload_bytes:
            raise HTTPException(413, f"{name}: larger than {limits.max_upload_bytes // 1024} KiB")
        try:
            notes = read_upload(raw, name)
        except ValueError as e:  # MidiReadError is a ValueError: the reason, one line
            raise HTTPException(400, str(e).splitlines()[0]) from None
        upload_id = uuid.uuid4().hex[:12]
        write_bytes(data / "uploads" / f"{upload_id}.mid", raw)
        info = {"id": upload_id, "name": name, "seconds": notes.duration, "notes": notes_json(notes)}
        write_json(data / "uploads" / f"{upload_id}.json", info)
        return info


def _job_routes(app: FastAPI, jobs: JobQueue, registry: Registry, data: Path, limits: Limits) -> None:
    @app.post("/api/jobs", status_code=202, summary="Start generating; stream its events, fetch its files")
    def start(req: JobRequest) -> dict:
        try:
            entry = registry.get(req.model)
        except UnknownModel:
            raise HTTPException(404, f"unknown model {req.model!r}; GET /api/models lists them") from None
        settings = _checked_settings(req.settings, entry.styles, limits)
        primer = _primer(req, data)
        try:
            return jobs.submit(Job(entry.id, settings, primer)).public()
        except QueueFull as e:
            raise HTTPException(429, str(e), headers={"Retry-After": "5"}) from None

    @app.get("/api/jobs/{job_id}", summary="A job's status and, when done, its result")
    async def status(job_id: str) -> dict:
        return _job(jobs, data, job_id).public()

    @app.delete("/api/jobs/{job_id}", summary="Cancel a job (its worker is freed within a token)")
    async def cancel(job_id: str) -> dict:
        job = _job(jobs, data, job_id)
        if job.status not in FINISHED:
            jobs.cancel(job_id)
        return job.public()

    @app.get("/api/jobs/{job_id}/events", summary="Server-sent events: queued, started, notes, done, ...")
    async def events(job_id: str, request: Request, after: int = 0) -> StreamingResponse:
        job = _job(jobs, data, job_id)
        return StreamingResponse(_stream(job, jobs, request, after), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/api/history", summary="Finished generations kept in the server's data folder, newest first")
    def past() -> list[dict]:
        return history(data)

    _file_routes(app, data)


def _file_routes(app: FastAPI, data: Path) -> None:
    kinds = {"midi": ("mid", "audio/midi"), "wav": ("wav", "audio/wav")}

    def folder(job_id: str) -> Path:
        if stored_summary(data, job_id) is None:  # also refuses any id not of the server's form
            raise HTTPException(404, f"no finished job {job_id!r}")
        return data / "jobs" / job_id

    @app.get("/api/jobs/{job_id}/{variation}/{kind}", summary="A variation's midi, wav, png, score (SVG) or notes")
    def result_file(job_id: str, variation: int, kind: str) -> Response:
        base = folder(job_id) / f"sample-{variation}.mid"
        if not base.is_file():
            raise HTTPException(404, f"job {job_id} has no variation {variation}")
        if kind in kinds:
            ext, media = kinds[kind]
            return FileResponse(base.with_suffix(f".{ext}"), media_type=media,
                                filename=f"cadenza-{job_id}-{variation}.{ext}")
        if kind == "notes":
            return JSONResponse(stored_notes(data, job_id, variation))
        if kind == "png":
            return Response(_png(base), media_type="image/png")
        if kind == "score":
            from cadenza.studio.media import score_svg

            try:
                return Response(score_svg(base), media_type="image/svg+xml")
            except Exception as e:  # music21 or verovio could not engrave it: say so, keep serving
                raise HTTPException(422, f"no score for this music ({type(e).__name__})") from None
        raise HTTPException(404, f"unknown kind {kind!r}: midi, wav, png, score or notes")


def _png(midi: Path) -> bytes:
    png = midi.with_suffix(".png")
    if not png.is_file():
        from cadenza.listen.pianoroll import piano_roll

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


def _checked_settings(settings: dict, styles: list[str], limits: Limits) -> dict:
    """The settings as SamplingConfig validates them, within the server's limits: a 422 naming the
    field and its valid range otherwise."""
    def refuse(name: str, msg: str):
        raise HTTPException(422, [{"loc": ["body", "settings", name], "msg": f"{name} {msg}", "type": "value_error"}])

    if "primer" in settings or "primer_seconds" in settings:
        refuse("primer", "is set by uploading a MIDI file (POST /api/uploads) and naming it as `primer`")
    settings = {"seconds": 10.0, **settings} if "max_tokens" not in settings else dict(settings)
    try:
        cfg = SamplingConfig.from_dict(settings)
    except SettingError as e:
        refuse(e.field, e.reason)
    except TypeError as e:
        refuse("settings", f"are not SamplingConfig fields ({e})")
    if cfg.style is not None and cfg.style not in styles:
        refuse("style", f"must be one of {', '.join(styles) or '(this model has no styles)'}, got {cfg.style!r}")
    if cfg.num_samples > limits.max_variations:
        refuse("num_samples", f"must be in [1, {limits.max_variations}] on this server, got {cfg.num_samples}")
    if cfg.seconds is not None and cfg.seconds > limits.max_seconds:
        refuse("seconds", f"must be in (0, {limits.max_seconds:g}] on this server, got {cfg.seconds}")
    if cfg.token_budget() > limits.max_tokens:
        refuse("max_tokens", f"must be in [1, {limits.max_tokens}] on this server, got {cfg.token_budget()}")
    return {k: v for k, v in cfg.to_dict().items() if k not in ("primer", "primer_seconds")}


def _primer(req: JobRequest, data: Path) -> dict | None:
    if req.primer is None:
        return None
    if isinstance(req.primer, str):
        if not SERVER_ID.match(req.primer) or not (data / "uploads" / f"{req.primer}.mid").is_file():
            raise HTTPException(404, f"no upload {req.primer!r}; POST /api/uploads first")
        path = data / "uploads" / f"{req.primer}.mid"
        info = json.loads(path.with_suffix(".json").read_text())
        name, end = info["name"], info["seconds"]
    else:
        job = stored_summary(data, req.primer.job)
        path = data / "jobs" / req.primer.job / f"sample-{req.primer.variation}.mid" if job else None
        if path is None or not path.is_file():
            raise HTTPException(404, f"no finished job {req.primer.job!r} with variation {req.primer.variation}")
        name, end = f"job {req.primer.job}", max(v["seconds"] or 0 for v in job["variations"])
    if req.primer_seconds is not None and not req.primer_seconds > 0:
        raise HTTPException(422, [{"loc": ["body", "primer_seconds"], "type": "value_error",
                                   "msg": f"primer_seconds must be > 0, got {req.primer_seconds}"}])
    return {"path": path, "seconds": req.primer_seconds, "name": name, "end": end}


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
