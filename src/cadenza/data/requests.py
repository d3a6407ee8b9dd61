"""What an infill or an accompaniment asks of the sampler, built from `Notes` for one tokenizer.

* `infill_request`: the notes before a span are the prompt, those after it are given as controls;
* `accompany_request`: the melody of the notes (`anticipation.melody`) is given as controls.

Each says where the new notes may start and stop (in the tokenizer's steps), and which input notes
come back exactly (`given_mask`: the one matcher of "which notes were given").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cadenza.data.anticipation import melody
from cadenza.data.keys import estimate_key
from cadenza.data.meter import Meter
from cadenza.data.midi import DRUMS, Notes
from cadenza.data.tokenizers.note_grid import GridNotes, Plan


@dataclass
class Request:
    """What an infill or an accompaniment asks of the sampler: the prompt's ids (after the window
    prefix: BOS, then the given music so far), the plan that places the given notes, the clock at
    the prompt's end and where the new notes must stop (in steps), the input notes that come out
    exactly as they went in, the task ("infill" or "accompany"), the key of the given music (an
    index into `keys.KEYS`) and the input's meter (which times the new notes, on a metrical grid)."""

    prompt: np.ndarray
    plan: Plan
    clock: int
    stop: int
    given: Notes
    task: str
    key: int | None = None
    meter: Meter | None = None

    @property
    def anticipate(self) -> bool:
        return len(self.plan.controls) > 0


def infill_request(tok, notes: Notes, start: float, end: float) -> Request:
    """Rewrite the notes starting in [start, end) seconds: those before are the prompt, those from
    `end` on are given as controls; notes sounding across either edge are kept whole."""
    length = float(notes.end.max()) if len(notes) else 0.0
    if not 0 <= start < end:
        raise ValueError(f"infill span {start:g}:{end:g} must have 0 <= start < end (seconds)")
    if start >= length:
        raise ValueError(f"infill span {start:g}:{end:g} starts after the piece ends ({length:.1f} s)")
    a, b = (int(tok.steps_at(notes, np.array(t))) for t in (start, end))
    g, _ = tok.quantize(notes)
    onset = tok.steps_at(notes, notes.start)
    given = notes.take((onset < a) | (onset >= b))
    key = key_of(given)
    return _request(tok, g.take(g.onset < a), g.take(g.onset >= b), given, a, b, "infill", key, notes.meter)


def accompany_request(tok, notes: Notes, live: bool = False) -> Request:
    """Write voices under the melody of `notes` (`melody`), which is given as controls; the
    other notes of the input are left out. `live`: each melody note answered where it sounds, with
    no view of the bars ahead (as when the melody is being played), where the vocabulary could
    look ahead."""
    g, _ = tok.quantize(notes)
    tune = melody(g)
    if not tune.any():
        raise ValueError("no melody to accompany: the file has no pitched notes")
    controls = g.take(tune)
    given = notes_at(tok, notes, g, tune)
    return _request(tok, GridNotes.empty(g), controls, given, 0, int(controls.end.max()),
                    "accompany_live" if live else "accompany", key_of(given), notes.meter)


def given_mask(notes: Notes, given: Notes | GridNotes, steps_per_second: float) -> np.ndarray:
    """Which of `notes` are among `given` (notes in seconds, or grid notes in steps of
    1/`steps_per_second`): matched by onset step, instrument and pitch. The one matcher behind every
    "which notes were given" (a request's kept notes, a sample's given ones, a melody's notes)."""
    if isinstance(given, GridNotes):
        onset, program = given.onset, given.program
    else:
        onset, program = np.floor(given.start * steps_per_second + 0.5).astype(np.int64), given.programs
    keys = (onset << 16) | (program << 7) | given.pitch
    steps = np.floor(notes.start * steps_per_second + 0.5).astype(np.int64)
    return np.isin((steps << 16) | (notes.programs << 7) | notes.pitch, keys)


def notes_at(tok, notes: Notes, g: GridNotes, mask: np.ndarray) -> Notes:
    """The notes of `notes` (as read) that became the grid notes `mask` picks of `g`, its
    quantisation by `tok`."""
    picked = g.take(mask)
    keys = (picked.onset << 16) | (picked.program << 7) | picked.pitch
    steps = tok.steps_at(notes, notes.start)
    return notes.take(np.isin((steps << 16) | (notes.programs << 7) | notes.pitch, keys))


def key_of(notes: Notes) -> int | None:
    """The key of `notes` (an index into `keys.KEYS`; drums left out), or None."""
    pitched = notes.programs != DRUMS
    return estimate_key(notes.pitch[pitched], (notes.end - notes.start)[pitched])


def _request(tok, prefix: GridNotes, controls: GridNotes, given: Notes, events_from: int, stop: int, task: str,
             key: int | None, meter: Meter | None) -> Request:
    controls.velocity = np.zeros_like(controls.velocity)
    anticipate = len(controls) > 0
    start = -tok.lead if anticipate else 0
    clock = int(prefix.onset[-1]) if len(prefix) else start
    placed = int(np.count_nonzero(controls.onset - tok.lead <= clock))  # written before the prompt ends
    previews = anticipate and tok.previews(task)
    body = tok.encode_prompt(prefix, controls.take(slice(0, placed)), anticipate, controls if previews else None)
    plan = Plan(controls=controls, placed=placed, events_from=events_from, events_until=stop, previews=previews,
                under=task.startswith("accompany"))
    return Request(np.concatenate([[tok.bos_id], body]).astype(np.int64), plan, clock, stop, given,
                   task if anticipate else "autoregress", key, meter)
