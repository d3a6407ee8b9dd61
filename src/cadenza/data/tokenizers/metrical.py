"""Notes on a beat: a note vocabulary on a metrical grid, with bars, positions and tempo.

With 10 ms time shifts (`notes`) a beat is a sum of shifts that a model must count, and the bars of
a score are thrown away. Here time is stated, not summed: every bar opens with BAR, every onset is
a position in its bar (POS, in twelfths of a quarter note, so 16ths and triplets are exact), and
durations are beat fractions. Time signatures (METER, right after the BAR they start) and tempos
(TEMPO) are tokens, so a model reads the meter, and a sample can be asked for in bars.

Given notes (controls: a melody to accompany, the music after a span to fill) are written at their
own position, before the notes the model writes there: a note is answered where it sounds, with
no lookahead, so a melody can be accompanied as it is played. A window opens with its task
(AUTOREGRESS, INFILL or ACCOMPANY) and its key (KEY, or NO_KEY), then BOS where a piece starts.

===================  ===========  ===================================================
token                ids          meaning
===================  ===========  ===================================================
BAR                  0            a bar line (the first opens bar 1; at a piece's end one closes it)
POS p                1 .. 192     the notes that follow start p ticks into the bar (12 a quarter)
TEMPO t              193 .. 241   from here on QPM[t] quarter notes a minute (30 .. 240, 1/16 octave)
METER m              242 .. 301   this bar, and the next ones, are METERS[m] (n/d), right after BAR
NOTE p               302 .. 429   a note of pitch p starts here
CONTROL_NOTE p       430 .. 557   a given note of pitch p starts here
DURATION d           558 .. 605   the note just named lasts LENGTHS[d] ticks (1/12 .. 16 quarters)
VELOCITY b           606 .. 621   later notes (not controls) play at velocity bin b = 1 .. 16
INSTRUMENT i         622 .. 750   the next note plays program i (0 .. 127), 128: drums
PAD, BOS, EOS        751 .. 753   padding, begin and end of a piece
AUTOREGRESS          754          a window without given notes
INFILL, ACCOMPANY    755, 756     a window whose given notes are the music around a span, or a melody
NO_KEY, KEY k        757, 758 ..  the window's key is not given, or is KEYS[k] (C major .. B minor)
===================  ===========  ===================================================

A note's tokens are ``[VELOCITY] [INSTRUMENT] NOTE|CONTROL_NOTE DURATION``, as in `notes`. At one
position controls come before events, each kind by program, then pitch. Encoding then decoding is
exact on the grid; MIDI is read on its own tempo map and time signatures (4/4 at 120 qpm where it
states none), so a performance without a reliable beat is quantised to its file's tick grid, as
REMI does (docs/data.md says what that costs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cadenza.data.keys import KEYS
from cadenza.data.meter import Meter
from cadenza.data.midi import Notes
from cadenza.data.tokenizers.base import DecodeReport, Encoded, NoteDecoding, Tokenizer, TokenizerError
from cadenza.data.tokenizers.grid import GridDecodeReport
from cadenza.data.tokenizers.metrical_grid import (
    LENGTHS,
    MAX_BAR,
    METERS,
    NEAREST_LENGTH,
    QPM,
    TPQ,
    bar_signature,
    grid_meter,
    meter_quarters,
    meter_ticks,
    tempo_bin,
)
from cadenza.data.tokenizers.note_grid import NUM_INSTRUMENTS, NUM_PITCHES, GridNotes, NoteIds, changes, on_grid

TASKS = ("autoregress", "infill", "accompany")

class MetricalTokenizer(NoteIds, NoteDecoding, Tokenizer):
    """Onset-ordered notes in bars, with durations, instruments, velocities, tempo, meter and key.

    >>> tok = MetricalTokenizer()
    >>> tok.vocab_size, tok.pos(0), tok.note(60), tok.control_note(60), tok.meter(4, 4)
    (782, 1, 362, 490, 257)
    """

    name = "metrical"
    anticipates = True
    note_lengths_at_onset = True
    has_instruments = True  # INSTRUMENT tokens: samples can be held to some programs
    lead = 0  # given notes are written where they sound
    tpq = TPQ
    max_shift_steps = 0  # no time shifts: the clock is set by BAR and POS
    anticipate_id = -1  # no flag moves the clock back
    has_bars = has_keys = True

    def __init__(self, velocity_bins: int = 16, sustain: bool = True, lookahead: bool = False):
        if not 1 <= velocity_bins <= 127:
            raise TokenizerError("velocity_bins must be in 1..127")
        self.velocity_bins, self.sustain, self.lookahead = int(velocity_bins), bool(sustain), bool(lookahead)
        self.bar_id = 0
        self.pos_offset = 1
        self.tempo_offset = self.pos_offset + MAX_BAR
        self.meter_offset = self.tempo_offset + QPM.size
        self.note_offset = self.meter_offset + len(METERS)
        self.control_offset = self.note_offset + NUM_PITCHES
        self.duration_offset = self.control_offset + NUM_PITCHES
        self.velocity_offset = self.duration_offset + LENGTHS.size
        self.instrument_offset = self.velocity_offset + self.velocity_bins
        self.pad_id = self.instrument_offset + NUM_INSTRUMENTS
        self.bos_id, self.eos_id = self.pad_id + 1, self.pad_id + 2
        self.task_ids = {t: self.pad_id + 3 + i for i, t in enumerate(TASKS)}
        self.no_key_id = self.pad_id + 6
        self.key_offset = self.no_key_id + 1
        self.vocab_size = self.key_offset + len(KEYS)
        if self.lookahead:  # AHEAD opens a preview of the next bar's given notes; live accompaniment has none
            self.ahead_id, self.task_ids["accompany_live"] = self.vocab_size, self.vocab_size + 1
            self.vocab_size += 2
        self.lengths = LENGTHS

    def params(self) -> dict[str, Any]:
        return {"velocity_bins": self.velocity_bins, "sustain": self.sustain, "lookahead": self.lookahead}

    # ---- single ids ----------------------------------------------------------------------------
    def pos(self, ticks: int) -> int:
        if not 0 <= ticks < MAX_BAR:
            raise TokenizerError(f"a position is 0..{MAX_BAR - 1} ticks into its bar, got {ticks}")
        return self.pos_offset + ticks

    def tempo(self, qpm: float) -> int:
        return self.tempo_offset + tempo_bin(qpm)

    def meter(self, num: int, den: int) -> int:
        return self.meter_offset + METERS.index((num, den))

    def key_id(self, key: int | None) -> int:
        return self.no_key_id if key is None else self.key_offset + int(key)

    def task_id(self, task: str | bool) -> int:
        """The flag of a window's task (True: given notes around a span, as `notes` calls it)."""
        task = "infill" if task is True else "autoregress" if task is False else task
        return self.task_ids[task if task in self.task_ids else "accompany"]  # without lookahead, all is live

    def previews(self, task: str) -> bool:
        """Whether a window of `task` shows each bar the given notes of the next (AHEAD blocks)."""
        return self.lookahead and task in ("infill", "accompany")

    def task_prefix(self, task: str | bool = "autoregress", key: int | None = None) -> list[int]:
        return [self.task_id(task), self.key_id(key)]

    @property
    def special_ids(self) -> tuple[int, ...]:
        return (self.pad_id, self.bos_id, self.eos_id, *self.task_ids.values(), self.no_key_id,
                *range(self.key_offset, self.key_offset + len(KEYS)))

    def token_name(self, i: int) -> str:
        i = int(i)
        blocks = ((self.pos_offset, "BAR", 0), (self.tempo_offset, "POS", -self.pos_offset),
                  (self.meter_offset, "TEMPO", -self.tempo_offset), (self.note_offset, "METER", -self.meter_offset),
                  (self.control_offset, "NOTE", -self.note_offset),
                  (self.duration_offset, "CONTROL_NOTE", -self.control_offset),
                  (self.velocity_offset, "DURATION", -self.duration_offset),
                  (self.instrument_offset, "VELOCITY", 1 - self.velocity_offset),
                  (self.pad_id, "INSTRUMENT", -self.instrument_offset))
        for upper, label, add in blocks:
            if i < upper:
                if label == "BAR":
                    return label
                if label == "TEMPO":
                    return f"TEMPO_{QPM[i + add]:.0f}"
                if label == "METER":
                    return "METER_{}/{}".format(*METERS[i + add])
                return f"{label}_{i + add}"
        if self.key_offset <= i < self.key_offset + len(KEYS):
            return "KEY_" + KEYS[i - self.key_offset].replace(" ", "_")
        names = {self.pad_id: "PAD", self.bos_id: "BOS", self.eos_id: "EOS", self.no_key_id: "NO_KEY"}
        names.update({v: k.upper() for k, v in self.task_ids.items()})
        if self.lookahead:
            names[self.ahead_id] = "AHEAD"
        return names.get(i, f"<{i}>")

    # ---- the grid --------------------------------------------------------------------------------
    def quantize(self, notes: Notes) -> tuple[GridNotes, dict[str, int]]:
        """`Notes` on the grid of their meter (4/4 at 120 qpm when they have none): onsets and
        releases to the nearest tick, durations to the nearest grid value (`note_grid.on_grid`);
        the meter's tempos to their bins and its bars to the signatures the vocabulary has."""
        meter, stats = grid_meter(notes.meter or Meter.constant())
        onset = np.floor(meter_quarters(notes.meter, notes.start) * TPQ + 0.5).astype(np.int64)
        release = np.floor(meter_quarters(notes.meter, notes.end) * TPQ + 0.5).astype(np.int64)
        g, grid = on_grid(notes, onset, release - onset, LENGTHS, NEAREST_LENGTH, self.velocity_bins)
        g.meter, g.tpq = meter, TPQ
        return g, {**grid, **stats}

    def to_grid_notes(self, g: GridNotes, default_velocity: int = 80) -> Notes:
        """Seconds again, on the notes' meter: `Notes` with programs and that meter."""
        meter = g.meter or Meter.constant()
        vel = np.where(g.velocity > 0, self.bin_to_velocity(np.maximum(g.velocity, 1)), default_velocity)
        start, end = (meter.seconds(t / TPQ) for t in (g.onset, g.end))
        return Notes.from_arrays(start, end, g.pitch, vel, g.program, meter=meter)

    # ---- encoding ------------------------------------------------------------------------------
    def read_options(self) -> dict:
        return {"sustain": self.sustain, "programs": True}

    def encode(self, source) -> Encoded:
        notes, stats = self.read(source)
        g, grid = self.quantize(notes)
        stats.update(grid)
        return Encoded(ids=self.encode_grid(g, close=True), notes=len(g), stats=stats,
                       durations=notes.end - notes.start)

    def encode_grid(self, events: GridNotes, controls: GridNotes | None = None, close: bool = False,
                    state: tuple[int, int, int] = (-1, -1, -1), previews: GridNotes | None = None) -> np.ndarray:
        """`events` and `controls` (each at its own position, controls first) in bars from tick 0, a
        bar line of their meter; with `close`, the bar line that ends the last bar. `state`: the
        (event program, control program, velocity bin) already in effect (-1: none). `previews`
        (a vocabulary with lookahead): the given notes each bar shows of the next, after its line."""
        meter = events.meter or (controls.meter if controls is not None else None) or Meter.constant()
        items, is_event = events, np.ones(len(events), bool)
        if controls is not None and len(controls):
            both = _stack(controls, events)
            flag = np.concatenate([np.zeros(len(controls), bool), is_event])
            order = np.lexsort((both.pitch, both.program, flag, both.onset))  # controls first at a position
            items, is_event = both.take(order), flag[order]
        if len(items) and items.onset[0] < 0:
            raise TokenizerError(f"a note starts at tick {items.onset[0]}, before the sequence's first bar")
        flat, first = self._note_tokens(items, is_event, state)
        last = int(items.onset.max()) if len(items) else 0
        end = max(int(items.end.max()), last + 1) if close and len(items) else last + 1
        ahead = previews is not None and len(previews) > 0
        reach = max(end, int(previews.onset.max()) + 1) if ahead else end  # the bar after the last one too
        bars = np.round(meter.bar_starts(reach / TPQ) * TPQ).astype(np.int64)
        tempo_at = np.round(np.asarray(meter.tempo_at) * TPQ).astype(np.int64)
        tempos = dict(zip(tempo_at.tolist(), (self.tempo(q) for q in meter.qpm)))
        out: list[int] = []
        onsets = items.onset
        k, sig = 0, None
        for j in range(bars.size - 1):
            b, nb = int(bars[j]), int(bars[j + 1])
            if b > last and not close:
                break
            out.append(self.bar_id)
            length_sig = bar_signature(nb - b, *meter.signature_of_bar(b / TPQ))
            if length_sig != sig:
                out.append(self.meter(*length_sig))
                sig = length_sig
            if j == 0 or b in tempos:
                out.append(tempos.get(b, self.tempo(meter.qpm_at(b / TPQ))))
            if ahead and j + 2 < bars.size:
                out.extend(self._preview(previews, nb, int(bars[j + 2])))
            ticks = np.unique(np.concatenate([onsets[(onsets >= b) & (onsets < nb)],
                                              tempo_at[(tempo_at > b) & (tempo_at < nb)]]))
            for u in ticks.tolist():
                out.append(self.pos(u - b))
                if u in tempos and u != b:
                    out.append(tempos[u])
                while k < len(items) and onsets[k] == u:
                    out.extend(flat[first[k]:first[k + 1]])
                    k += 1
        if close:
            out.append(self.bar_id)
        return np.asarray(out, np.int64)

    def steps_at(self, notes: Notes, seconds) -> np.ndarray:
        """The tick of times in `seconds` (of `notes`, on their meter), as onsets are quantised."""
        return np.floor(meter_quarters(notes.meter, seconds) * TPQ + 0.5).astype(np.int64)

    def encode_prompt(self, prefix: GridNotes, placed: GridNotes, anticipate: bool,
                      previews: GridNotes | None = None) -> np.ndarray:
        """An infill's or an accompaniment's prompt: the bars of the music before it (at least the
        first bar's line, meter and tempo), the controls placed in them, and with `previews` each
        bar's view of the next bar's given notes."""
        return self.encode_grid(_first_tempo(prefix), placed, previews=previews)

    def span_tokens(self, clock: int, stop: int) -> tuple[None, int]:
        """(no seconds: the grammar stops a row at its span's end, a token budget) for new music
        from tick `clock` to tick `stop`: a chorale's densest bars take about 50 tokens."""
        return None, int((stop - max(clock, 0)) / TPQ * 20) + 64

    def header(self, meter: tuple[int, int] | None = None, qpm: float | None = None) -> list[int]:
        """A new piece's first tokens: BAR, its METER (4/4 unless asked) and TEMPO (120 unless asked)."""
        return [self.bar_id, self.meter(*(meter or (4, 4))), self.tempo(qpm or 120.0)]

    def encode_window(self, events: GridNotes, controls: GridNotes | None, at_end: bool,
                      task: str = "autoregress") -> np.ndarray:
        """A training window's notes, from its first bar line; at a piece's end, its last bar closed;
        each bar showing the next bar's controls where the task does (`previews`)."""
        if task != "autoregress":  # with given notes the given music's tempo map times the music: one TEMPO
            events = _first_tempo(events)
        return self.encode_grid(events, controls, close=at_end, previews=controls if self.previews(task) else None)

    def _preview(self, previews: GridNotes, start: int, stop: int) -> list[int]:
        """AHEAD and the given notes starting in [start, stop) ticks (CONTROL_NOTE DURATION each),
        or nothing when none do."""
        sel = (previews.onset >= start) & (previews.onset < stop)
        if not sel.any():
            return []
        pairs = np.stack([self.control_offset + previews.pitch[sel], self.duration_offset + previews.duration[sel]], 1)
        return [self.ahead_id, *pairs.ravel().tolist()]

    def _note_tokens(self, items: GridNotes, is_event: np.ndarray, state) -> tuple[np.ndarray, np.ndarray]:
        """Each note's ``[VELOCITY] [INSTRUMENT] NOTE|CONTROL_NOTE DURATION``, flat, and where each
        note's tokens start (n + 1 offsets)."""
        n = len(items)
        new_instrument = changes(items.program, is_event, state[0], state[1])
        new_velocity = np.zeros(n, bool)
        new_velocity[is_event] = changes(items.velocity[is_event], None, state[2], -1)
        counts = new_velocity.astype(np.int64) + new_instrument + 2  # bool + bool would be `or`
        ends = np.cumsum(counts)
        out = np.empty(int(ends[-1]) if n else 0, np.int64)
        out[ends - 1] = self.duration_offset + items.duration
        out[ends - 2] = items.pitch + np.where(is_event, self.note_offset, self.control_offset)
        out[(ends - 3)[new_instrument]] = self.instrument_offset + items.program[new_instrument]
        out[(ends - 3 - new_instrument)[new_velocity]] = self.velocity_offset + items.velocity[new_velocity] - 1
        return out, np.concatenate([[0], ends])

    # ---- decoding ------------------------------------------------------------------------------
    def decode_grid(self, ids, clock: int | None = None) -> tuple[GridNotes, GridNotes, DecodeReport]:
        """(events, controls, repairs) of any id sequence, each with the meter its BAR, METER and
        TEMPO tokens state. A note without its duration is dropped, a duration without its note
        ignored, a note before the first BAR is placed in bar 1; each is counted."""
        report = GridDecodeReport()
        ids = self.content(ids, report).tolist()
        bar_start, bar_len, bars, clock_, = 0, meter_ticks(4, 4), 0, 0
        signatures, tempos = [], []
        rows: list[tuple[int, int, int, int, int, bool]] = []
        program = {True: 0, False: 0}
        velocity, pending_program, note = self.velocity_to_bin(80), None, None
        no_duration = orphan = previewed = 0
        ahead, ahead_id = False, getattr(self, "ahead_id", -1)
        for t in ids:
            if ahead and self.control_offset <= t < self.velocity_offset:  # a preview: restated where it sounds
                previewed += 1
                continue
            ahead = t == ahead_id
            if ahead:
                continue
            if note is not None and not self.duration_offset <= t < self.velocity_offset:
                no_duration, note = no_duration + 1, None
            if t == self.bar_id:
                bar_start, bars = bar_start + bar_len * (bars > 0), bars + 1
                clock_ = bar_start
            elif t < self.tempo_offset:
                clock_ = bar_start + t - self.pos_offset
            elif t < self.meter_offset:
                tempos.append((clock_ / TPQ, float(QPM[t - self.tempo_offset])))
            elif t < self.note_offset:
                num, den = METERS[t - self.meter_offset]
                bar_len = meter_ticks(num, den)
                signatures.append((bar_start / TPQ, num, den))
            elif t < self.duration_offset:
                event = t < self.control_offset
                if pending_program is not None:
                    program[event], pending_program = pending_program, None
                note = (clock_, t - (self.note_offset if event else self.control_offset), event)
            elif t < self.velocity_offset:
                if note is None:
                    orphan += 1
                    continue
                rows.append((note[0], t - self.duration_offset, program[note[2]], note[1],
                             velocity if note[2] else 0, note[2]))
                note = None
            elif t < self.instrument_offset:
                velocity = t - self.velocity_offset + 1
            else:
                pending_program = t - self.instrument_offset
        no_duration += note is not None
        report.extra["notes_without_duration"], report.extra["durations_without_note"] = no_duration, orphan
        report.special_tokens += previewed
        meter = Meter.from_changes(tempos, signatures)
        arr = np.array(rows, np.int64).reshape(-1, 6)
        g = GridNotes(*(arr[:, i] for i in range(5)), lengths=LENGTHS, meter=meter, tpq=TPQ)
        events, controls = g.take(arr[:, 5] == 1), g.take(arr[:, 5] == 0)
        return (events.take(np.lexsort((events.pitch, events.program, events.onset))),
                controls.take(np.lexsort((controls.pitch, controls.program, controls.onset))), report)

    def decode_notes(self, ids) -> tuple[Notes, DecodeReport]:
        """Every note of the ids (events and controls) as `Notes` with programs and their meter."""
        events, controls, report = self.decode_grid(ids)
        return self.to_grid_notes(GridNotes.concat([events, controls])), report

    def token_ticks(self, ids) -> np.ndarray:
        """The clock (ticks from the first bar line) after each of `ids`: where BAR and POS put it."""
        out = np.zeros(len(ids), np.int64)
        bar_start, bar_len, bars, clock = 0, meter_ticks(4, 4), 0, 0
        for i, t in enumerate(np.asarray(ids).tolist()):
            if t == self.bar_id:
                bar_start, bars = bar_start + bar_len * (bars > 0), bars + 1
                clock = bar_start
            elif self.pos_offset <= t < self.tempo_offset:
                clock = bar_start + t - self.pos_offset
            elif self.meter_offset <= t < self.note_offset:
                bar_len = meter_ticks(*METERS[t - self.meter_offset])
            out[i] = clock
        return out

    # ---- what the sampler asks -------------------------------------------------------------
    @property
    def has_clock(self) -> bool:
        return True

    def seconds(self, ids) -> float:
        """Seconds of music the ids span: to their last bar line or note, on their tempos."""
        events, controls, _ = self.decode_grid(ids)
        g = GridNotes.concat([events, controls])
        bars = [i for i in np.asarray(ids).tolist() if i == self.bar_id]
        ticks = max(int(g.end.max()) if len(g) else 0, 0)
        if bars:
            starts = (g.meter or Meter.constant()).bar_starts(ticks / TPQ)
            ticks = max(ticks, round(starts[min(len(bars), starts.size) - 1] * TPQ))
        return float((g.meter or Meter.constant()).seconds(ticks / TPQ))

    def encode_primer(self, source, seconds: float | None = None) -> np.ndarray:
        """A primer's ids; with `seconds`, only the notes starting before then (whole)."""
        notes, _ = self.read(source)
        g, _ = self.quantize(notes)
        if seconds is not None:
            g = g.take(g.onset < np.floor(meter_quarters(notes.meter, seconds) * TPQ + 0.5))
        return self.encode_grid(g)

    def grammar(self, batch: int, device, constrained: bool = True, max_polyphony: int | None = None,
                allow_eos: bool = True, max_note_seconds: float | None = None, plan=None, programs=None,
                **length):
        # lazy: the masks are torch tensors, and tokenizing (data preparation) never imports torch
        from cadenza.data.tokenizers.grammar import SpecialsOnly
        from cadenza.data.tokenizers.metrical_grammar import MetricalGrammar

        if not constrained:
            if plan is not None:
                raise TokenizerError("an infill or an accompaniment needs constrained decoding: the masks place "
                                     "the given notes")
            return SpecialsOnly(self, batch, device, allow_eos)
        if max_note_seconds is not None:
            raise TokenizerError("max_note_seconds: the metrical vocabulary writes each note's length in beats; "
                                 "it has no cap in seconds")
        return MetricalGrammar(self, batch, device, max_polyphony, allow_eos, plan=plan, programs=programs, **length)

    pitch_bounds = (0, 127)


def _first_tempo(g: GridNotes) -> GridNotes:
    """`g` with its meter's first tempo only (its bars unchanged)."""
    m = g.meter
    if m is None or len(m.tempo_at) == 1:
        return g
    out = g.take(slice(None))
    out.meter = Meter((0.0,), m.qpm[:1], m.signature_at, m.numerator, m.denominator)
    return out


def _stack(controls: GridNotes, events: GridNotes) -> GridNotes:
    """Controls then events, in that order (not re-sorted)."""
    fields = ("onset", "duration", "program", "pitch", "velocity")
    return GridNotes(*(np.concatenate([getattr(controls, f), getattr(events, f)]) for f in fields),
                     lengths=LENGTHS, meter=events.meter or controls.meter, tpq=TPQ)
