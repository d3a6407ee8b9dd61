"""Decoding masks for the note-level vocabulary, and the plan that places given notes (controls).

The state of each sequence is its clock, where it is inside a note (after VELOCITY, INSTRUMENT or
NOTE), the instrument and the release of every note it has played. The masks keep every sequence
well formed:

* a note is ``[VELOCITY] [INSTRUMENT] NOTE DURATION`` in that order; controls are never sampled;
* the clock never goes back, and a time shift never jumps past the next control's place, where
  the control's tokens are then forced, exactly as training placed them (`anticipation` seconds
  before it sounds);
* a note may not start on an instrument-and-pitch that is sounding (an event or a given note), nor
  while `max_polyphony` notes sound, nor outside the plan's event span (before 0, inside the
  notes an infill keeps); its duration may not run into a given note of its pitch, nor past
  `max_note_seconds` when that is set;
* EOS only once every control is placed.

A piece's notes carry their lengths, so nothing is ever closed at the end (`close` is a no-op).
"""

from __future__ import annotations

import numpy as np
import torch

from cadenza.data.tokenizers.grammar import SpecialsOnly
from cadenza.data.tokenizers.note_grid import DURATIONS, NUM_INSTRUMENTS, NUM_PITCHES, GridNotes, Plan

FREE, AFTER_VELOCITY, AFTER_INSTRUMENT, AFTER_NOTE = 0, 1, 2, 3
VOICES = NUM_INSTRUMENTS * NUM_PITCHES
NEVER = 2**40  # a release that never comes
RECENT = 512  # the releases of the last RECENT events count towards the polyphony cap (10 s of 50 notes/s)


