"""What a studio client sends, and how the server checks it before a job is queued.

Request bodies are pydantic models (so /openapi.json describes them); settings are `SamplingConfig`
JSON checked within the server's `Limits`; the music a request names (an upload, a finished job's
variation) is looked up by its id in the server's data folder. Every refusal is a 4xx whose body
names the field (`contract`): a 404 for an id the server did not hand out, a 422 for a value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from fastapi import HTTPException
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from cadenza.data.midi import Notes
from cadenza.generation.config import SamplingConfig
from cadenza.settings import SettingError
from cadenza.studio.contract import refuse
from cadenza.studio.jobs import Job, JobQueue, QueueFull
from cadenza.studio.runner import SERVER_ID, stored_record, stored_variation


class PrimerFromJob(BaseModel):
    """A variation of a finished job."""

    job: str = Field(description="a job id from POST /api/jobs, /api/infill or /api/accompany")
    variation: int = Field(0, ge=0, description="which of its variations, from 0")


class JobRequest(BaseModel):
    model: str = Field(description="a model id from GET /api/models")
    settings: dict[str, Any] = Field(default_factory=dict, description="SamplingConfig fields (GET /api/settings)")
    primer: str | PrimerFromJob | None = Field(None, description="an upload id, or a previous job's variation")
    primer_seconds: float | None = Field(None, gt=0, allow_inf_nan=False,
                                         description="continue from this point of the primer")


class InfillRequest(BaseModel):
    """Rewrite the notes of one piece that start in [start, end) seconds; every other note stays."""

    model: str = Field(description="a model id from GET /api/models whose tasks include infill")
    settings: dict[str, Any] = Field(default_factory=dict, description="SamplingConfig fields (GET /api/settings)")
    upload: str | None = Field(None, description="the piece: an upload id (give this or `result`)")
    result: PrimerFromJob | None = Field(None, description="the piece: a finished job's variation")
    start: float = Field(ge=0, allow_inf_nan=False, description="the span's start, seconds")
    end: float = Field(gt=0, allow_inf_nan=False, description="the span's end, seconds (after start)")


class RecordedNote(BaseModel):
    """One played note, in seconds from the start of the recording."""

    start: float = Field(ge=0, allow_inf_nan=False)
    end: float = Field(gt=0, allow_inf_nan=False, description="after start")
    pitch: int = Field(ge=0, le=127, description="MIDI pitch, 60 = middle C")
    velocity: int = Field(80, ge=1, le=127)

    @field_validator("end")
    @classmethod
    def _after_start(cls, end: float, info: ValidationInfo) -> float:
        start = info.data.get("start")
        if start is not None and not end > start:
            raise ValueError(f"must be after start ({start:g} s)")
        return end


class AccompanyRequest(BaseModel):
    """Write voices under a melody: an upload's, a finished job's top line, or notes played in."""

    model: str = Field(description="a model id from GET /api/models whose tasks include accompany")
    settings: dict[str, Any] = Field(default_factory=dict, description="SamplingConfig fields (GET /api/settings)")
    upload: str | None = Field(None, description="an upload id: its melody is its lead part, or its top line")
    result: PrimerFromJob | None = Field(None, description="a finished job's variation: its top line")
    notes: list[RecordedNote] | None = Field(None, min_length=1, description="a melody played in (recorded)")


@dataclass
class Piece:
    """Music a request names: its MIDI file in the data folder, a name to show, and where it ends
    (the last release, seconds)."""

    path: Path
    name: str
    end: float

    def read(self, tok) -> Notes:
        """Its notes as the tokenizer `tok` reads MIDI: what a job is handed."""
        return tok.read(self.path)[0]


def upload_piece(data: Path, upload_id: str, field: str) -> Piece:
    path = data / "uploads" / f"{upload_id}.mid"
    if not SERVER_ID.match(upload_id) or not path.is_file():
        raise HTTPException(404, f"{field}: no upload {upload_id!r}; POST /api/uploads first")
    info = json.loads(path.with_suffix(".json").read_text())
    return Piece(path, info["name"], info["seconds"])


def result_piece(data: Path, ref: PrimerFromJob, field: str) -> Piece:
    record = stored_record(data, ref.job)
    path = data / "jobs" / ref.job / f"sample-{ref.variation}.mid" if record else None
    v = stored_variation(record, ref.variation) if path and path.is_file() else None
    if v is None:
        raise HTTPException(404, f"{field}: no finished job {ref.job!r} with variation {ref.variation}")
    return Piece(path, f"job {ref.job}", max((n[1] for n in v["note_list"]), default=0.0))


def checked_settings(settings: dict, styles: list[str], limits) -> dict:
    """The settings as SamplingConfig validates them, within the server's `limits`: a 422 naming the
    field and its valid range otherwise."""
    def bad(name: str, msg: str) -> NoReturn:
        refuse(("body", "settings", name), f"{name} {msg}")

    settings = {"seconds": 10.0, **settings} if "max_tokens" not in settings else dict(settings)
    try:
        cfg = SamplingConfig.from_dict(settings)
    except SettingError as e:
        bad(e.field, e.reason)
    except TypeError as e:
        bad("settings", f"are not SamplingConfig fields ({e})")
    if cfg.style is not None and cfg.style not in styles:
        bad("style", f"must be one of {', '.join(styles) or '(this model has no styles)'}, got {cfg.style!r}")
    if cfg.num_samples > limits.max_variations:
        bad("num_samples", f"must be in [1, {limits.max_variations}] on this server, got {cfg.num_samples}")
    if cfg.seconds is not None and cfg.seconds > limits.max_seconds:
        bad("seconds", f"must be in (0, {limits.max_seconds:g}] on this server, got {cfg.seconds}")
    if cfg.token_budget() > limits.max_tokens:
        bad("max_tokens", f"must be in [1, {limits.max_tokens}] on this server, got {cfg.token_budget()}")
    return cfg.to_dict()


def submit(jobs: JobQueue, job: Job) -> dict:
    """Queue `job` -> its public record; a full queue is a 429 with Retry-After."""
    try:
        return jobs.submit(job).public()
    except QueueFull as e:
        raise HTTPException(429, str(e), headers={"Retry-After": "5"}) from None
