"""`cadenza.render`: one MIDI file -> WAV, piano-roll PNG and (with MuseScore) a score PNG."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cadenza.data.midi import MidiReadError, read_notes
from cadenza.env.tools import find_musescore
from cadenza.listen.audio import BACKENDS, SAMPLE_RATE, describe_backend, synthesize, write_wav
from cadenza.listen.pianoroll import piano_roll
from cadenza.listen.score import render_score
from cadenza.settings import setting, validate


@dataclass
class RenderConfig:
    """The audio settings of a render, each with its valid range."""

    sample_rate: int = setting(SAMPLE_RATE, ge=8000, le=192000, doc="WAV sample rate in Hz")
    backend: str = setting("auto", choices=BACKENDS,
                           doc="auto: FluidSynth when installed, else midirenderer (pip), else numpy")


def render_file(path: str | os.PathLike, wav: bool = True, png: bool = True, score: bool = False,
                soundfont: str | os.PathLike | None = None, out_dir: str | os.PathLike | None = None,
                sample_rate: int = SAMPLE_RATE, backend: str = "auto") -> dict[str, Path]:
    """Render one MIDI file to ``<stem>.wav``, ``<stem>.png`` (piano roll), ``<stem>.score.png``.

    Files go to ``out_dir`` (default: beside the MIDI file). Returns {"wav"|"png"|"score": path}
    for what was written; "score" is missing when MuseScore is absent.
    """
    validate(RenderConfig(sample_rate, backend))
    path = Path(path)
    out = Path(out_dir) if out_dir is not None else path.parent
    notes = read_notes(path)[0]  # read first: a file that is not MIDI is refused before anything is written
    written: dict[str, Path] = {}
    if wav:  # every instrument on its program: synthesize reads the file's programs and drums itself
        audio, _ = synthesize(path, sample_rate, soundfont, backend)
        written["wav"] = write_wav(audio, out / f"{path.stem}.wav", sample_rate)
    if png:
        piano_roll(notes, out / f"{path.stem}.png", title=path.name)
        written["png"] = out / f"{path.stem}.png"
    if score and (p := render_score(path, out / f"{path.stem}.score.png")) is not None:
        written["score"] = p
    return written


@dataclass
class RenderResult:
    written: list[dict[str, Path]] = field(default_factory=list)  # per rendered file: {"wav"|"png"|"score": path}
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, reason) of files that are not MIDI
    notes: list[str] = field(default_factory=list)  # the audio backend used; what was missing and how to get it


def render(files, *, wav: bool = True, png: bool = True, score: bool = False,
           soundfont: str | os.PathLike | None = None, out_dir: str | os.PathLike | None = None,
           sample_rate: int = SAMPLE_RATE, backend: str = "auto") -> RenderResult:
    """`render_file` for one file or many; a file that cannot be read is skipped and named."""
    validate(RenderConfig(sample_rate, backend))
    files = [files] if isinstance(files, (str, os.PathLike)) else list(files)
    res = RenderResult()
    if wav:
        res.notes.append(describe_backend(soundfont, backend))
    if score and find_musescore() is None:
        res.notes.append("note: MuseScore 3 not found, no score PNG (apt-get install musescore3)")
    for f in files:
        try:
            res.written.append(render_file(f, wav=wav, png=png, score=score, soundfont=soundfont, out_dir=out_dir,
                                           sample_rate=sample_rate, backend=backend))
        except MidiReadError as e:
            res.skipped.append((str(f), str(e)))
    return res
