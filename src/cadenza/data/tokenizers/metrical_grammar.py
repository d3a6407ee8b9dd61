"""Decoding masks for the metrical vocabulary: the note rules of `note_grammar`, on a clock of bars.

The note rules are `NoteGrammar`'s (a note is ``[VELOCITY] [INSTRUMENT] NOTE DURATION``, never on a
sounding voice, under the polyphony cap, inside the plan's span; controls forced where they
belong). What differs is time, which is set rather than summed. Each row keeps where its bar
starts, its length, its position and its tempo, and the masks keep a bar well formed:

* a bar opens with BAR, then its METER (only right after BAR) and TEMPO, then positions, each later
  than the last and inside the bar; a note needs a position in its bar first; a piece with no
  given notes opens with a note on its first beat (no empty bar, no rest, before it);
* a given note (a control) is forced at its own position, before the notes written there, so no
  BAR or POS may pass the next control's place;
* with a plan (an infill or an accompaniment) the bars are the given music's: its METER is forced
  where its signature changes and refused elsewhere, and TEMPO is never sampled (the given music's
  tempo map times the result); with `fixed_meter` (a meter asked for) only the prompt states them;
* EOS only right after a BAR that closes a bar, once every control is placed and the length asked
  for (`bars`, or `seconds` to the next bar line) is reached; BAR never past `bars`.

`finished()` says which rows have reached their length (the sampler stops them there).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from cadenza.data.tokenizers.metrical_grid import METERS, QPM, TPQ, bar_signature, meter_ticks
from cadenza.data.tokenizers.note_grammar import FREE, NoteGrammar
from cadenza.data.tokenizers.note_grid import GridNotes, Plan

OPENED, METERED, TEMPOED, PLACED = 1, 2, 3, 0  # where a row is in its bar: after BAR, METER, TEMPO, a POS


class MetricalGrammar(NoteGrammar):
    def __init__(self, tok, batch: int, device, max_polyphony: int | None = None, allow_eos: bool = True,
                 plan: Plan | None = None, programs=None, bars: int | None = None, seconds: float | None = None,
                 fixed_meter: bool = False):
        self.target_bars, self.target_seconds = bars, seconds
        super().__init__(tok, batch, device, max_polyphony, allow_eos, None, plan, programs)
        z = torch.zeros(batch, dtype=torch.long, device=device)
        self.bar_start, self.bars, self.stage = z.clone(), z.clone(), z + PLACED
        self.bar_len = z + meter_ticks(4, 4)
        self.pos_set = torch.zeros(batch, dtype=torch.bool, device=device)
        self.tempo = z + int(np.argmin(np.abs(QPM - 120.0)))
        exact = torch.float32 if torch.device(device).type == "mps" else torch.float64  # MPS has no float64
        self.seconds = torch.zeros(batch, dtype=exact, device=device)  # kept for a length in seconds only
        self.meter_ticks = torch.tensor([meter_ticks(n, d) for n, d in METERS], device=device)
        self.qpm = torch.as_tensor(QPM, device=device)
        self.pos_ticks = torch.arange(tok.tempo_offset - tok.pos_offset, device=device)
        self.fixed = plan is not None or fixed_meter
        self._plan_bars(tok, device)
        self.in_ahead = torch.zeros(batch, dtype=torch.bool, device=device)  # inside a preview block
        self.pv_at = z - 1  # position in the forced preview tokens; -1: not forcing
        self.pv_bar = z - 1  # the bar whose preview is written
        self._time_tables(tok, device)

    def _time_tables(self, tok, device) -> None:
        """Per token id, what it is for time, so a step is two row lookups: the flags BAR, METER,
        POS, TEMPO, a control's CONTROL_NOTE or DURATION (a preview's, inside one), AHEAD; the values
        a METER's bar length, a POS's tick, a TEMPO's index, the stage in the bar it leads to."""
        ids = torch.arange(tok.vocab_size)
        meter = (ids >= tok.meter_offset) & (ids < tok.note_offset)
        pos = (ids >= tok.pos_offset) & (ids < tok.tempo_offset)
        tempo = (ids >= tok.tempo_offset) & (ids < tok.meter_offset)
        self.kinds = torch.stack([ids == tok.bar_id, meter, pos, tempo,
                                  (ids >= tok.control_offset) & (ids < tok.velocity_offset),
                                  ids == getattr(tok, "ahead_id", -1)], 1).to(device)
        bar_len = self.meter_ticks.cpu()[(ids - tok.meter_offset).clamp(0, len(METERS) - 1)]
        # where in its bar a row is after the token (-1: where it was): a note's tokens and a POS
        # place it (a preview's do not: `quiet`)
        stage = torch.where(pos | ((ids >= tok.note_offset) & (ids < tok.pad_id)), PLACED, -1)
        stage = torch.where(ids == tok.bar_id, OPENED, torch.where(meter, METERED, torch.where(tempo, TEMPOED, stage)))
        self.values = torch.stack([torch.where(meter, bar_len, 0), torch.where(pos, ids - tok.pos_offset, 0),
                                   torch.where(tempo, (ids - tok.tempo_offset).clamp(0, QPM.size - 1), 0), stage],
                                  1).to(device)
        self.per_tick = (60.0 / (self.qpm.double().cpu() * TPQ)).to(device, self.seconds.dtype)  # by TEMPO index
        self.previews = bool(self.pv_end[-1] > 0)  # only a plan with previews keeps their state
        self.meters_forced = bool((self.forced_meter >= 0).any())
        self.own_piece = not len(self.plan.controls)
        self.quiet = torch.zeros_like(self.in_ahead)
        self.at = {"pos": tok.pos_offset, "bar": tok.bar_id, "meter": tok.meter_offset, "tempo": tok.tempo_offset,
                   "eos": tok.eos_id}  # ids read at every step, not through the styled tokenizer

    def _plan_bars(self, tok, device) -> None:
        """The METER each bar of the plan's music must open with (-1: none may), by bar index."""
        meter = self.plan.controls.meter if len(self.plan.controls) else None
        forced = [-1]
        if meter is not None:
            end = int(max(self.plan.controls.end.max(), self.plan.events_until or 0))
            starts = np.round(meter.bar_starts(end / TPQ) * TPQ).astype(np.int64)
            sig, forced = None, []
            for b, nb in itertools.pairwise(starts):
                s = bar_signature(int(nb - b), *meter.signature_of_bar(b / TPQ))
                forced.append(tok.meter(*s) if s != sig else -1)
                sig = s
            forced.append(-1)  # past the given music the last meter goes on
        self.forced_meter = torch.as_tensor(forced, device=device)
        blocks = [[]] * len(forced)
        if self.plan.previews and meter is not None:  # what bar j shows of bar j + 1
            c = self.plan.controls
            blocks = [tok._preview(c, int(a), int(b)) for a, b in itertools.pairwise(starts[1:])] + [[], []]
        ends = np.cumsum([len(b) for b in blocks])
        self.pv_tokens = torch.as_tensor(np.array([t for b in blocks for t in b] + [tok.pad_id]), device=device)
        self.pv_start = torch.as_tensor(np.concatenate([[0], ends[:-1]]), device=device)
        self.pv_end = torch.as_tensor(ends, device=device)

    def _control_tokens(self, rest: GridNotes, state: int) -> np.ndarray:
        return self.tok._note_tokens(rest, np.zeros(len(rest), bool), (-1, state, -1))[0]

    # ---- state -------------------------------------------------------------------------------
    def _quiet(self, x: torch.Tensor) -> torch.Tensor:
        return self.quiet  # this step's, from `_step`'s lookup

    def _step(self, x: torch.Tensor) -> None:
        bar, meter, pos, tempo, control, ahead = self.kinds[x].unbind(1)
        bar_len, tick, tempo_at, stage = self.values[x].unbind(1)
        self.quiet = self.in_ahead & control
        super()._step(x)  # the note state; time tokens and previews leave it as it was
        self.in_ahead = self.quiet | ahead
        if self.previews:
            self.pv_bar = torch.where(ahead, self.bars - 1, self.pv_bar)
            going = (self.pv_at >= 0) & (x != self.tok.pad_id)
            j = (self.bars - 1).clamp(min=0, max=self.pv_end.numel() - 1)
            self.pv_at = torch.where(going, self.pv_at + 1, self.pv_at)
            self.pv_at = torch.where(going & (self.pv_at >= self.pv_end[j]), -1, self.pv_at)
        start = torch.where(bar, self.bar_start + self.bar_len * (self.bars > 0), self.bar_start)
        self.bar_len = torch.where(meter, bar_len, self.bar_len)
        clock = torch.where(pos, start + tick, torch.where(bar, start, self.clock))
        if self.target_seconds is not None:
            self.seconds = self.seconds + (clock - self.clock) * self.per_tick[self.tempo]
        self.clock, self.bar_start = clock, start
        self.tempo = torch.where(tempo, tempo_at, self.tempo)
        self.bars = self.bars + bar
        self.pos_set = torch.where(bar | pos, pos, self.pos_set)
        self.stage = torch.where((stage >= 0) & ~self.quiet, stage, self.stage)

    # ---- masks --------------------------------------------------------------------------------
    def allowed(self) -> torch.Tensor:
        m = super().allowed()
        if self.previews:  # the next bar's given notes, shown after this bar's line
            j = (self.bars - 1).clamp(min=0, max=self.pv_end.numel() - 1)
            meter_due = (self.stage == OPENED) & (self.forced_meter[j.clamp(max=self.forced_meter.numel() - 1)] >= 0)
            due = ((self.phase == FREE) & (self.pv_at < 0) & ~self.pos_set & (self.bars > 0) & (self.stage != PLACED)
                   & (self.pv_bar != self.bars - 1) & ~meter_due & (self.pv_start[j] < self.pv_end[j]))
            self.pv_at = torch.where(due, self.pv_start[j], self.pv_at)
            rows = torch.nonzero(self.pv_at >= 0).flatten()
            if rows.numel():
                m[rows] = False
                m[rows, self.pv_tokens[self.pv_at[rows]]] = True
        if self.has_length:  # a row at its length has nothing more to write: it ends (or pads)
            done = torch.nonzero(self.finished()).flatten()
            if done.numel():
                m[done] = False
                m[done, self.tok.eos_id if self.allow_eos else self.tok.pad_id] = True
        return m

    def _reached(self, key: torch.Tensor) -> torch.Tensor:
        return (self.clock >= key) & self.pos_set  # a control follows its position's POS

    def _event_room(self, count):
        return super()._event_room(count) & self.pos_set

    def _mask_time(self, m: torch.Tensor, key: torch.Tensor | None) -> None:
        at, free, opened = self.at, self.phase == FREE, self.stage == OPENED
        started = self.bars > 0
        # a position later than the last (any after a BAR), inside the bar, not past the next
        # control; the first bar opens with BAR
        lo = self.clock + self.pos_set - self.bar_start
        hi = self.bar_len if key is None else torch.minimum(self.bar_len, key - self.bar_start + 1)
        pos = (self.pos_ticks >= lo[:, None]) & (self.pos_ticks < hi[:, None]) & (free & started)[:, None]
        if self.own_piece:  # and its first note is on its first beat, as 99.7% of the training pieces'
            pos &= (self.pos_ticks == 0) | ((self.events > 0) | (self.bars > 1))[:, None]
        m.narrow(1, at["pos"], self.pos_ticks.numel()).copy_(pos)
        bar = free if key is None else free & (key >= self.bar_start + self.bar_len * started)
        if self.own_piece:  # a piece of its own (no given notes) does not open with an empty bar
            bar = bar & ((self.events > 0) | ~started)  # (1 in 3,000 training pieces does)
        m[:, at["bar"]] = bar & self._may_open() if self.target_bars is not None else bar
        meters, tempos = m.narrow(1, at["meter"], len(METERS)), m.narrow(1, at["tempo"], QPM.size)
        if self.fixed:
            meters.zero_()
            tempos.zero_()
        else:
            meters.copy_((free & opened)[:, None].expand(-1, len(METERS)))
            tempos.copy_((free & (opened | (self.stage == METERED)))[:, None].expand(-1, QPM.size))
        if self.allow_eos:  # (else EOS is never allowed)
            m[:, at["eos"]] &= self._may_end()
        if self.meters_forced:
            j = (self.bars - 1).clamp(min=0, max=self.forced_meter.numel() - 1)  # the bar now open
            rows = torch.nonzero(free & opened & (self.forced_meter[j] >= 0) & started).flatten()
            if rows.numel():  # the given music's meter opens this bar
                m[rows] = False
                m[rows, self.forced_meter[j[rows]]] = True

    def _may_open(self) -> torch.Tensor:
        """Rows that may open another bar: under the bars asked for (their closing line included)."""
        if self.target_bars is None:
            return torch.ones_like(self.pos_set)
        return self.bars < self.target_bars + 1

    def _may_end(self) -> torch.Tensor:
        """Rows that may end: right after a bar line that closes a bar, at the length asked for."""
        ok = (self.stage == OPENED) & (self.bars > 1)
        return ok & self._long_enough()

    def _long_enough(self) -> torch.Tensor:
        ok = torch.ones_like(self.pos_set)
        if self.target_bars is not None:
            ok &= self.bars >= self.target_bars + 1
        if self.target_seconds is not None:
            ok &= self.seconds >= self.target_seconds - 1e-9
        if self.plan.events_until is not None:
            ok &= self.bar_start >= self.plan.events_until
        return ok

    @property
    def has_length(self) -> bool:
        return self.target_bars is not None or self.target_seconds is not None or self.plan.events_until is not None

    def finished(self) -> torch.Tensor:
        """Rows at a bar line where the length asked for is reached (none without a length: such
        rows end with EOS or their token budget). Given notes after the span of an infill need not
        be written: no new note may start there."""
        if not self.has_length:
            return torch.zeros_like(self.pos_set)
        return (self.stage == OPENED) & (self.bars > 1) & self._long_enough()
