"""What the studio serves besides JSON: uploads read like `prepare` reads files, and scores.

A score is engraved in two steps, both from PyPI: music21 quantises the MIDI and writes MusicXML,
verovio turns that into SVG. It is made on first request and kept beside the MIDI file. A server
engraves in a child process (`engrave`), one score at a time and within a deadline: engraving
takes time that grows with the music, and must not hold a request thread, nor outlive its deadline.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from cadenza.atomic import write_text
from cadenza.data.midi import Notes, load_score, score_to_notes


def read_upload(data: bytes, name: str) -> Notes:
    """The notes of an uploaded MIDI file, through the reader `cadenza prepare` uses; a
    `MidiReadError` (or ValueError) says why a file cannot be used."""
    if not data:
        raise ValueError(f"{name}: empty file")
    notes, _ = score_to_notes(load_score(data, name=name))
    if len(notes) == 0:
        raise ValueError(f"{name}: no notes (empty, or drums only)")
    return notes


def keep_uploads(folder: Path, most: int, most_bytes: int) -> None:
    """Remove the oldest uploads (each a .mid and its .json) until at most `most` are kept, of at
    most `most_bytes` together: a server that takes uploads from anyone must not fill its disk."""
    uploads = sorted(folder.glob("*.mid"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    total = 0
    for k, midi in enumerate(uploads):
        total += midi.stat().st_size + (midi.with_suffix(".json").stat().st_size if midi.with_suffix(".json").is_file()
                                        else 0)
        if k >= most or total > most_bytes:
            midi.with_suffix(".json").unlink(missing_ok=True)
            midi.unlink(missing_ok=True)


def score_svg(midi: Path, page_width: int = 2100) -> str:
    """The first page of an engraved score of a MIDI file, as SVG (cached as NAME.svg)."""
    cached = midi.with_suffix(".svg")
    if cached.is_file():
        return cached.read_text()
    import verovio
    from music21 import converter

    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="cadenza-score-") as d:
        xml = Path(d) / "score.musicxml"
        converter.parse(midi, quantizePost=True).write("musicxml", fp=str(xml))
        tk = verovio.toolkit()
        tk.setOptions({"pageWidth": page_width, "scale": 38, "adjustPageHeight": True, "header": "none",
                       "footer": "none", "breaks": "auto"})
        if not tk.loadFile(str(xml)):
            raise ValueError(f"{midi.name}: verovio could not read the score")
        svg = tk.renderToSVG(1)
    write_text(cached, svg)
    return svg


class ScoreError(ValueError):
    """Music that has no score: it could not be engraved, or not within the deadline."""


async def engrave(midi: Path, turn: asyncio.Semaphore, seconds: float, tmp: Path) -> str:
    """`score_svg` of `midi` in a child process, after the engravings before it (`turn`), killed
    after `seconds`; its temporary files (music21's and verovio's) go under `tmp`."""
    cached = midi.with_suffix(".svg")
    async with turn:
        if not cached.is_file():
            tmp.mkdir(parents=True, exist_ok=True)
            own = tempfile.mkdtemp(prefix="engrave-", dir=tmp)  # what a killed child leaves is removed here
            try:
                await _engrave(midi, seconds, own)
            finally:
                shutil.rmtree(own, ignore_errors=True)
    return cached.read_text()


async def _engrave(midi: Path, seconds: float, tmp: str) -> None:
    pipe, none = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "cadenza.studio.media", str(midi), stdin=none,
                                                stdout=none, stderr=pipe, env={**os.environ, "TMPDIR": tmp})
    try:
        _, err = await asyncio.wait_for(proc.communicate(), seconds)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise ScoreError(f"not engraved within {seconds:g} s") from None
    except BaseException:  # the request was cancelled (the server is stopping): the child stops with it
        proc.kill()
        await proc.wait()  # reaped here, not left to a closed event loop
        raise
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        raise ScoreError(lines[-1] if lines else f"the engraver exited with {proc.returncode}")


if __name__ == "__main__":  # the child process of `engrave`
    score_svg(Path(sys.argv[1]))
