"""Piano-roll pictures: pitch over time, velocity as colour (given notes apart), always 1000 x 400
pixels."""

from __future__ import annotations

import io
import math
import os

import numpy as np

from cadenza.atomic import write_bytes
from cadenza.data.midi import as_notes, note_name

FIGSIZE, DPI = (10.0, 4.0), 100  # piano rolls are always 1000 x 400 pixels


GIVEN = "#e4572e"  # the colour of given notes: a primer's, or those an infill or accompaniment kept


def piano_roll(notes, path: str | os.PathLike | None = None, title: str | None = None,
               seconds: float | None = None, given: np.ndarray | None = None) -> np.ndarray:
    """Draw notes as a piano roll; return the RGB image (H, W, 3) uint8 and write a PNG if ``path``.

    Pitch over time in seconds (x up to ``seconds``, default the piece's end), C's labelled
    (C4 = 60), velocity as colour with a colourbar; ``given`` (a mask over the notes) draws those
    notes in one colour of their own, named in a legend, so new music reads apart from what it was
    given. Always FIGSIZE * DPI = 1000 x 400 pixels, so TensorBoard (``add_image(...,
    dataformats="HWC")``) shows samples at one scale.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure  # no pyplot: no global figure state, any thread

    notes = as_notes(notes)
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if len(notes):
        lo, hi = int(notes.pitch.min()) - 2, int(notes.pitch.max()) + 2
    else:
        lo, hi = 58, 62
        ax.text(0.5, 0.5, "no notes", transform=ax.transAxes, ha="center", va="center", color="0.4")
    if hi - lo < 14:  # at least an octave, so some C is labelled
        mid = (lo + hi) // 2
        lo, hi = mid - 7, mid + 7
    x0, x1, y = notes.start, notes.end, notes.pitch.astype(np.float64)
    verts = np.stack([np.column_stack(c) for c in ((x0, y - 0.4), (x1, y - 0.4), (x1, y + 0.4), (x0, y + 0.4))], 1)
    kept = np.zeros(len(notes), bool) if given is None else np.asarray(given, bool)
    coll = PolyCollection(verts[~kept], array=notes.velocity[~kept].astype(np.float64), cmap="viridis",
                          edgecolors="none")
    coll.set_clim(0, 127)
    ax.add_collection(coll)
    fig.colorbar(coll, ax=ax, pad=0.01, fraction=0.04).set_label("velocity")
    if kept.any():
        ax.add_collection(PolyCollection(verts[kept], facecolors=GIVEN, edgecolors="none", label="given"))
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlim(0, seconds or max(notes.duration, 1.0))
    ax.set_ylim(lo - 0.5, hi + 0.5)
    cs = list(range(math.ceil(lo / 12) * 12, hi + 1, 12))
    ax.set_yticks(cs, [note_name(c) for c in cs])
    ax.set_yticks(range(lo, hi + 1), minor=True)
    ax.grid(axis="y", which="major", color="0.85", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("pitch")
    if title:
        ax.set_title(title)
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    if path is not None:
        from PIL import Image  # a matplotlib dependency

        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="png")  # the very pixels returned, as RGB
        write_bytes(path, buf.getvalue())
    return image
