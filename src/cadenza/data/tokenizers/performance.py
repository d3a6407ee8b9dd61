"""The Performance RNN / Music Transformer event vocabulary (Oore et al. 2018; Huang et al. 2018).

388 events in Magenta's order (``note_seq.PerformanceOneHotEncoding``), then the special tokens:

====================  ==========  ===============================================
event                 ids         meaning
====================  ==========  ===============================================
NOTE_ON  p            0 .. 127    pitch p starts sounding
NOTE_OFF p            128 .. 255  pitch p stops sounding
TIME_SHIFT k          256 .. 355  advance time by k steps of 10 ms, k = 1 .. 100
VELOCITY b            356 .. 387  later note-ons use velocity bin b = 1 .. 32
PAD, BOS, EOS         388 .. 390  padding, begin and end of a piece
====================  ==========  ===============================================

Times are quantised to the nearest 10 ms; a gap longer than 1 s becomes several time shifts
(100 steps each, remainder last). At one instant all note-offs come before the note-ons, each
group by ascending pitch, so a re-struck pitch is released before it sounds again. A velocity
event is written only when the bin changes. Velocity bins follow Magenta: bin = (v - 1) * 32 // 127
+ 1, decoded to 1 + (bin - 1) * 4.

Encoding and decoding are vectorised with numpy; the tests check them against a plain loop.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from cadenza.data.midi import Notes, run_max
from cadenza.data.tokenizers.base import DecodeReport, Encoded, NoteDecoding, Tokenizer, TokenizerError

NUM_PITCHES = 128
MAX_HOURS = 24  # a longer piece is a corrupt tempo or delta time, and would be billions of tokens


class PerformanceTokenizer(NoteDecoding, Tokenizer):
    """Magenta's performance events with 10 ms time shifts and 32 velocity bins (388 + 3 ids).

    >>> tok = PerformanceTokenizer()
    >>> tok.vocab_size, tok.note_off(72), tok.time_shift(100), tok.velocity(32)
    (391, 200, 355, 387)
    """

    name = "performance"

    def __init__(self, steps_per_second: int = 100, max_shift_steps: int = 100, velocity_bins: int = 32,
                 sustain: bool = True):
        if steps_per_second <= 0 or max_shift_steps <= 0 or not 1 <= velocity_bins <= 127:
            raise TokenizerError(
                "steps_per_second and max_shift_steps must be positive and velocity_bins in 1..127"
            )
        self.steps_per_second = int(steps_per_second)
        self.max_shift_steps = int(max_shift_steps)
        self.velocity_bins = int(velocity_bins)
        self.sustain = bool(sustain)
        self.note_on_offset = 0
        self.note_off_offset = NUM_PITCHES
        self.shift_offset = 2 * NUM_PITCHES
        self.velocity_offset = self.shift_offset + self.max_shift_steps
        self.num_events = self.velocity_offset + self.velocity_bins
        self.pad_id = self.num_events
        self.bos_id = self.num_events + 1
        self.eos_id = self.num_events + 2
        self.vocab_size = self.num_events + 3
        self._bin_size = math.ceil(127 / self.velocity_bins)
        self.default_velocity_bin = self.velocity_to_bin(64)

    def params(self) -> dict[str, Any]:
        return {
            "steps_per_second": self.steps_per_second,
            "max_shift_steps": self.max_shift_steps,
            "velocity_bins": self.velocity_bins,
            "sustain": self.sustain,
        }

    # ---- single ids (documentation, tests, grammar) ------------------------------------------
    def note_on(self, pitch: int) -> int:
        return self.note_on_offset + pitch

    def note_off(self, pitch: int) -> int:
        return self.note_off_offset + pitch

    def time_shift(self, steps: int) -> int:
        if not 1 <= steps <= self.max_shift_steps:
            raise TokenizerError(f"time shift must be 1..{self.max_shift_steps} steps, got {steps}")
        return self.shift_offset + steps - 1

    def velocity(self, bin_: int) -> int:
        if not 1 <= bin_ <= self.velocity_bins:
            raise TokenizerError(f"velocity bin must be 1..{self.velocity_bins}, got {bin_}")
        return self.velocity_offset + bin_ - 1

    def velocity_to_bin(self, velocity):
        v = np.asarray(velocity, np.int64)
        return (v - 1) * self.velocity_bins // 127 + 1

    def bin_to_velocity(self, bin_):
        return 1 + (np.asarray(bin_, np.int64) - 1) * self._bin_size

    def token_name(self, i: int) -> str:
        i = int(i)
        if i < self.note_off_offset:
            return f"NOTE_ON_{i}"
        if i < self.shift_offset:
            return f"NOTE_OFF_{i - self.note_off_offset}"
        if i < self.velocity_offset:
            return f"TIME_SHIFT_{i - self.shift_offset + 1}"
        if i < self.num_events:
            return f"VELOCITY_{i - self.velocity_offset + 1}"
        return {self.pad_id: "PAD", self.bos_id: "BOS", self.eos_id: "EOS"}.get(i, f"<{i}>")

    # ---- encoding -----------------------------------------------------------------------------
    def read_options(self) -> dict:
        return {"sustain": self.sustain}

    def encode(self, source) -> Encoded:
        notes, stats = self.read(source)
        ids, grid = self.encode_notes(notes, return_stats=True)
        stats.update(grid)
        return Encoded(ids=ids, notes=len(notes), stats=stats, durations=notes.end - notes.start)

    def quantize(self, notes: Notes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Notes on the step grid: (start, end, pitch, velocity bin), ordered by pitch then start.

        Collisions the grid creates are resolved: two onsets of one pitch on one step become one
        note lasting until the later release, and a note never outlasts the next onset of its pitch.
        """
        sps = self.steps_per_second
        x, y = notes.start * sps, notes.end * sps
        s = np.floor(x + 0.5).astype(np.int64)
        e = np.floor(y + 0.5).astype(np.int64)
        short = e <= s
        if short.any():
            # A note shorter than a step would round to nothing: round its onset down instead,
            # or else its release up, which keeps both within one step of the truth.
            down = short & (np.floor(x) < s)
            s = s - down
            e = np.where(short & ~down, np.ceil(y).astype(np.int64), e)
        b = self.velocity_to_bin(notes.velocity)
        if s.size and e.max() > MAX_HOURS * 3600 * sps:
            raise TokenizerError(f"the piece lasts {e.max() / sps / 3600:,.0f} hours; pieces longer than "
                                 f"{MAX_HOURS} hours are refused (a corrupt tempo or delta time?)")
        p = notes.pitch
        # `Notes` are ordered by pitch then onset, and rounding keeps that order: no sort needed.
        same = p[:-1] == p[1:]
        dup = same & (s[:-1] == s[1:])
        merged = int(np.count_nonzero(dup))
        if merged:  # two onsets of one pitch on one step become one note, to the later release, loudest
            e, b = run_max(e, dup), run_max(b, dup)
            keep = np.append(~dup, True)
            s, e, p, b = s[keep], e[keep], p[keep], b[keep]
            same = p[:-1] == p[1:]
        e[:-1] = np.where(same, np.minimum(e[:-1], s[1:]), e[:-1])
        return s, e, p, b, {"grid_merged": merged}

    def encode_notes(self, notes: Notes, return_stats: bool = False):
        """Vectorised encoding of `Notes` into ids (numpy int64, no bos/eos)."""
        s, e, p, b, stats = self.quantize(notes)
        n = s.size
        if n == 0:
            ids = np.zeros(0, np.int64)
            return (ids, stats) if return_stats else ids
        # One sort of a packed key: time, then note-offs (code p) before note-ons (code 128 + p),
        # then pitch; the velocity bin rides along in the low bits. `code ^ 128` is the event id.
        key = np.concatenate(((e << 15) | (p << 7), (s << 15) | ((p + 128) << 7) | b))
        key.sort()
        times, code, vbin = key >> 15, (key >> 7) & 255, key & 127
        is_on = code >= 128

        m = self.max_shift_steps
        delta = np.empty_like(times)
        delta[0] = times[0]
        np.subtract(times[1:], times[:-1], out=delta[1:])
        n_shift = (delta + m - 1) // m
        on_idx = np.flatnonzero(is_on)
        on_bins = vbin[on_idx]
        changed = np.empty(on_idx.size, bool)
        changed[0] = True
        np.not_equal(on_bins[1:], on_bins[:-1], out=changed[1:])
        need_vel = np.zeros(times.size, bool)
        need_vel[on_idx[changed]] = True

        counts = n_shift + need_vel + 1
        ends = np.cumsum(counts)
        out = np.empty(int(ends[-1]), np.int64)
        out[ends - 1] = code ^ 128
        out[ends[need_vel] - 2] = self.velocity_offset + vbin[need_vel] - 1
        first = ends - counts
        if n_shift.max() <= 1:  # the common case: no gap longer than one shift
            has = n_shift == 1
            out[first[has]] = self.shift_offset + delta[has] - 1
        else:
            ev = np.repeat(np.arange(times.size), n_shift)
            k = np.arange(ev.size) - (np.cumsum(n_shift) - n_shift)[ev]
            last = k == n_shift[ev] - 1
            steps = np.where(last, delta[ev] - m * (n_shift[ev] - 1), m)
            out[first[ev] + k] = self.shift_offset + steps - 1
        return (out, stats) if return_stats else out

    # ---- decoding -----------------------------------------------------------------------------
    def decode_notes(self, ids) -> tuple[Notes, DecodeReport]:
        """Vectorised decoding of any id sequence into `Notes`, repairing what cannot be played."""
        report = DecodeReport()
        ids = self.content(ids, report)

        is_shift = (ids >= self.shift_offset) & (ids < self.velocity_offset)
        time = np.cumsum(np.where(is_shift, ids - self.shift_offset + 1, 0))
        end_of_piece = int(time[-1]) if time.size else 0
        is_vel = ids >= self.velocity_offset
        last_vel = np.maximum.accumulate(np.where(is_vel, np.arange(ids.size), -1)) if ids.size else ids
        vbin = np.where(last_vel >= 0, ids[np.maximum(last_vel, 0)] - self.velocity_offset + 1,
                        self.default_velocity_bin)

        ev = np.flatnonzero(ids < self.shift_offset)
        on = ids[ev] < self.note_off_offset
        pitch = ids[ev] % NUM_PITCHES
        order = np.argsort(pitch, kind="stable")  # per pitch, in sequence order
        ev, on, pitch = ev[order], on[order], pitch[order]
        t = time[ev]
        same_next = np.zeros(ev.size, bool)
        same_next[:-1] = pitch[:-1] == pitch[1:]
        prev_on = np.zeros(ev.size, bool)
        prev_on[1:] = on[:-1] & same_next[:-1]
        next_on = np.zeros(ev.size, bool)
        next_on[:-1] = on[1:] & same_next[:-1]
        next_t = np.empty_like(t)
        next_t[:-1] = t[1:]

        report.orphan_note_offs = int(np.count_nonzero(~on & ~prev_on))
        report.restarted_notes = int(np.count_nonzero(on & next_on))
        at_end = on & ~same_next
        report.closed_at_end = int(np.count_nonzero(at_end))
        start = t[on]
        end = np.where(same_next, next_t, end_of_piece)[on]
        end = np.where(at_end[on], np.maximum(end, start + 1), end)  # a last note never vanishes
        keep = end > start
        report.zero_length = int(np.count_nonzero(~keep))
        sps = self.steps_per_second
        notes = Notes.from_arrays(
            start[keep] / sps, end[keep] / sps, pitch[on][keep],
            self.bin_to_velocity(vbin[ev[on][keep]]),
        )
        return notes, report

    # ---- what the sampler asks ----------------------------------------------------------------
    def token_seconds(self) -> np.ndarray:
        secs = np.zeros(self.vocab_size)
        secs[self.shift_offset:self.velocity_offset] = np.arange(1, self.max_shift_steps + 1) / self.steps_per_second
        return secs

    def encode_primer(self, source, seconds: float | None = None) -> np.ndarray:
        """A primer's ids; with `seconds`, its opening only, notes sounding at that instant ending there."""
        if seconds is None:
            return self.encode(source).ids
        notes, _ = self.read(source)
        keep = notes.start < seconds
        notes = Notes.from_arrays(notes.start[keep], np.minimum(notes.end[keep], seconds), notes.pitch[keep],
                                  notes.velocity[keep])
        return self.encode_notes(notes)

    def grammar(self, batch: int, device, constrained: bool = True, max_polyphony: int | None = None,
                allow_eos: bool = True, max_note_seconds: float | None = None):
        # lazy: grammars hold torch masks; tokenizing (data preparation) does not import torch
        from cadenza.data.tokenizers.grammar import PerformanceGrammar, SpecialsOnly

        if not constrained:
            return SpecialsOnly(self, batch, device, allow_eos)
        return PerformanceGrammar(self, batch, device, max_polyphony, allow_eos, max_note_seconds)

    # ---- augmentation -------------------------------------------------------------------------
    def pitch_range(self, ids: np.ndarray) -> tuple[int, int] | None:
        ids = np.asarray(ids)
        notes = ids[ids < self.shift_offset] % NUM_PITCHES
        return (int(notes.min()), int(notes.max())) if notes.size else None

    def transpose(self, ids: np.ndarray, semitones: int) -> np.ndarray:
        ids = np.asarray(ids).astype(np.int64)
        if semitones == 0:
            return ids
        rng = self.pitch_range(ids)
        if rng and (rng[0] + semitones < 0 or rng[1] + semitones > 127):
            raise TokenizerError(f"transposing pitches {rng} by {semitones} leaves the MIDI range 0..127")
        out = ids.copy()
        mask = ids < self.shift_offset
        out[mask] += semitones
        return out

    def stretch(self, ids: np.ndarray, factor: float) -> np.ndarray:
        """Scale every gap between events by `factor` (runs of time shifts are re-split)."""
        ids = np.asarray(ids).astype(np.int64)
        if factor == 1.0 or ids.size == 0:
            return ids
        m = self.max_shift_steps
        is_shift = (ids >= self.shift_offset) & (ids < self.velocity_offset)
        run_start = is_shift.copy()
        run_start[1:] &= ~is_shift[:-1]
        run_id = np.cumsum(run_start) - 1
        totals = np.bincount(run_id[is_shift], weights=ids[is_shift] - self.shift_offset + 1,
                             minlength=int(run_start.sum()))
        new_tot = np.maximum(1, np.floor(totals * factor + 0.5).astype(np.int64))
        n_new = (new_tot + m - 1) // m
        keep = ~is_shift | run_start
        kept = ids[keep]
        kept_run = np.where(run_start[keep], run_id[keep], -1)
        counts = np.where(kept_run >= 0, n_new[np.maximum(kept_run, 0)], 1)
        ends = np.cumsum(counts)
        out = np.empty(int(ends[-1]), np.int64)
        plain = kept_run < 0
        out[ends[plain] - 1] = kept[plain]
        r = np.flatnonzero(~plain)
        ev = np.repeat(r, counts[r])
        k = np.arange(ev.size) - np.repeat(np.cumsum(counts[r]) - counts[r], counts[r])
        tot = new_tot[kept_run[ev]]
        last = k == counts[ev] - 1
        steps = np.where(last, tot - m * (counts[ev] - 1), m)
        out[ends[ev] - counts[ev] + k] = self.shift_offset + steps - 1
        return out
