"""Grammar-constrained decoding: masks for logits that would make an invalid performance.

For the performance vocabulary the state per sequence is the set of sounding pitches:

* a note-on is allowed only for a silent pitch (and, with a polyphony cap, only while fewer than
  `max_polyphony` notes sound);
* a note-off only for a pitch that sounds and has sounded for at least one time step (a note-off
  right after its own note-on would make a zero-length note);
* time shifts and velocities are always allowed; PAD and BOS never; EOS only when nothing sounds
  (so a piece can only end cleanly), and `close()` releases whatever still sounds at the end;
* with `max_note_seconds`, a note that has sounded that long must be released next: an
  under-trained model's usual failure is to forget a note-off and hold a note for a minute.

Tokenizers without a grammar get `SpecialsOnly`, which only forbids PAD and BOS. A tokenizer
hands out its grammar (`Tokenizer.grammar`), so the sampler never asks which tokenizer it has.
"""

from __future__ import annotations

import torch


class SpecialsOnly:
    """The rules every tokenizer shares. `tok` is the tokenizer that hands out this grammar
    (`Tokenizer.grammar`), so this module never imports one."""

    def __init__(self, tok, batch: int, device, allow_eos: bool = True):
        self.tok = tok
        self.base = torch.ones(tok.vocab_size, dtype=torch.bool, device=device)
        self.base[list(tok.special_ids)] = False  # PAD, BOS (and style tokens) are never sampled
        self.base[tok.eos_id] = tok.eos_id != tok.pad_id
        if not allow_eos:
            self.base[tok.eos_id] = False
        self.allow_eos = allow_eos
        self.batch = batch

    def observe(self, ids: torch.Tensor) -> None:
        """Advance the state with tokens (B,) or (B, T)."""

    def allowed(self) -> torch.Tensor:
        return self.base.expand(self.batch, -1)

    def close(self, seqs: list[list[int]]) -> list[list[int]]:
        return seqs


class PerformanceGrammar(SpecialsOnly):
    def __init__(self, tok, batch: int, device, max_polyphony: int | None = None, allow_eos: bool = True,
                 max_note_seconds: float | None = None):
        super().__init__(tok, batch, device, allow_eos)
        self.sounding = torch.zeros(batch, 128, dtype=torch.bool, device=device)
        self.fresh = torch.zeros(batch, 128, dtype=torch.bool, device=device)  # on since the last shift
        self.max_polyphony = max_polyphony
        self.max_steps = None if max_note_seconds is None else max(1, round(max_note_seconds * tok.steps_per_second))
        self.clock = torch.zeros(batch, 1, dtype=torch.long, device=device)  # steps since the start
        self.onset = torch.zeros(batch, 128, dtype=torch.long, device=device)
        self.on0, self.off0 = tok.note_on_offset, tok.note_off_offset
        self._tables(tok, device)

    def _tables(self, tok, device) -> None:
        """What each token does to the state, one row per token id: observing a token is then a
        few row lookups instead of a dozen comparisons (it runs at every sampled token, where each
        operator's fixed cost is what shows)."""
        ids = torch.arange(tok.vocab_size, device=device)[:, None]
        pitch = torch.zeros(tok.vocab_size, 128, dtype=torch.bool, device=device).scatter_(1, ids % 128, True)
        is_on = ids < self.off0
        is_off = (ids >= self.off0) & (ids < self.off0 + 128)
        is_shift = (ids >= tok.shift_offset) & (ids < tok.velocity_offset)
        self._starts = pitch & is_on  # (V, 128): the pitch a note-on starts
        self._keeps = ~(pitch & is_off)  # (V, 128): every pitch but the one a note-off releases
        self._unshifted = ~is_shift  # (V, 1): a time shift ends every note's first step
        self._advance = torch.where(is_shift, ids - tok.shift_offset + 1, 0)  # (V, 1): time steps
        self._shift_steps = torch.arange(1, tok.max_shift_steps + 1, device=device)[None, :]  # each shift's steps

    def observe(self, ids: torch.Tensor) -> None:
        ids = ids.view(self.batch, -1)
        for t in range(ids.shape[1]):  # prompts are short; steps are one token
            x = ids[:, t]
            on = self._starts.index_select(0, x)
            self.sounding = (self.sounding | on) & self._keeps.index_select(0, x)
            self.fresh = (self.fresh | on) & self._unshifted.index_select(0, x)
            if self.max_steps is not None:
                self.onset = torch.where(on, self.clock, self.onset)
                self.clock = self.clock + self._advance.index_select(0, x)

    def allowed(self) -> torch.Tensor:
        # narrow().copy_() rather than slice assignment, and clone() rather than repeat(): this runs
        # at every token, where each operator's fixed cost, not the work, is what shows
        m = self.base.expand(self.batch, -1).clone()
        on = ~self.sounding
        if self.max_polyphony is not None:
            full = self.sounding.sum(1, keepdim=True) >= self.max_polyphony
            on = on & ~full
        m.narrow(1, self.on0, 128).copy_(on)
        m.narrow(1, self.off0, 128).copy_(self.sounding & ~self.fresh)
        if self.allow_eos:  # otherwise EOS is already off in `base`
            m[:, self.tok.eos_id] = ~self.sounding.any(1)
        if self.max_steps is not None:
            left = torch.where(self.sounding, self.max_steps - (self.clock - self.onset), self.max_steps)
            room = left.min(1, keepdim=True).values  # steps until the first note is due
            m[:, self.tok.shift_offset:self.tok.velocity_offset] &= self._shift_steps <= room  # no overshoot
            overdue = self.sounding & (left <= 0)
            rows = overdue.any(1)
            if bool(rows.any()):  # only the release of an overdue note may come next
                m[rows] = False
                m[:, self.off0:self.off0 + 128] |= overdue
        return m

    def close(self, seqs: list[list[int]]) -> list[list[int]]:
        """Append a note-off for every pitch still sounding (before a trailing EOS, if any), after
        one time step when a note started at the very end."""
        out = []
        for b, s in enumerate(seqs):
            offs = [self.off0 + int(p) for p in torch.nonzero(self.sounding[b]).flatten().tolist()]
            if bool(self.fresh[b].any()):
                offs = [self.tok.time_shift(1)] + offs
            if s and s[-1] == self.tok.eos_id:
                out.append(s[:-1] + offs + [s[-1]])
            else:
                out.append(s + offs)
        return out

