"""Notes that know their length: a note-level vocabulary with anticipation (Thickstun et al. 2024).

A note is written at its onset, with its duration, so a note-off can never be forgotten. Notes are
in onset order; the clock moves by time shifts, so any piece and any window has a bounded time
range. Instruments are kept: an INSTRUMENT token (a General MIDI program, or the drums) precedes
a note whose program differs from the previous note's of its kind, and a VELOCITY token an event
whose loudness bin changes.

Some notes may be *controls*: notes that are given (a melody to accompany, the music after a span
to fill). A control is written as CONTROL_NOTE instead of NOTE, `anticipation` seconds *before*
it sounds, so a causal model sees what is coming (the Anticipatory Music Transformer's idea).
A sequence with controls opens with the ANTICIPATE flag and its clock starts `anticipation`
seconds before the music, so controls in the first seconds have their place; otherwise it opens
with AUTOREGRESS and the clock starts at 0.

===================  ===========  ===================================================
token                ids          meaning
===================  ===========  ===================================================
SHIFT k              0 .. 99      advance the clock by k steps of 10 ms, k = 1 .. 100
NOTE p               100 .. 227   a note of pitch p starts now
CONTROL_NOTE p       228 .. 355   a given note of pitch p starts `anticipation` s from now
DURATION d           356 .. 545   the note just named lasts DURATIONS[d] steps
VELOCITY b           546 .. 577   later notes (not controls) play at velocity bin b = 1 .. 32
INSTRUMENT i         578 .. 706   the next note plays program i (0 .. 127), 128: drums
PAD, BOS, EOS        707 .. 709   padding, begin and end of a piece
AUTOREGRESS          710          a sequence without controls
ANTICIPATE           711          a sequence with controls
===================  ===========  ===================================================

A note's tokens are ``[SHIFT...] [VELOCITY] [INSTRUMENT] NOTE|CONTROL_NOTE DURATION``. At one
instant controls come before events, and each kind is ordered by program, then pitch. Durations
are on a grid that is fine where ears are (10 ms steps up to 1 s) and coarser for long notes (50 ms
to 3 s, 100 ms to 6 s, 200 ms to 10 s); longer notes are cut to 10 s. Encoding then decoding is
exact on these grids. Velocity bins follow Magenta's 32 bins (as the 388-event vocabulary).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cadenza.data.midi import Notes
from cadenza.data.tokenizers.base import DecodeReport, Encoded, NoteDecoding, Tokenizer, TokenizerError
from cadenza.data.tokenizers.grid import GridDecodeReport
from cadenza.data.tokenizers.note_grid import (
    DURATIONS,
    NUM_INSTRUMENTS,
    NUM_PITCHES,
    GridNotes,
    NoteIds,
    changes,
    nearest_index,
    on_grid,
)


class NoteTokenizer(NoteIds, NoteDecoding, Tokenizer):
    """Onset-ordered notes with durations, instruments, velocities and anticipated controls.

    >>> tok = NoteTokenizer()
    >>> tok.vocab_size, tok.note(60), tok.control_note(60), tok.instrument(128)
    (712, 160, 288, 706)
    """

    name = "notes"
    anticipates = True
    note_lengths_at_onset = True
    has_instruments = True  # INSTRUMENT tokens: samples can be held to some programs
    window_params = ("anticipation",)  # controls are placed in windows; a store holds none

    # anticipation 1 s, not the paper's 5: a small model trained on a CPU must count the shifts since
    # a control to know when it sounds, and 5 s of them made the given notes hurt (docs/data.md)
    def __init__(self, anticipation: float = 1.0, velocity_bins: int = 32, sustain: bool = True):
        if not 0 < anticipation <= 60 or not 1 <= velocity_bins <= 127:
            raise TokenizerError("anticipation must be in (0, 60] seconds and velocity_bins in 1..127")
        self.steps_per_second = 100
        self.max_shift_steps = 100
        self.anticipation = float(anticipation)
        self.lead = round(self.anticipation * self.steps_per_second)  # anticipation, in steps
        self.velocity_bins = int(velocity_bins)
        self.sustain = bool(sustain)
        self.lengths = DURATIONS  # the duration grid, in steps
        self.note_offset = self.max_shift_steps
        self.control_offset = self.note_offset + NUM_PITCHES
        self.duration_offset = self.control_offset + NUM_PITCHES
        self.velocity_offset = self.duration_offset + DURATIONS.size
        self.instrument_offset = self.velocity_offset + self.velocity_bins
        self.pad_id = self.instrument_offset + NUM_INSTRUMENTS
        self.bos_id, self.eos_id = self.pad_id + 1, self.pad_id + 2
        self.autoregress_id, self.anticipate_id = self.pad_id + 3, self.pad_id + 4
        self.vocab_size = self.pad_id + 5

    def params(self) -> dict[str, Any]:
        return {"anticipation": self.anticipation, "velocity_bins": self.velocity_bins, "sustain": self.sustain}

    # ---- single ids ----------------------------------------------------------------------------
    def shift(self, steps: int) -> int:
        if not 1 <= steps <= self.max_shift_steps:
            raise TokenizerError(f"a shift is 1..{self.max_shift_steps} steps, got {steps}")
        return steps - 1

    def task_id(self, task: str | bool) -> int:
        """AUTOREGRESS, or ANTICIPATE for a window with given notes (an infill or an accompaniment)."""
        return self.autoregress_id if task in ("autoregress", False) else self.anticipate_id

    def task_prefix(self, task: str | bool = "autoregress", key: int | None = None) -> list[int]:
        return [self.task_id(task)]  # no key tokens

    @property
    def special_ids(self) -> tuple[int, ...]:
        return (self.pad_id, self.bos_id, self.eos_id, self.autoregress_id, self.anticipate_id)

    def token_name(self, i: int) -> str:
        i = int(i)
        names = ((self.note_offset, "SHIFT", 1), (self.control_offset, "NOTE", -self.note_offset),
                 (self.duration_offset, "CONTROL_NOTE", -self.control_offset),
                 (self.velocity_offset, "DURATION", -self.duration_offset),
                 (self.instrument_offset, "VELOCITY", 1 - self.velocity_offset),
                 (self.pad_id, "INSTRUMENT", -self.instrument_offset))
        for upper, label, add in names:
            if i < upper:
                return f"{label}_{i + add}"
        return {self.pad_id: "PAD", self.bos_id: "BOS", self.eos_id: "EOS", self.autoregress_id: "AUTOREGRESS",
                self.anticipate_id: "ANTICIPATE"}.get(i, f"<{i}>")

    # ---- the grid --------------------------------------------------------------------------------
    def quantize(self, notes: Notes) -> tuple[GridNotes, dict[str, int]]:
        """`Notes` on the grid (`note_grid.on_grid`): onsets round to the nearest step, durations to
        the nearest grid value (at most 10 s)."""
        sps = self.steps_per_second
        onset = np.floor(notes.start * sps + 0.5).astype(np.int64)
        want = np.floor((notes.end - notes.start) * sps + 0.5).astype(np.int64)
        return on_grid(notes, onset, want, DURATIONS, NEAREST_DURATION, self.velocity_bins)

    def to_grid_notes(self, g: GridNotes, default_velocity: int = 80) -> Notes:
        """Seconds again: `Notes` with programs (velocity `default_velocity` where the bin is 0)."""
        sps = self.steps_per_second
        vel = np.where(g.velocity > 0, self.bin_to_velocity(np.maximum(g.velocity, 1)), default_velocity)
        return Notes.from_arrays(g.onset / sps, g.end / sps, g.pitch, vel, g.program)

    # ---- encoding ------------------------------------------------------------------------------
    def read_options(self) -> dict:
        return {"sustain": self.sustain, "programs": True}  # every instrument kept, drums as DRUMS

    def encode(self, source) -> Encoded:
        notes, stats = self.read(source)
        g, grid = self.quantize(notes)
        stats.update(grid)
        return Encoded(ids=self.encode_grid(g), notes=len(g), stats=stats, durations=notes.end - notes.start)

    def encode_grid(self, events: GridNotes, controls: GridNotes | None = None, clock: int = 0,
                    state: tuple[int, int, int] = (-1, -1, -1)) -> np.ndarray:
        """Interleave `events` (at their onsets) and `controls` (`anticipation` seconds earlier)
        into ids, starting from `clock` (steps; -lead for a sequence that anticipates) with the
        (event program, control program, velocity bin) `state` (-1: not yet set). No flags."""
        n_e = len(events)
        if controls is None or not len(controls):  # events alone are in order already
            key, program, pitch = events.onset, events.program, events.pitch
            is_event, duration, velocity = None, events.duration, events.velocity
        else:
            key = np.concatenate([events.onset, controls.onset - self.lead])
            is_event = np.arange(key.size) < n_e
            program = np.concatenate([events.program, controls.program])
            pitch = np.concatenate([events.pitch, controls.pitch])
            # at one instant controls come first; each kind by program, then pitch
            order = np.argsort(((key - key.min()) << 16) | (is_event << 15) | (program << 7) | pitch)
            key, is_event, program, pitch = key[order], is_event[order], program[order], pitch[order]
            duration = np.concatenate([events.duration, controls.duration])[order]
            velocity = np.concatenate([events.velocity, controls.velocity])[order]
        if key.size == 0:
            return np.zeros(0, np.int64)
        if key[0] < clock:
            kind = "starts" if is_event is None or is_event[0] else "is anticipated"
            raise TokenizerError(f"a note {kind} at step {key[0]}, "
                                 f"before the sequence's clock ({clock})")
        gap = np.empty_like(key)
        gap[0] = key[0] - clock
        np.subtract(key[1:], key[:-1], out=gap[1:])
        n_shift = -(-gap // self.max_shift_steps)
        new_instrument = changes(program, is_event, state[0], state[1])
        if is_event is None:
            new_velocity = changes(velocity, None, state[2], -1)
        else:
            new_velocity = np.zeros(key.size, bool)
            new_velocity[is_event] = changes(velocity[is_event], None, state[2], -1)
        counts = n_shift + new_velocity + new_instrument + 2
        ends = np.cumsum(counts)
        out = np.empty(int(ends[-1]), np.int64)
        out[ends - 1] = self.duration_offset + duration
        out[ends - 2] = pitch + (self.note_offset if is_event is None else
                                 np.where(is_event, self.note_offset, self.control_offset))
        out[(ends - 3)[new_instrument]] = self.instrument_offset + program[new_instrument]
        out[(ends - 3 - new_instrument)[new_velocity]] = self.velocity_offset + velocity[new_velocity] - 1
        _write_shifts(out, ends - counts, gap, n_shift, self.max_shift_steps)
        return out

    def steps_at(self, notes: Notes, seconds) -> np.ndarray:
        """The grid step of times in `seconds` (of `notes`), as onsets are quantised."""
        return np.floor(np.asarray(seconds, np.float64) * self.steps_per_second + 0.5).astype(np.int64)

    def encode_prompt(self, prefix: GridNotes, placed: GridNotes, anticipate: bool, previews=None) -> np.ndarray:
        """An infill's or an accompaniment's prompt: the music before it and the controls placed
        in it, on a clock that starts `anticipation` early when there are controls."""
        return self.encode_grid(prefix, placed, clock=-self.lead if anticipate else 0)

    def span_tokens(self, clock: int, stop: int) -> tuple[float, int]:
        """(seconds, a token budget) for new music from step `clock` to step `stop`."""
        seconds = (stop - clock) / self.steps_per_second
        return seconds, int(seconds * 60) + 64

    def encode_window(self, events: GridNotes, controls: GridNotes | None, at_end: bool,
                      task: str = "autoregress") -> np.ndarray:
        """A training window's notes: with controls, on a clock that starts `anticipation` early."""
        return self.encode_grid(events) if controls is None else self.encode_grid(events, controls, clock=-self.lead)

    # ---- decoding ------------------------------------------------------------------------------
    def decode_grid(self, ids, clock: int | None = None) -> tuple[GridNotes, GridNotes, DecodeReport]:
        """(events, controls, repairs) of any id sequence. The clock starts at `clock`, or at
        -lead when the ids hold the ANTICIPATE flag, else 0. A note without its duration is
        dropped; a duration without its note is ignored; both are counted as repairs."""
        report = GridDecodeReport()
        ids = self.check_ids(ids)
        if clock is None:
            clock = -self.lead if np.any(ids == self.anticipate_id) else 0
        ids = self.content(ids, report)
        is_shift = ids < self.note_offset
        time = clock + np.cumsum(np.where(is_shift, ids + 1, 0))
        pos = np.flatnonzero((ids >= self.note_offset) & (ids < self.duration_offset))
        nxt = np.append(ids, self.pad_id)[pos + 1]
        whole = (nxt >= self.duration_offset) & (nxt < self.velocity_offset)
        is_dur = (ids >= self.duration_offset) & (ids < self.velocity_offset)
        report.extra["notes_without_duration"] = int(np.count_nonzero(~whole))
        report.extra["durations_without_note"] = int(np.count_nonzero(is_dur)) - int(np.count_nonzero(whole))
        is_event = ids[pos] < self.control_offset
        program = _carried(ids, pos, is_event, self.instrument_offset, self.pad_id, 0)
        velocity = _carried(ids, pos, is_event, self.velocity_offset, self.instrument_offset, -1) + 1
        pitch = (ids[pos] - self.note_offset) % NUM_PITCHES
        onset = time[pos] + np.where(is_event, 0, self.lead)
        g = GridNotes(onset, nxt - self.duration_offset, program, pitch, np.where(is_event, velocity, 0))
        events, controls = g.take(whole & is_event), g.take(whole & ~is_event)
        events.velocity = np.where(events.velocity > 0, events.velocity, self.velocity_to_bin(80))
        order_e = np.lexsort((events.pitch, events.program, events.onset))
        order_c = np.lexsort((controls.pitch, controls.program, controls.onset))
        return events.take(order_e), controls.take(order_c), report

    def decode_notes(self, ids) -> tuple[Notes, DecodeReport]:
        """Every note of the ids (events and controls) as `Notes` with programs, and the repairs."""
        events, controls, report = self.decode_grid(ids)
        return self.to_grid_notes(GridNotes.concat([events, controls])), report

    # ---- what the sampler asks -------------------------------------------------------------
    def token_seconds(self) -> np.ndarray:
        secs = np.zeros(self.vocab_size)
        secs[:self.max_shift_steps] = np.arange(1, self.max_shift_steps + 1) / self.steps_per_second
        return secs

    def encode_primer(self, source, seconds: float | None = None) -> np.ndarray:
        """A primer's ids; with `seconds`, only the notes starting before then (whole)."""
        notes, _ = self.read(source)
        g, _ = self.quantize(notes)
        if seconds is not None:
            g = g.take(g.onset < round(seconds * self.steps_per_second))
        return self.encode_grid(g)

    def grammar(self, batch: int, device, constrained: bool = True, max_polyphony: int | None = None,
                allow_eos: bool = True, max_note_seconds: float | None = None, plan=None, programs=None):
        # lazy: the masks are torch tensors, and tokenizing (data preparation) never imports torch
        from cadenza.data.tokenizers.grammar import SpecialsOnly
        from cadenza.data.tokenizers.note_grammar import NoteGrammar

        if not constrained:
            if plan is not None:
                raise TokenizerError("an infill or an accompaniment needs constrained decoding: the masks place "
                                     "the given notes")
            return SpecialsOnly(self, batch, device, allow_eos)
        return NoteGrammar(self, batch, device, max_polyphony, allow_eos, max_note_seconds, plan, programs)

    # ---- augmentation (the dataset transposes and stretches notes, not ids) ----------------------
    pitch_bounds = (0, 127)


