"""Anticipatory training windows: a stretch of a piece, a task, and the notes it gives as controls.

One model learns three tasks from one vocabulary (`cadenza.data.tokenizers.notes`):

* **autoregress**: the notes in order, no controls (continuing music from the left);
* **infill**: the notes of random time spans, or of everything after a random time, are given as
  controls (within what the window's tokens reach), so the model learns to write music that leads
  into what it knows comes next;
* **accompany**: the melody (`melody`) is given as controls and the model writes the other voices.

The same notes make what a generation asks for (`infill_request`, `accompany_request`).

`TaskMix` says how often each is drawn; the training run records it. A window starts at a random
onset of its piece (the piece's start, with BOS, one time in ten), its time re-based to 0; one
window in four is then cropped at a random token, so the model also reads windows that start
mid-note, as a generation past its context does.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np
import torch

from cadenza.data.dataset import WindowDataset
from cadenza.data.midi import DRUMS, Notes
from cadenza.data.tokenizers.note_grid import DURATIONS, GridNotes, Plan

TASKS = ("autoregress", "infill", "accompany")
AT_START = 0.1  # share of windows that start at their piece's beginning
CROPPED = 0.25  # share of windows cropped at a random token


@dataclass
class TaskMix:
    """How often each task is drawn (weights, normalised)."""

    autoregress: float = 0.4
    infill: float = 0.3
    accompany: float = 0.3

    def probabilities(self) -> np.ndarray:
        w = np.array([self.autoregress, self.infill, self.accompany], np.float64)
        if (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"task weights must be >= 0 and not all 0, got {asdict(self)}")
        return w / w.sum()


def melody(g: GridNotes) -> np.ndarray:
    """Which notes are the melody: where the (non-drum) instruments differ, the lead instrument's
    notes (the one playing highest, by median pitch); else the top line, the highest note
    starting at each onset unless a higher one still sounds."""
    pitched = g.program != DRUMS
    programs = np.unique(g.program[pitched])
    if programs.size > 1:
        lead = max(programs, key=lambda p: (np.median(g.pitch[g.program == p]), np.sum(g.program == p)))
        return g.program == lead
    return top_line(g) & pitched


def top_line(g: GridNotes) -> np.ndarray:
    """The skyline of onset-ordered notes: at each onset its highest starting note, kept unless a
    note that started earlier is still sounding above it."""
    keep = np.zeros(len(g), bool)
    if not len(g):
        return keep
    pitch = np.where(g.program == DRUMS, -1, g.pitch)
    end = g.end
    firsts = np.flatnonzero(np.diff(g.onset, prepend=g.onset[0] - 1))
    bounds = np.append(firsts, len(g))
    longest = int(DURATIONS[-1])
    for a, b in itertools.pairwise(bounds):
        t = g.onset[a]
        top = a + int(np.argmax(pitch[a:b]))
        if pitch[top] < 0:
            continue
        lo = np.searchsorted(g.onset, t - longest)  # no note that started before this still sounds
        earlier = slice(lo, a)
        held = (end[earlier] > t) & (pitch[earlier] > pitch[top])
        keep[top] = not held.any()
    return keep


def choose_controls(g: GridNotes, task: str, rng: np.random.Generator, horizon: int | None = None) -> np.ndarray | None:
    """The mask of notes a training window gives as controls for `task` (None: no controls).
    An infill gives everything from a time before `horizon` on (steps; the last onset the window's
    tokens reach, so that the model sees where the given notes start), as an infill's suffix is, or
    spans of 2-10 s after every 1-8 s of music to write, over the whole window."""
    if task == "autoregress" or len(g) < 2:
        return None
    if task == "accompany":
        given = melody(g)
        if 0 < given.sum() <= 0.8 * len(g):  # a melody with voices to write under it
            return given
    end = int(g.onset[-1]) if horizon is None else min(int(g.onset[-1]), horizon)
    if rng.random() < 0.5:  # infill, and an accompaniment of a piece that is all melody
        given = g.onset >= int(rng.integers(0, end + 1))
    else:
        given = np.zeros(len(g), bool)
        t = int(rng.integers(0, 800))
        while t <= g.onset[-1]:
            length = int(rng.integers(200, 1000))
            given |= (g.onset >= t) & (g.onset < t + length)
            t += length + int(rng.integers(100, 800))
    return given if given.any() else None


def horizon(tok, g: GridNotes, tokens: int) -> int:
    """The onset (steps) of the last note of `g` whose plain encoding fits in `tokens` ids."""
    ids = tok.encode_grid(g.take(slice(0, tokens // 2)))  # a note takes 2 ids or more: no more can fit
    seen = int(np.count_nonzero((ids[:tokens] >= tok.note_offset) & (ids[:tokens] < tok.control_offset)))
    return int(g.onset[max(seen - 1, 0)]) if len(g) else 0


def training_windows(store, split: str, context: int, tokenizer, tasks: TaskMix | None = None,
                     **kwargs) -> WindowDataset:
    """The windows a model trains on: anticipatory ones (drawn from `tasks`) for a tokenizer that
    anticipates, else plain windows of the store's ids."""
    if tokenizer.anticipates:
        return AnticipationWindows(store, split, context, tokenizer=tokenizer, tasks=tasks, **kwargs)
    return WindowDataset(store, split, context, tokenizer=tokenizer, **kwargs)


