"""What the studio serves besides JSON: uploads read like `prepare` reads files, and scores.

A score is engraved in two steps, both from PyPI: music21 quantises the MIDI and writes MusicXML,
verovio turns that into SVG. It is made on first request and kept beside the MIDI file.
"""

from __future__ import annotations

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
