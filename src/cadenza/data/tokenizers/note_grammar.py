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
from cadenza.data.tokenizers.note_grid import NUM_INSTRUMENTS, NUM_PITCHES, GridNotes, Plan

FREE, AFTER_VELOCITY, AFTER_INSTRUMENT, AFTER_NOTE = 0, 1, 2, 3
VOICES = NUM_INSTRUMENTS * NUM_PITCHES
NEVER = 2**40  # a release that never comes
RECENT = 512  # the releases of the last RECENT events count towards the polyphony cap (10 s of 50 notes/s)


class NoteGrammar(SpecialsOnly):
    # observe and allowed run at every sampled token, where each operator's fixed cost is what
    # shows: what a token does to the state, and the mask of each state, are rows of tables.
    def __init__(self, tok, batch: int, device, max_polyphony: int | None = None, allow_eos: bool = True,
                 max_note_seconds: float | None = None, plan: Plan | None = None, programs=None):
        super().__init__(tok, batch, device, allow_eos)
        self.programs = None  # the programs new notes may play (None: any)
        if programs is not None:
            self.programs = torch.zeros(NUM_INSTRUMENTS, dtype=torch.bool, device=device)
            self.programs[list(programs)] = True
        self.plan = plan or Plan()
        self.device = device
        self.max_polyphony = max_polyphony
        self.max_steps = None if max_note_seconds is None else max(1, round(max_note_seconds * tok.steps_per_second))
        self.lengths = tok.lengths  # the duration grid, in steps
        z = torch.zeros(batch, dtype=torch.long, device=device)
        self.clock = z.clone()  # observing ANTICIPATE sets it to -lead
        self.phase = z.clone()
        self.program = z.clone()  # the events' instrument
        self.pending = z.clone()  # the instrument an INSTRUMENT token names, for the note it opens
        self.voice = z.clone()  # instrument * 128 + pitch of the note just named
        self.release = torch.full((batch, VOICES), -NEVER, dtype=torch.long, device=device)  # of events
        self.by_program = self.release.view(batch, NUM_INSTRUMENTS, NUM_PITCHES)  # the same memory
        self.rows = torch.arange(batch, device=device)
        self.recent = torch.full((batch, RECENT), -NEVER, dtype=torch.long, device=device)  # a ring of releases
        self.events = z.clone()
        self.next_control = z.clone()  # index into the controls still to place
        self.forced_at = z - 1  # position in the forced tokens; -1: not forcing
        self._tables(tok, device)
        self._controls(tok, device)
        self.gates = self._gates(tok).to(device)
        self.gates_placed = self.gates[8:]  # every control placed: the only rows without controls to place

    def _tables(self, tok, device) -> None:
        """Per (phase, token id), flattened: what observing the token does to the state, so a step
        is two row lookups and a few selects."""
        ids = torch.arange(tok.vocab_size)
        is_shift = ids < tok.max_shift_steps  # a vocabulary on a metrical grid has none (its clock is set, not summed)
        is_note = (ids >= tok.note_offset) & (ids < tok.control_offset)
        is_control = (ids >= tok.control_offset) & (ids < tok.duration_offset)
        is_duration = (ids >= tok.duration_offset) & (ids < tok.velocity_offset)
        is_velocity = (ids >= tok.velocity_offset) & (ids < tok.instrument_offset)
        is_instrument = (ids >= tok.instrument_offset) & (ids < tok.pad_id)
        self.durations = torch.as_tensor(self.lengths, device=device)
        lengths = torch.as_tensor(self.lengths)
        value = torch.where(is_shift, ids + 1, 0)
        value = torch.where(is_note | is_control, (ids - tok.note_offset) % NUM_PITCHES, value)
        value = torch.where(is_duration, lengths[(ids - tok.duration_offset).clamp(0, self.lengths.size - 1)], value)
        value = torch.where(is_instrument, ids - tok.instrument_offset, value)
        phase = torch.arange(4)[:, None]  # the phase before the token
        after = torch.where(is_velocity, AFTER_VELOCITY, phase)  # kinds are disjoint: order does not matter
        after = torch.where(is_instrument, AFTER_INSTRUMENT, after)
        after = torch.where(is_note | is_control, AFTER_NOTE, after)
        after = torch.where(is_duration | is_shift, FREE, after)
        def each_phase(t: torch.Tensor) -> torch.Tensor:  # the same whatever the phase before
            return t.expand(4, -1)

        # the phase after, the clock's advance, the value
        self.moves = torch.stack([after, each_phase(torch.where(is_shift, value, 0)), each_phase(value)],
                                 -1).flatten(0, 1).to(device)
        # ANTICIPATE (the clock goes back by the lead), an INSTRUMENT token, a NOTE that takes the
        # instrument an INSTRUMENT named (an event's; a control's does not), a NOTE, an event's
        # DURATION after its NOTE, any DURATION
        self.flags = torch.stack([each_phase(ids == tok.anticipate_id), each_phase(is_instrument),
                                  is_note & (phase == AFTER_INSTRUMENT), each_phase(is_note),
                                  is_duration & (phase == AFTER_NOTE), each_phase(is_duration)],
                                 -1).flatten(0, 1).to(device)
        self.shift_steps = torch.arange(1, tok.max_shift_steps + 1, device=device)
        self.pitches = torch.arange(NUM_PITCHES, device=device)

    def _gates(self, tok) -> torch.Tensor:
        """(16, V): the mask of each (every control placed, phase, room for an event) state, placed
        * 8 + phase * 2 + room, before the per-row parts: the silent pitches, the shifts up to the
        next control's place, the lengths up to a given note of the voice."""
        placed, phase, room = (t.flatten() for t in torch.meshgrid(torch.arange(2), torch.arange(4), torch.arange(2),
                                                                   indexing="ij"))
        free = phase == FREE
        room = room.bool() & free
        named = (phase == AFTER_VELOCITY) | (phase == AFTER_INSTRUMENT)
        fits = torch.ones(self.lengths.size, dtype=torch.bool)
        if self.max_steps is not None:
            fits = torch.as_tensor(self.lengths) <= self.max_steps
            fits[0] = True  # the shortest always fits
        m = torch.zeros(16, tok.vocab_size, dtype=torch.bool)
        m[:, :tok.max_shift_steps] = free[:, None]
        m[:, tok.velocity_offset:tok.pad_id] = room[:, None]  # VELOCITY and INSTRUMENT
        m[:, tok.instrument_offset:tok.pad_id] |= (phase == AFTER_VELOCITY)[:, None]
        m[:, tok.note_offset:tok.control_offset] = (room | named)[:, None]
        m[:, tok.duration_offset:tok.velocity_offset] = (phase == AFTER_NOTE)[:, None] & fits[None]
        m[:, tok.eos_id] = free & placed.bool()
        return m & self.base.cpu()

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
        ids = self._control_tokens(rest, state)
        ends = np.flatnonzero((ids >= tok.duration_offset) & (ids < tok.velocity_offset)) + 1
        self.forced = torch.as_tensor(np.append(ids, tok.pad_id), device=device)
        self.f_start = torch.as_tensor(np.concatenate(([0], ends)), device=device)
        self.f_key = torch.as_tensor(np.append(rest.onset - lead, NEVER), device=device)
        self.n_rest = len(rest)

    def _control_tokens(self, rest: GridNotes, state: int) -> np.ndarray:
        """The tokens of the controls `rest`, the controls' instrument so far being `state`, without
        the time tokens between them (which the model samples)."""
        tok = self.tok
        ids = tok.encode_grid(GridNotes.empty(), rest, clock=int(rest.onset.min(initial=tok.lead)) - tok.lead,
                              state=(-1, state, -1))
        return ids[ids >= tok.note_offset]

    # ---- state -------------------------------------------------------------------------------
    def observe(self, ids: torch.Tensor) -> None:
        ids = ids.view(self.batch, -1)
        for t in range(ids.shape[1]):
            self._step(ids[:, t])

    def _step(self, x: torch.Tensor) -> None:
        k = torch.add(x, self.phase, alpha=self.tok.vocab_size)
        after, advance, v = self.moves[k].unbind(1)
        anticipate, instrument, takes, note, ends, duration = self.flags[k].unbind(1)
        self.clock = torch.where(anticipate, -self.tok.lead, self.clock + advance)
        self.pending = torch.where(instrument, v, self.pending)
        # an INSTRUMENT before an event's NOTE changes the events' instrument (before a control's, not)
        self.program = torch.where(takes, self.pending, self.program)
        self.voice = torch.where(note, torch.add(v, self.program, alpha=NUM_PITCHES), self.voice)
        if self.n_rest:  # controls to place: this token may be a forced control's
            # a finished row is fed PAD from then on: its place in a control's tokens must not move
            forcing = (self.forced_at >= 0) & (x != self.tok.pad_id)
            ends = ends & ~forcing
            placed = duration & forcing
            self.next_control = self.next_control + placed.long()
            self.forced_at = torch.where(placed, -1, torch.where(forcing, self.forced_at + 1, self.forced_at))
        quiet = self._quiet(x)
        if quiet is not None:  # a token that states no event of the model's
            ends = ends & ~quiet
        rows = torch.nonzero(ends).flatten()  # an event's length: its voice's release
        if rows.numel():
            self.release[rows, self.voice[rows]] = self.clock[rows] + v[rows]
            self.recent[rows, self.events[rows] % RECENT] = self.clock[rows] + v[rows]
            self.events = self.events + ends.long()
        self.phase = after

    def _quiet(self, x: torch.Tensor) -> torch.Tensor | None:
        """Rows whose token `x` is not part of the music (a preview of given notes), or None."""
        return None

    # ---- masks --------------------------------------------------------------------------------
    def allowed(self) -> torch.Tensor:
        if self.n_rest:
            j = self.next_control.clamp(max=self.n_rest)
            key = self.f_key[j]
            due = (self.phase == FREE) & (self.forced_at < 0) & self._reached(key)
            self.forced_at = torch.where(due, self.f_start[j], self.forced_at)
        silent, count = self._sounding()
        state = torch.add(self._event_room(count), self.phase, alpha=2)
        if self.n_rest:
            m = self.gates[torch.add(state, self.next_control >= self.n_rest, alpha=8)]
        else:
            m = self.gates_placed[state]
        tok = self.tok
        m.narrow(1, tok.note_offset, NUM_PITCHES).logical_and_(silent)  # narrow: no copy back as `m[...] &=`
        if self.programs is not None:  # only the programs asked for: a NOTE on another waits for an INSTRUMENT
            m.narrow(1, tok.instrument_offset, NUM_INSTRUMENTS).logical_and_(self.programs)
            program = torch.where(self.phase == AFTER_INSTRUMENT, self.pending, self.program)
            m.narrow(1, tok.note_offset, NUM_PITCHES).logical_and_(self.programs[program][:, None])
        self._mask_time(m, key if self.n_rest else None)
        if self.c_onset.numel():
            m.narrow(1, tok.duration_offset, self.lengths.size).logical_and_(self._lengths())
        if self.n_rest:
            forcing = torch.nonzero(self.forced_at >= 0).flatten()
            if forcing.numel():
                m[forcing] = False
                m[forcing, self.forced[self.forced_at[forcing]]] = True
        return m

    def _reached(self, key: torch.Tensor) -> torch.Tensor:
        """Rows whose clock has reached the place of their next control (`key`)."""
        return self.clock >= key

    def _mask_time(self, m: torch.Tensor, key: torch.Tensor | None) -> None:
        """Narrow the time tokens of `m`: shifts only up to the next control's place (`key`)."""
        if key is not None:
            cap = (key - self.clock).clamp(min=0, max=self.tok.max_shift_steps)
            m.narrow(1, 0, self.tok.max_shift_steps).logical_and_(self.shift_steps[None] <= cap[:, None])

    def _sounding(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, 128): the silent pitches of the instrument each row's next note would play, and
        (B,): how many notes (events and controls) sound at each row's clock (None without a
        polyphony cap, which alone needs it)."""
        program = torch.where(self.phase == AFTER_INSTRUMENT, self.pending, self.program)
        silent = self.by_program[self.rows, program] <= self.clock[:, None]
        count = (self.recent > self.clock[:, None]).sum(1) if self.max_polyphony is not None else None
        if self.c_onset.numel():
            on = (self.c_onset[None] <= self.clock[:, None]) & (self.c_release[None] > self.clock[:, None])
            if count is not None:
                count = count + on.sum(1)
            mine = on & (self.c_program[None] == program[:, None])
            hits = torch.zeros(silent.shape, dtype=torch.int32, device=self.device)
            silent &= hits.scatter_add_(1, self.c_pitch.expand_as(on), mine.int()) == 0
            if self.plan.under:  # voices under the melody: below the highest given note sounding
                top = torch.where(on, self.c_pitch[None], -1).amax(1)
                top = torch.where(top < 0, NUM_PITCHES, top)  # none sounding: no ceiling
                silent &= self.pitches[None] < top[:, None]
        return silent, count

    def _event_room(self, count: torch.Tensor | None) -> torch.Tensor:
        """Rows where an event may start now (when the phase allows one): inside the plan's span,
        under the polyphony cap."""
        ok = self.clock >= max(self.plan.events_from, 0)
        if self.plan.events_until is not None:
            ok &= self.clock < self.plan.events_until
        if self.max_polyphony is not None:
            ok &= count < self.max_polyphony
        return ok

    def _lengths(self) -> torch.Tensor:
        """(B, durations): the lengths that do not run into a given note of the voice just named
        (`max_note_seconds` is in the gates)."""
        later = (self.c_voice[None] == self.voice[:, None]) & (self.c_onset[None] > self.clock[:, None])
        # amin, not min(1): under load, min over a dim waited on threads for milliseconds
        gap = torch.where(later, self.c_onset[None] - self.clock[:, None], NEVER).amin(1)
        fits = self.durations[None] <= gap[:, None]
        fits[:, 0] = True  # the shortest always fits
        return fits