def window_ids(tok, g: GridNotes, given: np.ndarray | None, at_start: bool, at_end: bool) -> np.ndarray:
    """A training window's ids after its style token: [task] [BOS] notes (the `given` ones as
    controls, without loudness) [EOS], as the tokenizer interleaves them."""
    head = [tok.task_id(given is not None)] + ([tok.bos_id] if at_start else [])
    if given is None:
        body = tok.encode_grid(g)
    else:
        controls = g.take(given)
        controls.velocity = np.zeros_like(controls.velocity)
        body = tok.encode_grid(g.take(~given), controls, clock=-tok.lead)
    return np.concatenate([head, body, [tok.eos_id] if at_end else []]).astype(np.int64)


class AnticipationWindows(WindowDataset):
    """Training windows for a tokenizer that anticipates (`Tokenizer.anticipates`): pieces are
    read from the store as notes, and every window is built by `TaskMix` as the module says.
    Augmentation transposes pitches (never drums) and stretches time, on the notes."""

    def __init__(self, *args, tasks: TaskMix | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.tasks = tasks or TaskMix()
        self.p = self.tasks.probabilities()
        self._notes: dict[int, GridNotes] = {}

    def notes(self, k: int) -> GridNotes:
        """Piece k's notes (decoded once per process)."""
        if k not in self._notes:
            p = self.pieces[k]
            self._notes[k] = self.tok.decode_grid(self.store.tokens[p.start:p.start + len(p)], clock=0)[0]
        return self._notes[k]

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, int(i)])
        k = self.pick_piece(rng)
        g = self.notes(k)
        need = self.context + 1 - self.styled - 1  # the style and task tokens open the window
        start = 0 if rng.random() < AT_START or len(g) < 2 else int(rng.integers(0, len(g)))
        first = int(np.searchsorted(g.onset, g.onset[start]))
        window = g.take(slice(first, first + need))  # a note takes 2 tokens or more: enough
        window = self._augment(window.shifted(-int(window.onset[0])) if len(window) else window, rng)
        task = TASKS[int(rng.choice(len(TASKS), p=self.p))]
        reach = horizon(self.tok, window, need) if task != "autoregress" else None
        given = choose_controls(window, task, rng, reach)
        ids = self.sequence(window, given, at_start=first == 0, at_end=first + len(window) == len(g))
        if rng.random() < CROPPED and ids.size > need:
            ids = np.concatenate([ids[:1], ids[1 + int(rng.integers(0, ids.size - need)):]])
        out = np.full(need + 1, self.tok.pad_id, np.int64)
        out[:min(out.size, ids.size)] = ids[:out.size]
        return torch.from_numpy(self.with_style(out, k, rng))

    def sequence(self, g: GridNotes, given: np.ndarray | None, at_start: bool, at_end: bool) -> np.ndarray:
        return window_ids(self.tok, g, given, at_start, at_end)

    def _augment(self, g: GridNotes, rng: np.random.Generator) -> GridNotes:
        if self.stretch and len(g):
            factor = rng.uniform(1 - self.stretch, 1 + self.stretch)
            steps = np.floor(DURATIONS[g.duration] * factor + 0.5).astype(np.int64)
            duration = np.clip(np.searchsorted(DURATIONS, steps), 0, DURATIONS.size - 1)
            g = GridNotes(np.floor(g.onset * factor + 0.5).astype(np.int64), duration, g.program, g.pitch,
                          g.velocity)
        pitched = g.program != DRUMS
        if self.transpose and pitched.any():
            lo = max(-self.transpose, -int(g.pitch[pitched].min()))
            hi = min(self.transpose, 127 - int(g.pitch[pitched].max()))
            shift = int(rng.integers(lo, hi + 1)) if hi >= lo else 0
            g = GridNotes(g.onset, g.duration, g.program, np.where(pitched, g.pitch + shift, g.pitch), g.velocity)
        return g


