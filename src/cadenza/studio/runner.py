"""Running one studio job: sample with a loaded model, stream its notes, write its files.

While tokens arrive, the notes of every variation so far are decoded a few times a second and sent
as a `notes` event, so the page draws the music as it is sampled. The result (MIDI and WAV of each
variation, `job.json`) is written atomically into the job's own folder under the server's data
folder, named by the server: it is the history a reloaded page lists again.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadenza.atomic import atomic_dir, write_json
from cadenza.data.midi import Notes, write_midi
from cadenza.generation import compiled
from cadenza.generation.config import SamplingConfig
from cadenza.generation.generate import Generation, sample
from cadenza.generation.prompt import Continue, Prompt
from cadenza.generation.sampler import warm_window_slide
from cadenza.listen.audio import synthesize, write_wav
from cadenza.studio.jobs import Job
from cadenza.studio.registry import Registry

STREAM_EVERY = 0.12  # seconds between two `notes` events of a running job
SUMMARY = "summary.json"  # job.json without the note lists
MELODY = "melody.mid"  # a melody the server made for a job (played in, a top line), among its files


def notes_json(notes: Notes) -> list[list[float]]:
    """[[start, end, pitch, velocity], ...] in the notes' order, times rounded to milliseconds."""
    return [[round(float(s), 3), round(float(e), 3), int(p), int(v)]
            for s, e, p, v in zip(notes.start, notes.end, notes.pitch, notes.velocity)]


def bars_json(notes: Notes) -> list[float]:
    """Where each bar of `notes` starts (seconds, to the ms), then the line that closes the last: the
    bar lines the page draws and snaps a span to. None known (notes without a meter): []."""
    m = notes.meter
    if m is None or not len(notes):
        return []
    return [round(float(t), 3) for t in m.seconds(m.bar_starts(float(m.quarters(notes.duration)) - 1e-9))]


class _Stream:
    """The `on_tokens` callback of a job: checks for cancelling after every token, and sends the
    notes of each variation so far every STREAM_EVERY seconds, saying which of them are new: those
    the model wrote, not given (`Prompt.given_of`: the primer's, or those an infill or an
    accompaniment keeps exactly)."""

    def __init__(self, job: Job, prompt: Prompt):
        self.job, self.prompt, self.pad, self.last = job, prompt, prompt.tokenizer.pad_id, 0.0

    def __call__(self, first: int, tokens) -> None:
        self.job.check()
        now = time.monotonic()
        if now - self.last < STREAM_EVERY:
            return
        self.last = now
        for r, new in enumerate(tokens.tolist()):
            self.send(first + r, self.prompt.notes_of([t for t in new if t != self.pad]), len(new))

    def send(self, variation: int, notes: Notes, tokens: int) -> tuple[list, list, list]:
        """Emit a `notes` event: the notes in onset order, which of them are new, and the bar lines
        (where the notes have a meter). -> all three"""
        notes = notes.by_time()
        rows, new, bars = notes_json(notes), (~self.prompt.given_of(notes)).astype(int).tolist(), bars_json(notes)
        self.job.emit("notes", variation=variation, notes=rows, new=new, bars=bars, tokens=tokens)
        return rows, new, bars


