"""Anticipatory training windows: a stretch of a piece, a task, and the notes it gives as controls.

One model learns three tasks from one vocabulary (`cadenza.data.tokenizers.notes`):

* **autoregress**: the notes in order, no controls (continuing music from the left);
* **infill**: the notes of random time spans, or of everything after a random time, are given as
  controls (within what the window's tokens reach), so the model learns to write music that leads
  into what it knows comes next;
* **accompany**: the melody (`melody`) is given as controls and the model writes the other voices.

The same rules make what a generation asks for (`cadenza.data.requests`).

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
from cadenza.data.keys import estimate_key
from cadenza.data.meter import Meter
from cadenza.data.midi import DRUMS
from cadenza.data.tokenizers.note_grid import GridNotes

TASKS = ("autoregress", "infill", "accompany")
AT_START = 0.1  # share of windows that start at their piece's beginning
CROPPED = 0.25  # share of windows cropped at a random token
NO_KEY = 0.2  # share of windows of a vocabulary with KEY tokens that are given no key
LIVE = 0.5  # share of accompaniments, in a vocabulary with lookahead, given no view of the next bar


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
    note that started earlier is still sounding above it (by more than the spacing of the duration
    grid at its length: a legato line whose lengths rounding made overlap is still one line)."""
    keep = np.zeros(len(g), bool)
    if not len(g):
        return keep
    pitch = np.where(g.program == DRUMS, -1, g.pitch)
    end = g.end
    firsts = np.flatnonzero(np.diff(g.onset, prepend=g.onset[0] - 1))
    bounds = np.append(firsts, len(g))
    longest = int(g.lengths[-1])
    # a length is rounded to its grid value: a legato line may overlap by one grid spacing, not a held note
    slack = np.append(np.diff(g.lengths), g.lengths[-1] - g.lengths[-2])
    for a, b in itertools.pairwise(bounds):
        t = g.onset[a]
        top = a + int(np.argmax(pitch[a:b]))
        if pitch[top] < 0:
            continue
        lo = np.searchsorted(g.onset, t - longest)  # no note that started before this still sounds
        earlier = slice(lo, a)
        held = (end[earlier] - t > slack[g.duration[earlier]]) & (pitch[earlier] > pitch[top])
        keep[top] = not held.any()
    return keep


def choose_controls(g: GridNotes, task: str, rng: np.random.Generator,
                    horizon: int | None = None) -> tuple[np.ndarray | None, str]:
    """The mask of notes a training window gives as controls for `task` (None: no controls), and
    the task that mask is (an accompaniment of a piece that is all melody becomes an infill). An
    infill gives everything from a time before `horizon` on (steps; the last onset the window's
    tokens reach, so that the model sees where the given notes start), as an infill's suffix is, or
    spans of 2-10 s after every 1-8 s of music to write, over the whole window; on a metrical grid
    the spans are 1-4 bars after every 1-4 bars, from bar line to bar line."""
    if task == "autoregress" or len(g) < 2:
        return None, "autoregress"
    if task == "accompany":
        given = melody(g)
        if 0 < given.sum() <= 0.8 * len(g):  # a melody with voices to write under it
            return given, "accompany"
    end = int(g.onset[-1]) if horizon is None else min(int(g.onset[-1]), horizon)
    if g.meter is not None:
        given = _bar_spans(g, rng, end)
    elif rng.random() < 0.5:
        given = g.onset >= int(rng.integers(0, end + 1))
    else:
        given = np.zeros(len(g), bool)
        t = int(rng.integers(0, 800))
        while t <= g.onset[-1]:
            length = int(rng.integers(200, 1000))
            given |= (g.onset >= t) & (g.onset < t + length)
            t += length + int(rng.integers(100, 800))
    return (given, "infill") if given.any() else (None, "autoregress")


def _bar_spans(g: GridNotes, rng: np.random.Generator, end: int) -> np.ndarray:
    """Given notes of a metrical window, from bar lines: everything from a bar line up to `end`
    on, or bars 1-4 long after every 1-4 bars."""
    lines = np.round(g.meter.bar_starts((int(g.onset[-1]) + 1) / g.tpq) * g.tpq).astype(np.int64)
    if rng.random() < 0.5:
        return g.onset >= lines[int(rng.integers(0, max(1, np.searchsorted(lines, end, side="right"))))]
    given = np.zeros(len(g), bool)
    k = int(rng.integers(1, 5))
    while k < lines.size - 1:
        n = int(rng.integers(1, 5))
        given |= (g.onset >= lines[k]) & (g.onset < lines[min(k + n, lines.size - 1)])
        k += n + int(rng.integers(1, 5))
    return given


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


def window_ids(tok, g: GridNotes, given: np.ndarray | None, at_start: bool, at_end: bool,
               task: str | None = None, key: int | None = None) -> np.ndarray:
    """A training window's ids after its style token: its task flag (and key, in a vocabulary that
    has them), [BOS], the notes (the `given` ones as controls, without loudness) [EOS], as the
    tokenizer interleaves them."""
    task = task or ("autoregress" if given is None else "infill")
    head = tok.task_prefix(task, key) + ([tok.bos_id] if at_start else [])
    controls = None
    if given is not None:
        controls = g.take(given)
        controls.velocity = np.zeros_like(controls.velocity)
        g = g.take(~given)
    body = tok.encode_window(g, controls, at_end, task)
    return np.concatenate([head, body, [tok.eos_id] if at_end else []]).astype(np.int64)


