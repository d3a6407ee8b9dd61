"""Working with music the client has: fill a span of a piece, accompany a melody.

`POST /api/infill` rewrites the notes of an upload or of a finished job's variation that start in a
span and keeps every other note; `POST /api/accompany` writes voices under a melody: an upload's
(its lead part, or its top line), a finished variation's top line, or notes played in and posted as
JSON. Both are jobs like `POST /api/jobs` (the same queue, events and files); only a model whose
vocabulary knows given notes can run them (`ModelEntry.tasks`). The server turns ids into files,
reads them with the model's tokenizer and hands the job its notes (`Infill`, `Accompany`); a
melody the server made (played in, a variation's top line) is saved with the job's files.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException

from cadenza.data import anticipation
from cadenza.data.midi import Notes
from cadenza.data.requests import notes_at
from cadenza.generation.config import SamplingConfig
from cadenza.generation.prompt import Accompany, Infill, Prompt
from cadenza.studio.contract import JobOut, errors, refuse
from cadenza.studio.jobs import Job, JobQueue
from cadenza.studio.registry import ModelEntry, Registry, UnknownModel
from cadenza.studio.requests import (
    AccompanyRequest,
    InfillRequest,
    Piece,
    checked_settings,
    result_piece,
    submit,
    upload_piece,
)


def edit_routes(app: FastAPI, jobs: JobQueue, registry: Registry, data: Path, limits) -> None:
    @app.post("/api/infill", status_code=202, responses=errors(400, 404, 422, 429),
              summary="Rewrite the notes of an upload or a job's variation that start in a span; keep the rest")
    def infill(req: InfillRequest) -> JobOut:
        entry = _model(registry, req.model, "infill")
        settings = checked_settings(req.settings, entry.styles, limits)
        piece = _one_piece(data, req.upload, req.result, "upload or result: the piece to fill")
        _check_span(req.start, req.end, piece, limits.max_seconds)
        source = {"task": "infill", "span": [req.start, req.end], "name": piece.name, "end": piece.end}
        task = Infill(piece.read(entry.tokenizer), req.start, req.end)
        _check_budget(entry, task, settings, limits, "end")
        return submit(jobs, Job(entry.id, settings, task, source))

    @app.post("/api/accompany", status_code=202, responses=errors(400, 404, 422, 429),
              summary="Write voices under a melody: an upload's, a job's top line, or notes played in")
    def accompany(req: AccompanyRequest) -> JobOut:
        entry = _model(registry, req.model, "accompany")
        settings = checked_settings(req.settings, entry.styles, limits)
        if req.notes is None:
            piece = _one_piece(data, req.upload, req.result, "upload, result or notes: the melody")
            if req.upload is not None:  # its melody as the library hears it: its lead part, or its top line
                melody, name, made, field = piece.read(entry.tokenizer), piece.name, False, "upload"
                _check_melody(_line(entry, melody, anticipation.melody), field, limits)
            else:
                melody, name, made, field = _top_line(entry, piece), f"top line of {piece.name}", True, "result"
                _check_melody(melody, field, limits)
        elif req.upload is not None or req.result is not None:
            refuse(("body", "notes"), "give exactly one of upload, result or notes: the melody")
        else:
            melody, name, made, field = _recorded(req, limits), f"played melody ({len(req.notes)} notes)", True, "notes"
        source = {"task": "accompany", "name": name, "end": melody.duration}
        task = Accompany(melody)
        _check_budget(entry, task, settings, limits, field)
        return submit(jobs, Job(entry.id, settings, task, source, keeps_melody=made))


def _model(registry: Registry, model_id: str, task: str) -> ModelEntry:
    try:
        entry = registry.get(model_id)
    except UnknownModel:
        raise HTTPException(404, f"model: unknown model {model_id!r}; GET /api/models lists them") from None
    if task not in entry.tasks:
        refuse(("body", "model"), f"model {model_id} cannot {task}: its vocabulary has "
               "no given notes; use a model trained on `--tokenizer notes`, such as "
               "the shipped styles model")
    return entry


def _one_piece(data: Path, upload: str | None, result, what: str) -> Piece:
    """The one piece a request names, by an upload id or a finished job's variation."""
    if (upload is None) == (result is None):
        refuse(("body", "upload"), f"give exactly one of {what}")
    return upload_piece(data, upload, "upload") if upload is not None else result_piece(data, result, "result")


def _check_span(start: float, end: float, piece: Piece, longest: float) -> None:
    if not end > start:
        refuse(("body", "end"), f"end must be after start ({start:g} s), got {end:g}")
    if start >= piece.end:
        refuse(("body", "start"), f"start must be before the piece ends ({piece.end:.2f} s), got {start:g}")
    if end - start > longest:
        refuse(("body", "end"), f"the span must be at most {longest:g} s on this server, got {end - start:g}")


def _check_budget(entry: ModelEntry, task: Infill | Accompany, settings: dict, limits, field: str) -> None:
    """An infill or an accompaniment runs to where its new notes stop, whatever the settings'
    length: refuse one whose tokens would pass the server's limit, or whose music has nothing to
    give (a melody of notes too short to hear), before it is queued."""
    try:
        prompt = Prompt.encode(entry.tokenizer, task, settings.get("style"))
    except ValueError as e:
        refuse(("body", field), str(e).splitlines()[0])
    need = prompt.decoding(SamplingConfig.from_dict(settings)).max_tokens
    if need > limits.max_tokens:
        refuse(("body", field), f"this needs up to {need} tokens per variation, and this server writes at most "
               f"{limits.max_tokens}: a shorter span or melody")


def _check_melody(melody: Notes, field: str, limits) -> None:
    """An accompaniment is as long as its melody: within the server's limits on new music."""
    if melody.duration > limits.max_seconds or len(melody) > limits.max_melody_notes:
        refuse(("body", field), f"the melody has {len(melody)} notes over {melody.duration:.0f} s; this server "
               f"accompanies at most {limits.max_melody_notes} notes over {limits.max_seconds:g} s")


def _recorded(req: AccompanyRequest, limits) -> Notes:
    """The posted melody as `Notes`, within the server's limits on notes and seconds."""
    notes = req.notes
    if len(notes) > limits.max_melody_notes:
        refuse(("body", "notes"), f"notes: at most {limits.max_melody_notes} on this server, got {len(notes)}")
    for i, n in enumerate(notes):
        if n.end > limits.max_seconds:
            refuse(("body", "notes", i, "end"),
                   f"end must be at most {limits.max_seconds:g} s on this server, got {n.end:g}")
    return Notes.from_arrays([n.start for n in notes], [n.end for n in notes], [n.pitch for n in notes],
                             [n.velocity for n in notes])


def _top_line(entry: ModelEntry, piece: Piece) -> Notes:
    """A piece's top line as the model's tokenizer hears it (`cadenza.data.anticipation.top_line`):
    at each onset its highest note, unless an earlier one still sounds above it. One part, so that
    the whole line is the melody the model accompanies."""
    line = _line(entry, piece.read(entry.tokenizer), anticipation.top_line)
    if not len(line):
        refuse(("body", "result"), "result has no pitched notes: no melody to accompany")
    return Notes.from_arrays(line.start, line.end, line.pitch, line.velocity)


def _line(entry: ModelEntry, notes: Notes, pick) -> Notes:
    """The notes of `notes` that `pick` (`anticipation.melody` or `top_line`) chooses on the grid of
    the model's tokenizer."""
    tok = entry.tokenizer
    g, _ = tok.quantize(notes)
    return notes_at(tok, notes, g, pick(g))