@dataclass
class Runner:
    registry: Registry
    data: Path
    sample_rate: int = 22050

    def __call__(self, job: Job) -> dict[str, Any]:
        checkpoint = self.registry.load(job.model)
        cfg = SamplingConfig.from_dict(job.settings)
        # the stream decodes with its tokenizer and primer as tokens arrive
        prompt = Prompt.encode(checkpoint.tokenizer, job.task or Continue(), cfg.style, cfg)
        stream = _Stream(job, prompt)
        # A job never waits for a compiler: it uses a compiled step only once `warm_up` has built it.
        gen = sample(checkpoint, cfg, prompt, on_tokens=stream, build_compiled=False)
        job.check()
        # The last notes of every variation: a generation faster than STREAM_EVERY streams none.
        final = [stream.send(k, notes, len(ids)) for k, (notes, ids) in enumerate(zip(gen.notes, gen.ids))]
        return self._write(job, gen, final)

    def _write(self, job: Job, gen: Generation, final: list[tuple[list, list]]) -> dict[str, Any]:
        """sample-K.mid and sample-K.wav per variation, and job.json with each variation's `final`
        notes and new-note flags, into the job's folder (with the melody the job was given, where the
        server made it)."""
        variations, folder = [], self.data / "jobs" / job.id
        with atomic_dir(folder) as tmp:
            for k, (score, notes, stats, (rows, new, bars)) in enumerate(zip(gen.scores, gen.notes, gen.stats,
                                                                            final)):
                job.check()  # a cancel while rendering stops before the next variation, and leaves no folder
                write_midi(score, tmp / f"sample-{k}.mid")
                audio, backend = synthesize(notes, sample_rate=self.sample_rate)
                write_wav(audio, tmp / f"sample-{k}.wav", self.sample_rate)
                variations.append({"index": k, "notes": stats["notes"], "seconds": stats["seconds"],
                                   "tokens": stats["tokens"], "audio": backend, "bars": bars, "note_list": rows,
                                   "note_new": new})
            if job.keeps_melody:
                write_midi(job.task.notes, tmp / MELODY)
            summary = {"id": job.id, "model": job.model, "settings": job.settings, "created": job.created,
                       "started": job.started, "finished": time.time(), "primer": job.source,
                       "tokens_per_s": gen.run["tokens_per_s"], "variations": variations}
            write_json(tmp / "job.json", summary)
            write_json(tmp / SUMMARY, _without_notes(summary))  # what the history and a job's status read
        return _without_notes(summary)


def _without_notes(summary: dict[str, Any]) -> dict[str, Any]:
    return {**summary, "variations": [{k: v for k, v in x.items() if k not in ("note_list", "note_new")}
                                      for x in summary["variations"]]}


def history(data: Path, limit: int = 50) -> list[dict[str, Any]]:
    """The newest `limit` finished jobs kept in the data folder, newest first, from their small
    summaries (a job.json, with every note of every variation, can be megabytes)."""
    root = data / "jobs"
    folders = [p for p in root.iterdir() if SERVER_ID.match(p.name)] if root.is_dir() else []
    jobs = []
    for folder in sorted(folders, key=lambda p: p.stat().st_mtime_ns, reverse=True):  # written as it finished
        if len(jobs) == limit:
            break
        if (summary := _summary(folder)) is not None:
            jobs.append(summary)
    return sorted(jobs, key=lambda j: -j["created"])


def _summary(folder: Path) -> dict[str, Any] | None:
    """A job folder's summary.json; for a folder from before summaries, its job.json without notes."""
    for name in (SUMMARY, "job.json"):
        try:
            record = json.loads((folder / name).read_text())
        except FileNotFoundError:
            continue
        except (OSError, json.JSONDecodeError):
            return None
        return _without_notes(record)
    return None


SERVER_ID = re.compile(r"^[0-9a-f]{12}$")  # the ids the server hands out (jobs, uploads)


def job_folder(data: Path, job_id: str) -> Path | None:
    """The folder of a finished job (one with its job.json), or None. Only an id of the server's own
    form is joined to the data folder, so a client's string never becomes a path."""
    folder = data / "jobs" / job_id if SERVER_ID.match(job_id) else None
    return folder if folder is not None and (folder / "job.json").is_file() else None


def stored_record(data: Path, job_id: str) -> dict[str, Any] | None:
    """A finished job's job.json, note lists included, or None (`job_folder`)."""
    folder = job_folder(data, job_id)
    try:
        return json.loads((folder / "job.json").read_text()) if folder is not None else None
    except (OSError, json.JSONDecodeError):
        return None