class NoteGrammar(SpecialsOnly):
    def __init__(self, tok, batch: int, device, max_polyphony: int | None = None, allow_eos: bool = True,
                 max_note_seconds: float | None = None, plan: Plan | None = None):
        super().__init__(tok, batch, device, allow_eos)
        self.plan = plan or Plan()
        self.device = device
        self.max_polyphony = max_polyphony
        self.max_steps = None if max_note_seconds is None else max(1, round(max_note_seconds * tok.steps_per_second))
        z = torch.zeros(batch, dtype=torch.long, device=device)
        self.clock = z.clone()  # observing ANTICIPATE sets it to -lead
        self.phase = z.clone()
        self.program = z.clone()  # the events' instrument
        self.pending = z.clone()  # the instrument an INSTRUMENT token names, for the note it opens
        self.voice = z.clone()  # instrument * 128 + pitch of the note just named
        self.release = torch.full((batch, VOICES), -NEVER, dtype=torch.long, device=device)  # of events
        self.recent = torch.full((batch, RECENT), -NEVER, dtype=torch.long, device=device)  # a ring of releases
        self.events = z.clone()
        self.next_control = z.clone()  # index into the controls still to place
        self.forced_at = z - 1  # position in the forced tokens; -1: not forcing
        self._tables(tok, device)
        self._controls(tok, device)

    def _tables(self, tok, device) -> None:
        """Per token id: its kind and value, so observing a token is a few lookups."""
        ids = torch.arange(tok.vocab_size, device=device)
        self.is_shift = ids < tok.note_offset
        self.is_note = (ids >= tok.note_offset) & (ids < tok.control_offset)
        self.is_control = (ids >= tok.control_offset) & (ids < tok.duration_offset)
        self.is_duration = (ids >= tok.duration_offset) & (ids < tok.velocity_offset)
        self.is_velocity = (ids >= tok.velocity_offset) & (ids < tok.instrument_offset)
        self.is_instrument = (ids >= tok.instrument_offset) & (ids < tok.pad_id)
        self.durations = torch.as_tensor(DURATIONS, device=device)
        value = torch.where(self.is_shift, ids + 1, 0)
        value = torch.where(self.is_note | self.is_control, (ids - tok.note_offset) % NUM_PITCHES, value)
        value = torch.where(self.is_duration, self.durations[(ids - tok.duration_offset).clamp(0, DURATIONS.size - 1)],
                            value)
        self.value = torch.where(self.is_instrument, ids - tok.instrument_offset, value)
        self.shift_steps = torch.arange(1, tok.max_shift_steps + 1, device=device)

    def _controls(self, tok, device) -> None:
        """The forced tokens of the controls not yet in the prompt (flat, without the shifts, which
        the model samples), where each control's tokens start, and the step of its place."""
        plan, lead = self.plan, tok.lead
        c = plan.controls
        self.c_onset = torch.as_tensor(c.onset, device=device)
        self.c_release = torch.as_tensor(c.end, device=device)
        self.c_voice = torch.as_tensor(c.program * NUM_PITCHES + c.pitch, device=device)
        self.c_program = torch.as_tensor(c.program, device=device)
        self.c_pitch = torch.as_tensor(c.pitch, device=device)
        rest = c.take(slice(plan.placed, None))
        state = int(c.program[plan.placed - 1]) if plan.placed else -1  # the controls' instrument so far
        ids = tok.encode_grid(GridNotes.empty(), rest, clock=int(rest.onset.min(initial=lead)) - lead,
                              state=(-1, state, -1))
        ids = ids[ids >= tok.note_offset]
        ends = np.flatnonzero((ids >= tok.duration_offset) & (ids < tok.velocity_offset)) + 1
        self.forced = torch.as_tensor(np.append(ids, tok.pad_id), device=device)
        self.f_start = torch.as_tensor(np.concatenate(([0], ends)), device=device)
        self.f_key = torch.as_tensor(np.append(rest.onset - lead, NEVER), device=device)
        self.n_rest = len(rest)

    # ---- state -------------------------------------------------------------------------------
    def observe(self, ids: torch.Tensor) -> None:
        ids = ids.view(self.batch, -1)
        for t in range(ids.shape[1]):
            self._step(ids[:, t])

    def _step(self, x: torch.Tensor) -> None:
        v = self.value[x]
        shift, note, control = self.is_shift[x], self.is_note[x], self.is_control[x]
        duration, instrument = self.is_duration[x], self.is_instrument[x]
        forcing = self.forced_at >= 0  # this token is a forced control's
        self.clock = torch.where(x == self.tok.anticipate_id, -self.tok.lead, self.clock + torch.where(shift, v, 0))
        self.pending = torch.where(instrument, v, self.pending)
        # an INSTRUMENT before an event's NOTE changes the events' instrument (before a control's, not)
        self.program = torch.where(note & (self.phase == AFTER_INSTRUMENT), self.pending, self.program)
        self.voice = torch.where(note, self.program * NUM_PITCHES + v, self.voice)
        ended = duration & ~forcing & (self.phase == AFTER_NOTE)  # an event's length: its voice's release
        rows = torch.nonzero(ended).flatten()
        if rows.numel():
            self.release[rows, self.voice[rows]] = self.clock[rows] + v[rows]
            self.recent[rows, self.events[rows] % RECENT] = self.clock[rows] + v[rows]
            self.events = self.events + ended.long()
        placed = duration & forcing
        self.next_control = self.next_control + placed.long()
        self.forced_at = torch.where(placed, -1, torch.where(forcing, self.forced_at + 1, self.forced_at))
        self.phase = torch.where(self.is_velocity[x], AFTER_VELOCITY, self.phase)
        self.phase = torch.where(instrument, AFTER_INSTRUMENT, self.phase)
        self.phase = torch.where(note | control, AFTER_NOTE, self.phase)
        self.phase = torch.where(duration | shift, FREE, self.phase)

    # ---- masks --------------------------------------------------------------------------------
    def allowed(self) -> torch.Tensor:
        j = self.next_control.clamp(max=self.n_rest)
        key = self.f_key[j]
        due = (self.phase == FREE) & (self.forced_at < 0) & (self.clock >= key)
        self.forced_at = torch.where(due, self.f_start[j], self.forced_at)
        sounding = self._sounding()
        m = torch.zeros(self.batch, self.tok.vocab_size, dtype=torch.bool, device=self.device)
        self._between_notes(m, key, sounding)
        self._inside_a_note(m, sounding)
        m &= self.base
        forcing = torch.nonzero(self.forced_at >= 0).flatten()
        if forcing.numel():
            m[forcing] = False
            m[forcing, self.forced[self.forced_at[forcing]]] = True
        return m

    def _sounding(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 128): the silent pitches of the instrument each row's next note would play, and
        (B,): how many notes (events and controls) sound at each row's clock."""
        program = torch.where(self.phase == AFTER_INSTRUMENT, self.pending, self.program)
        index = program[:, None] * NUM_PITCHES + torch.arange(NUM_PITCHES, device=self.device)[None]
        busy = self.release.gather(1, index) > self.clock[:, None]
        count = (self.recent > self.clock[:, None]).sum(1)
        if self.c_onset.numel():
            on = (self.c_onset[None] <= self.clock[:, None]) & (self.c_release[None] > self.clock[:, None])
            count = count + on.sum(1)
            mine = on & (self.c_program[None] == program[:, None])
            hits = torch.zeros(busy.shape, dtype=torch.int32, device=self.device)
            busy |= hits.scatter_add_(1, self.c_pitch.expand_as(on), mine.int()) > 0
        return ~busy, count

    def _event_room(self, count: torch.Tensor) -> torch.Tensor:
        """Rows where an event may start now: inside the plan's span, under the polyphony cap."""
        ok = self.clock >= max(self.plan.events_from, 0)
        if self.plan.events_until is not None:
            ok &= self.clock < self.plan.events_until
        if self.max_polyphony is not None:
            ok &= count < self.max_polyphony
        return ok

    def _between_notes(self, m: torch.Tensor, key: torch.Tensor, sounding) -> None:
        """Shifts up to the next control's place, a note's first token, EOS."""
        tok = self.tok
        free = self.phase == FREE
        silent, count = sounding
        room = self._event_room(count) & free
        cap = (key - self.clock).clamp(min=0, max=tok.max_shift_steps)
        m[:, :tok.max_shift_steps] = free[:, None] & (self.shift_steps[None] <= cap[:, None])
        m[:, tok.velocity_offset:tok.pad_id] = room[:, None]  # VELOCITY and INSTRUMENT
        m[:, tok.note_offset:tok.control_offset] = room[:, None] & silent
        m[:, tok.eos_id] = free & (self.next_control >= self.n_rest)

    def _inside_a_note(self, m: torch.Tensor, sounding) -> None:
        """After VELOCITY an INSTRUMENT or the NOTE, after INSTRUMENT the NOTE, after the NOTE its
        DURATION."""
        tok = self.tok
        after_velocity = self.phase == AFTER_VELOCITY
        named = (after_velocity | (self.phase == AFTER_INSTRUMENT))[:, None]
        m[:, tok.instrument_offset:tok.pad_id] |= after_velocity[:, None]
        m[:, tok.note_offset:tok.control_offset] |= named & sounding[0]
        m[:, tok.duration_offset:tok.velocity_offset] = (self.phase == AFTER_NOTE)[:, None] & self._lengths()

    def _lengths(self) -> torch.Tensor:
        """(B, durations): the lengths the note just named may have."""
        limit = torch.full_like(self.clock, NEVER)
        if self.max_steps is not None:
            limit = limit.clamp(max=self.max_steps)
        if self.c_onset.numel():  # not into a given note of the same voice
            later = (self.c_voice[None] == self.voice[:, None]) & (self.c_onset[None] > self.clock[:, None])
            # amin, not min(1): under load, min over a dim waited on threads for milliseconds
            gap = torch.where(later, self.c_onset[None] - self.clock[:, None], NEVER).amin(1)
            limit = torch.minimum(limit, gap)
        fits = self.durations[None] <= limit[:, None]
        fits[:, 0] = True  # the shortest always fits
        return fits