@dataclass
class Request:
    """What an infill or an accompaniment asks of the sampler: the prompt's ids (after the window
    prefix: BOS, then the given music so far), the plan that places the given notes, the clock at
    the prompt's end and where the new notes must stop (in steps), and the input notes that come
    out exactly as they went in."""

    prompt: np.ndarray
    plan: Plan
    clock: int
    stop: int
    given: Notes
    anticipate: bool


def infill_request(tok, notes: Notes, start: float, end: float) -> Request:
    """Rewrite the notes starting in [start, end) seconds: those before are the prompt, those from
    `end` on are given as controls; notes sounding across either edge are kept whole."""
    sps = tok.steps_per_second
    length = float(notes.end.max()) if len(notes) else 0.0
    if not 0 <= start < end:
        raise ValueError(f"infill span {start:g}:{end:g} must have 0 <= start < end (seconds)")
    if start >= length:
        raise ValueError(f"infill span {start:g}:{end:g} starts after the piece ends ({length:.1f} s)")
    a, b = round(start * sps), round(end * sps)
    g, _ = tok.quantize(notes)
    onset = np.floor(notes.start * sps + 0.5)
    given = notes.take((onset < a) | (onset >= b))
    return _request(tok, g.take(g.onset < a), g.take(g.onset >= b), given, a, b)


def accompany_request(tok, notes: Notes) -> Request:
    """Write voices under the melody of `notes` (`melody`), which is given as controls; the
    other notes of the input are left out."""
    g, _ = tok.quantize(notes)
    tune = melody(g)
    if not tune.any():
        raise ValueError("no melody to accompany: the file has no pitched notes")
    controls = g.take(tune)
    return _request(tok, GridNotes.empty(), controls, notes_at(tok, notes, g, tune), 0, int(controls.end.max()))


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
    return notes.take(given_mask(notes, g.take(mask), tok.steps_per_second))


def _request(tok, prefix: GridNotes, controls: GridNotes, given: Notes, events_from: int, stop: int) -> Request:
    controls.velocity = np.zeros_like(controls.velocity)
    anticipate = len(controls) > 0
    start = -tok.lead if anticipate else 0
    clock = int(prefix.onset[-1]) if len(prefix) else start
    placed = int(np.count_nonzero(controls.onset - tok.lead <= clock))  # written before the prompt ends
    body = tok.encode_grid(prefix, controls.take(slice(0, placed)), clock=start)
    plan = Plan(controls=controls, placed=placed, events_from=events_from, events_until=stop)
    return Request(np.concatenate([[tok.bos_id], body]).astype(np.int64), plan, clock, stop, given, anticipate)