class AnticipationWindows(WindowDataset):
    """Training windows for a tokenizer that anticipates (`Tokenizer.anticipates`): pieces are
    read from the store as notes, and every window is built by `TaskMix` as the module says.
    Augmentation transposes pitches (never drums) and stretches time, on the notes."""

    def __init__(self, *args, tasks: TaskMix | None = None, pitch_ranges: dict | None = None,
                 transpose_styles: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.transpose_styles = set(transpose_styles) if transpose_styles else None  # None: every style
        # augmentation acts on the notes here, whether or not the tokenizer can move its ids
        self.transpose, self.stretch = int(kwargs.get("transpose", 0)), float(kwargs.get("stretch", 0.0))
        self.pitch_ranges = pitch_ranges or {}  # style -> (lowest, highest) pitch a transposition keeps to
        self.tasks = tasks or TaskMix()
        self.p = self.tasks.probabilities()
        self.keys = bool(getattr(self.tok, "has_keys", False))  # a vocabulary with KEY tokens
        self.lookahead = bool(getattr(self.tok, "lookahead", False))  # ... that shows the next bar's given notes
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
        origin = window_origin(g, start)
        first = int(np.searchsorted(g.onset, origin))
        window = g.take(slice(first, first + need))  # a note takes 2 tokens or more: enough
        style = self.pieces[k].style
        moves = self.transpose_styles is None or style in self.transpose_styles
        window = self._augment(window.shifted(-origin), rng, self.pitch_ranges.get(style, (0, 127)) if moves else None)
        task = TASKS[int(rng.choice(len(TASKS), p=self.p))]
        reach = horizon(self.tok, window, need) if task != "autoregress" else None
        given, task = choose_controls(window, task, rng, reach)
        if task == "accompany" and self.lookahead and rng.random() < LIVE:
            task = "accompany_live"  # a melody heard as it is played: no view of the next bar
        key = self._key(window, given, task, rng) if self.keys else None
        ids = self.sequence(window, given, at_start=first == 0, at_end=first + len(window) == len(g), task=task,
                            key=key)
        if rng.random() < CROPPED and ids.size > need:
            ids = np.concatenate([ids[:1], ids[1 + int(rng.integers(0, ids.size - need)):]])
        out = np.full(need + 1, self.tok.pad_id, np.int64)
        out[:min(out.size, ids.size)] = ids[:out.size]
        return torch.from_numpy(self.with_style(out, k, rng))

    def sequence(self, g: GridNotes, given: np.ndarray | None, at_start: bool, at_end: bool,
                 task: str | None = None, key: int | None = None) -> np.ndarray:
        return window_ids(self.tok, g, given, at_start, at_end, task, key)

    @staticmethod
    def _key(g: GridNotes, given: np.ndarray | None, task: str, rng: np.random.Generator) -> int | None:
        """A window's KEY: of its melody when it is accompanied (what a melody alone can tell), else
        of all its notes; none in one window in five, so the model also plays without one."""
        if rng.random() < NO_KEY or not len(g):
            return None
        heard = g.take(given) if task.startswith("accompany") else g
        pitched = heard.program != DRUMS
        return estimate_key(heard.pitch[pitched], (heard.end - heard.onset)[pitched])

    def _augment(self, g: GridNotes, rng: np.random.Generator,
                 bounds: tuple[int, int] | None = (0, 127)) -> GridNotes:
        """Time stretched by up to `stretch`, pitches moved by up to `transpose` semitones within
        `bounds` (the style's range in the training data, with `transpose_range = "data"`; None: a
        style whose keys stay as written)."""
        if self.stretch and len(g):
            factor = rng.uniform(1 - self.stretch, 1 + self.stretch)
            g = stretched(g, factor)
        pitched = g.program != DRUMS
        if self.transpose and pitched.any() and bounds is not None:
            lo = max(-self.transpose, bounds[0] - int(g.pitch[pitched].min()))
            hi = min(self.transpose, bounds[1] - int(g.pitch[pitched].max()))
            shift = int(rng.integers(lo, hi + 1)) if hi >= lo else 0
            g = g._with(g.onset, g.duration, g.program, np.where(pitched, g.pitch + shift, g.pitch), g.velocity)
        return g


def window_origin(g: GridNotes, i: int) -> int:
    """Where a window that starts at note i starts: the note's onset, or on a metrical grid the bar
    line before it (a metrical window opens with its bar)."""
    onset = int(g.onset[i]) if len(g) else 0
    if g.meter is None:
        return onset
    lines = np.round(g.meter.bar_starts((onset + 1) / g.tpq) * g.tpq).astype(np.int64)
    return int(lines[np.searchsorted(lines, onset, side="right") - 1])


def stretched(g: GridNotes, factor: float) -> GridNotes:
    """The notes played `factor` times as long: on a clock grid their steps stretch; on a metrical
    grid the beats stay and the tempo changes."""
    if g.meter is not None:
        m = g.meter
        out = g.take(slice(None))
        out.meter = Meter(m.tempo_at, tuple(q / factor for q in m.qpm), m.signature_at, m.numerator, m.denominator)
        return out
    steps = np.floor(g.lengths[g.duration] * factor + 0.5).astype(np.int64)
    duration = np.clip(np.searchsorted(g.lengths, steps), 0, g.lengths.size - 1)
    return g._with(np.floor(g.onset * factor + 0.5).astype(np.int64), duration, g.program, g.pitch, g.velocity)
