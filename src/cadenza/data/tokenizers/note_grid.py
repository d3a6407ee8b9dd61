"""The note vocabulary's grid and data types: notes on the token grid, and what a generation is
given (`Plan`). Shared by the tokenizer (`notes`), its masks (`note_grammar`) and the anticipatory
windows (`cadenza.data.anticipation`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NUM_PITCHES = 128
NUM_INSTRUMENTS = 129  # 128 General MIDI programs, then the drums
# The duration grid, in 10 ms steps: (first, last, step) of each stretch.
DURATION_GRID = ((1, 100, 1), (105, 300, 5), (310, 600, 10), (620, 1000, 20))
DURATIONS = np.concatenate([np.arange(a, b + 1, s) for a, b, s in DURATION_GRID])


@dataclass
class GridNotes:
    """Notes on the token grid, in onset order (then program, then pitch): onsets in steps,
    durations as indices into DURATIONS, velocity bins (0 where unknown: controls)."""

    onset: np.ndarray
    duration: np.ndarray
    program: np.ndarray
    pitch: np.ndarray
    velocity: np.ndarray

    def __len__(self) -> int:
        return int(self.onset.size)

    @classmethod
    def empty(cls) -> GridNotes:
        z = np.zeros(0, np.int64)
        return cls(z, z, z, z, z)

    def take(self, index) -> GridNotes:
        return GridNotes(self.onset[index], self.duration[index], self.program[index], self.pitch[index],
                         self.velocity[index])

    def shifted(self, steps: int) -> GridNotes:
        return GridNotes(self.onset + steps, self.duration, self.program, self.pitch, self.velocity)

    @property
    def end(self) -> np.ndarray:
        """Each note's release, in steps."""
        return self.onset + DURATIONS[self.duration]

    @staticmethod
    def concat(parts: list[GridNotes]) -> GridNotes:
        fields = ("onset", "duration", "program", "pitch", "velocity")
        merged = GridNotes(*(np.concatenate([getattr(p, f) for p in parts]) for f in fields))
        return merged.take(np.lexsort((merged.pitch, merged.program, merged.onset)))


@dataclass
class Plan:
    """What a generation is given. `controls` (grid notes on the sequence's clock, in order) are
    forced where they belong, the first `placed` of them being in the prompt already; events may
    start only at clock steps in [events_from, events_until)."""

    controls: GridNotes = field(default_factory=GridNotes.empty)
    placed: int = 0
    events_from: int = 0
    events_until: int | None = None