NEAREST_DURATION = nearest_index(DURATIONS)


def _write_shifts(out: np.ndarray, first: np.ndarray, gap: np.ndarray, n_shift: np.ndarray, m: int) -> None:
    """Write each item's run of shifts (all of m steps but the last) from its first slot."""
    if n_shift.max(initial=0) <= 1:  # the common case: no gap longer than one shift
        has = n_shift == 1
        out[first[has]] = gap[has] - 1
        return
    item = np.repeat(np.arange(gap.size), n_shift)
    k = np.arange(item.size) - (np.cumsum(n_shift) - n_shift)[item]
    last = k == n_shift[item] - 1
    out[first[item] + k] = np.where(last, gap[item] - m * (n_shift[item] - 1), m) - 1


def _carried(ids: np.ndarray, pos: np.ndarray, is_event: np.ndarray, lo: int, hi: int, default: int) -> np.ndarray:
    """For each note at `pos`: the value of the last token in [lo, hi) before it since the
    previous note, else the value its own kind (events / controls) carried last, else `default`."""
    marks = np.flatnonzero((ids >= lo) & (ids < hi))
    owner = np.searchsorted(pos, marks)  # the note each mark comes before
    fresh = np.full(pos.size + 1, -1, np.int64)
    last_of_run = np.append(owner[1:] != owner[:-1], owner.size > 0)[:owner.size]
    fresh[owner[last_of_run]] = ids[marks[last_of_run]] - lo
    fresh = fresh[:-1]
    out = np.full(pos.size, default, np.int64)
    for kind in (True, False):
        idx = np.flatnonzero(is_event == kind)
        v = fresh[idx]
        at = np.maximum.accumulate(np.where(v >= 0, np.arange(v.size), -1)) if v.size else v
        out[idx] = np.where(at >= 0, v[np.maximum(at, 0)], default)
    return out
