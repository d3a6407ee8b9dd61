"""The note vocabulary's grid and data types: notes on the token grid, and what a generation is
given (`Plan`). Shared by the tokenizer (`notes`), its masks (`note_grammar`) and the anticipatory
windows (`cadenza.data.anticipation`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cadenza.data.meter import Meter
from cadenza.data.midi import Notes, run_max

NUM_PITCHES = 128
NUM_INSTRUMENTS = 129  # 128 General MIDI programs, then the drums
# The duration grid, in 10 ms steps: (first, last, step) of each stretch.
DURATION_GRID = ((1, 100, 1), (105, 300, 5), (310, 600, 10), (620, 1000, 20))
DURATIONS = np.concatenate([np.arange(a, b + 1, s) for a, b, s in DURATION_GRID])


@dataclass
class GridNotes:
    """Notes on a token grid, in onset order (then program, then pitch): onsets in steps,
    durations as indices into `lengths` (the vocabulary's duration grid, in steps), velocity bins
    (0 where unknown: controls). On a metrical grid (`tpq` steps a quarter note) `meter` says where
    the bars are; on a clock grid both are unset."""

    onset: np.ndarray
    duration: np.ndarray
    program: np.ndarray
    pitch: np.ndarray
    velocity: np.ndarray
    lengths: np.ndarray = field(default_factory=lambda: DURATIONS)
    meter: Meter | None = None
    tpq: int = 0

    def __len__(self) -> int:
        return int(self.onset.size)

    @classmethod
    def empty(cls, like: GridNotes | None = None) -> GridNotes:
        z = np.zeros(0, np.int64)
        return cls(z, z, z, z, z) if like is None else like.take(z)

    def _with(self, *arrays) -> GridNotes:
        return GridNotes(*arrays, lengths=self.lengths, meter=self.meter, tpq=self.tpq)

    def take(self, index) -> GridNotes:
        return self._with(self.onset[index], self.duration[index], self.program[index], self.pitch[index],
                          self.velocity[index])

    def shifted(self, steps: int) -> GridNotes:
        """The notes `steps` later (earlier when negative); a meter is re-based with them."""
        g = self._with(self.onset + steps, self.duration, self.program, self.pitch, self.velocity)
        if g.meter is not None:
            g.meter = g.meter.shifted(-steps / self.tpq)
        return g

    @property
    def end(self) -> np.ndarray:
        """Each note's release, in steps."""
        return self.onset + self.lengths[self.duration]

    @staticmethod
    def concat(parts: list[GridNotes]) -> GridNotes:
        fields = ("onset", "duration", "program", "pitch", "velocity")
        merged = parts[0]._with(*(np.concatenate([getattr(p, f) for p in parts]) for f in fields))
        return merged.take(np.lexsort((merged.pitch, merged.program, merged.onset)))


def nearest_index(grid: np.ndarray) -> np.ndarray:
    """A table from a length in steps (0 .. the longest) to the index of the nearest grid value
    (ties to the longer): quantising a note is then one lookup."""
    steps = np.arange(grid[-1] + 1)
    hi = np.clip(np.searchsorted(grid, steps), 1, grid.size - 1)
    return np.where(steps - grid[hi - 1] < grid[hi] - steps, hi - 1, hi)


def on_grid(notes: Notes, onset: np.ndarray, want: np.ndarray, lengths: np.ndarray, nearest: np.ndarray,
            velocity_bins: int) -> tuple[GridNotes, dict[str, int]]:
    """`notes` (ordered by program, pitch, onset) at `onset` steps, lasting about `want` steps, as
    grid notes: durations to the nearest grid value (at least one step, at most the longest);
    two onsets of one instrument and pitch on one step become one note (the longest); a note never
    outlasts the next onset of its instrument and pitch (its duration is then the longest grid
    value that fits)."""
    want = np.maximum(want, 1)
    clipped = int(np.count_nonzero(want > lengths[-1]))
    program = notes.programs
    # `Notes` are ordered by (program, pitch, onset) and rounding keeps that order: no sort.
    voice = program * NUM_PITCHES + notes.pitch
    same = voice[1:] == voice[:-1]
    twin = same & (onset[1:] == onset[:-1])
    merged = int(np.count_nonzero(twin))
    if merged:  # of onsets that met on one step, one note, as long as the longest
        want = run_max(want, twin)
        keep = np.append(~twin, True)
        onset, want, program, voice = onset[keep], want[keep], program[keep], voice[keep]
        notes = notes.take(keep)
        same = voice[1:] == voice[:-1]
    duration = nearest[np.minimum(want, lengths[-1])]
    room = np.where(same, onset[1:] - onset[:-1], lengths[-1])
    over = np.append(lengths[duration[:-1]] > room, False)
    cut = int(np.count_nonzero(over))
    if cut:
        duration[over] = np.searchsorted(lengths, room[over[:-1]], side="right") - 1
    order = np.argsort((onset << 16) | voice)  # onset order, then program, then pitch
    velocity = (notes.velocity[order] - 1) * velocity_bins // 127 + 1  # velocity bins of 1 .. 127
    g = GridNotes(onset[order], duration[order], program[order], notes.pitch[order], velocity, lengths=lengths)
    return g, {"grid_merged": merged, "grid_truncated": cut, "long_notes_cut": clipped}


@dataclass
class Plan:
    """What a generation is given. `controls` (grid notes on the sequence's clock, in order) are
    forced where they belong, the first `placed` of them being in the prompt already; events may
    start only at clock steps in [events_from, events_until); with `previews`, every bar line is
    followed by a view of the next bar's controls; with `under`, a new note starts below the highest
    control sounding where it starts (voices under a melody)."""

    controls: GridNotes = field(default_factory=GridNotes.empty)
    placed: int = 0
    events_from: int = 0
    events_until: int | None = None
    previews: bool = False  # each bar shows the next bar's controls (a metrical vocabulary with lookahead)
    under: bool = False  # new notes start below the controls sounding (an accompaniment's melody)


def changes(values: np.ndarray, is_event: np.ndarray | None, event_state: int, control_state: int) -> np.ndarray:
    """Whether each item's value differs from the previous item's of its own kind (events and
    controls are separate streams, each starting from its state; `is_event` None: all events)."""
    if is_event is None or is_event.all():
        out = np.empty(values.size, bool)
        out[:1] = values[:1] != event_state
        np.not_equal(values[1:], values[:-1], out=out[1:])
        return out
    out = np.zeros(values.size, bool)
    for kind, state in ((True, event_state), (False, control_state)):
        idx = np.flatnonzero(is_event == kind)
        out[idx] = changes(values[idx], None, state, -1)
    return out


class NoteIds:
    """The ids of the note blocks both note vocabularies share (``[VELOCITY] [INSTRUMENT]
    NOTE|CONTROL_NOTE DURATION``), from the offsets a tokenizer sets, and its velocity bins."""

    note_offset: int
    control_offset: int
    duration_offset: int
    velocity_offset: int
    instrument_offset: int
    velocity_bins: int

    def note(self, pitch: int) -> int:
        return self.note_offset + pitch

    def control_note(self, pitch: int) -> int:
        return self.control_offset + pitch

    def duration(self, index: int) -> int:
        return self.duration_offset + index

    def velocity(self, bin_: int) -> int:
        return self.velocity_offset + bin_ - 1

    def instrument(self, program: int) -> int:
        return self.instrument_offset + program

    def velocity_to_bin(self, velocity):
        return (np.asarray(velocity, np.int64) - 1) * self.velocity_bins // 127 + 1

    def bin_to_velocity(self, bin_):
        return 1 + (np.asarray(bin_, np.int64) - 1) * -(-127 // self.velocity_bins)