def stored_summary(data: Path, job_id: str) -> dict[str, Any] | None:
    """A finished job's job.json without its note lists, or None (`job_folder`)."""
    folder = job_folder(data, job_id)
    return None if folder is None else _summary(folder)


def stored_variation(record: dict[str, Any], variation: int) -> dict[str, Any] | None:
    """Variation `variation` of a job's record, with `note_new` (1 for each note the model wrote;
    a job from before the flags: all of them), or None."""
    for x in record["variations"]:
        if x["index"] == variation:
            return {"note_new": [1] * len(x["note_list"]), **x}
    return None


def stored_job(data: Path, job_id: str) -> Job | None:
    """A finished job rebuilt from its folder, for one the server no longer keeps in memory (or ran
    before a restart): done, with its result as its one event."""
    summary = stored_summary(data, job_id)
    if summary is None:
        return None
    job = Job(summary["model"], summary["settings"], id=job_id, status="done", created=summary["created"],
              started=summary.get("started"), finished=summary.get("finished"), result=summary)
    job.emit("done", result=summary)
    return job


# The page's default generation is one variation with a style and guidance (two rows: guided and
# unguided), then one row without a style.
WARM_ROWS = (2, 1)


def warm_up(registry: Registry, model_id: str, rows=WARM_ROWS, status: dict | None = None,
            compile: bool = True) -> None:
    """Prepare `model_id` for the page's common batch shapes, in the background: feed one window
    slide through the eager model (`warm_window_slide`), render one note (`_warm_audio`), and with
    `compile` build (or load from the disk cache) the compiled decode step; jobs decode eagerly until
    it is ready. `status` ("compiled_step", shown by /api/health) goes building -> ready, or says why
    decoding stays eager: a client that measures speed waits for "ready" (a build takes about 20 s a
    shape on 2 cores)."""
    status = status if status is not None else {}
    if compile:
        status["compiled_step"] = "building"
    model = _warm_eager(registry, model_id, rows)
    _warm_audio()
    compiled = _warm(model, rows) if compile else None
    if compile:
        status["compiled_step"] = compiled


def _warm_eager(registry: Registry, model_id: str, rows):
    """The model with a window slide fed for every row count, or None (and why, in the log)."""
    try:
        checkpoint = registry.load(model_id)
        model = checkpoint.model
        for r in rows:
            warm_window_slide(model, r, keep=len(checkpoint.tokenizer.window_prefix(None)))
    except Exception as e:  # a warm-up failure costs speed, never the server
        print(f"studio: could not warm up {model_id} ({type(e).__name__}: {e}); decoding eagerly", file=sys.stderr)
        return None
    return model


def _warm_audio(sample_rate: int = Runner.sample_rate) -> None:
    """Render one short note as a job renders its WAVs: the renderer's first use imports its modules
    and loads the SoundFont renderer, which the first job would otherwise wait for."""
    try:
        synthesize(Notes.from_arrays([0.0], [0.1], [60], [64]), sample_rate=sample_rate)
    except Exception as e:  # a warm-up failure costs speed, never the server
        print(f"studio: could not warm up audio rendering ({type(e).__name__}: {e})", file=sys.stderr)


def _warm(model, rows) -> str:
    """Getting the compiled step for the loaded `model` (None: it did not load); -> "ready", or
    "eager: " and why."""
    if model is None:
        return "eager: no model"
    try:
        if reason := compiled.unavailable_for(model):  # the machine's reason, else the model's
            return f"eager: {reason}"
        for r in rows:
            if compiled.load(model, r, quiet=True) is None:  # a failed build has warned with its reason
                return f"eager: the build for {r} rows failed (see the server's log)"
    except Exception as e:  # a warm-up failure costs speed, never the server
        print(f"studio: no compiled decode step ({type(e).__name__}: {e}); decoding eagerly", file=sys.stderr)
        return f"eager: {type(e).__name__}"
    return "ready"
