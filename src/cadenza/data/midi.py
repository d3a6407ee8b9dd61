"""MIDI in and out: symusic parsing, normalised to one list of piano notes in seconds.

Policies (the same for every tokenizer that starts from notes; see docs/data.md):

* Tempo maps are honoured: all times are converted to seconds by symusic.
* All non-drum tracks are merged into one piano part. Drum tracks are dropped and counted. With
  ``programs=True`` (tokenizers that keep instruments) each note keeps its track's General MIDI
  program instead, and drum notes are kept as program `DRUMS`.
* Sustain pedal (CC64 >= 64) lengthens notes as Magenta's ``apply_sustain_control_changes`` does:
  a note whose release falls while the pedal is down (pedal-down instant included, pedal-up
  instant excluded) sounds until the pedal is released. Pedals apply per track (channel).
* Zero-length notes are dropped; notes of one pitch starting at one instant (unisons, e.g. a note
  doubled on two tracks) become one, the longest at the loudest velocity; a same-pitch note that
  starts while an earlier one still sounds ends the earlier one at the new onset. Each is counted
  (`ReadStats`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import symusic

from cadenza.atomic import write_bytes
from cadenza.data.meter import Meter

DEFAULT_TPQ = 480  # at the default 120 bpm one tick is ~1 ms, finer than the 10 ms token grid
DRUMS = 128  # the program number of drum notes: General MIDI's 128 programs, then the drum kit


class MidiReadError(ValueError):
    """A file that cannot be read as MIDI. The message names the file and the reason."""


@dataclass
class Notes:
    """A performance as parallel arrays, sorted by (program,) pitch, then onset.

    Pitch-major order is what normalisation and tokenization need, so keeping it saves a sort
    per file; `by_time()` gives onset order for display. `program` is None for one piano part,
    else each note's General MIDI program (`DRUMS` for drum notes).
    """

    start: np.ndarray  # float64 seconds
    end: np.ndarray  # float64 seconds, > start
    pitch: np.ndarray  # int64, 0..127
    velocity: np.ndarray  # int64, 1..127
    program: np.ndarray | None = None  # int64, 0..128 (DRUMS), or None: all piano
    meter: Meter | None = None  # where the beats and bars are, when known (read from a score)

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @property
    def duration(self) -> float:
        return float(self.end.max()) if len(self) else 0.0

    @classmethod
    def empty(cls) -> Notes:
        z = np.zeros(0)
        return cls(z, z.copy(), np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def from_arrays(cls, start, end, pitch, velocity, program=None, meter: Meter | None = None) -> Notes:
        start = np.asarray(start, dtype=np.float64)
        end = np.asarray(end, dtype=np.float64)
        pitch = np.asarray(pitch, dtype=np.int64)
        velocity = np.asarray(velocity, dtype=np.int64)
        if program is None:
            return cls(*_take((start, end, pitch, velocity), np.lexsort((start, pitch))), meter=meter)
        program = np.broadcast_to(np.asarray(program, dtype=np.int64), pitch.shape)
        return cls(*_take((start, end, pitch, velocity, program), np.lexsort((start, pitch, program))), meter=meter)

    def by_time(self) -> Notes:
        """A copy ordered by onset, then (program,) pitch."""
        keys = (self.pitch, self.start) if self.program is None else (self.pitch, self.program, self.start)
        return self.take(np.lexsort(keys))

    def take(self, index) -> Notes:
        """The notes at `index` (an index array or a boolean mask), in that order."""
        arrays = (self.start, self.end, self.pitch, self.velocity, self.program)
        return Notes(*_take(arrays, index), meter=self.meter)

    @property
    def programs(self) -> np.ndarray:
        """Each note's program: `program`, or 0 (piano) for every note of a one-part `Notes`."""
        return np.zeros(len(self), np.int64) if self.program is None else self.program


def _take(arrays, index) -> tuple:
    return tuple(None if a is None else a[index] for a in arrays)


@dataclass
class ReadStats:
    """What normalisation changed, so a user can see what a tokenization cannot represent."""

    notes_in: int = 0
    tracks_merged: int = 0
    drum_tracks: int = 0
    drum_notes: int = 0
    pedal_extended: int = 0
    zero_length: int = 0
    unisons_merged: int = 0
    overlaps_truncated: int = 0
    notes_out: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def load_score(source: str | os.PathLike | bytes, name: str | None = None) -> symusic.Score:
    """Parse MIDI with symusic; any failure becomes a one-line `MidiReadError` naming the file.

    A RIFF-wrapped MIDI file (RMID) is unwrapped first. Files symusic would misread are refused
    with their own reason: a time division of 0 ticks per quarter, or SMPTE time.
    """
    label = name or (str(source) if not isinstance(source, (bytes, bytearray)) else "<bytes>")
    if not isinstance(source, (bytes, bytearray)):
        try:  # the fast path: symusic reads the file itself; only its refusals are diagnosed below
            score = symusic.Score(str(source))
            if score.ticks_per_quarter > 0:
                return score
        except Exception:
            pass
    try:
        if isinstance(source, (bytes, bytearray)):
            data = bytes(source)
        else:
            with open(source, "rb") as f:
                data = f.read()
    except OSError as e:
        raise MidiReadError(f"{label}: cannot read file ({e.strerror or e})") from None
    data = _check_header(data, label)
    try:
        return symusic.Score.from_midi(data)
    except Exception as e:  # symusic raises RuntimeError/ValueError with terse messages
        raise MidiReadError(f"{label}: corrupt MIDI ({type(e).__name__}: {e})") from None


def _check_header(data: bytes, label: str) -> bytes:
    """The standard MIDI file inside `data` (unwrapping RIFF RMID), its header checked."""
    if data[:4] == b"RIFF" and data[8:12] == b"RMID":
        at = data.find(b"data", 12)
        if at < 0 or len(data) < at + 8:
            raise MidiReadError(f"{label}: RIFF MIDI (RMID) file without a data chunk")
        size = int.from_bytes(data[at + 4:at + 8], "little")
        data = data[at + 8:at + 8 + size]
    if len(data) < 14 or data[:4] != b"MThd":
        raise MidiReadError(f"{label}: not a MIDI file (no MThd header)")
    division = int.from_bytes(data[12:14], "big")
    if division & 0x8000:
        fps = 256 - (division >> 8)
        raise MidiReadError(f"{label}: SMPTE time division ({fps} frames per second) is not supported; "
                            "convert the file to ticks per quarter note")
    if division == 0:
        raise MidiReadError(f"{label}: ticks per quarter is 0 in the header, so no note has a time")
    return data


def score_to_notes(score: symusic.Score, sustain: bool = True, programs: bool = False) -> tuple[Notes, ReadStats]:
    """Normalised `Notes` (times in seconds) of a score: its non-drum tracks merged into one piano
    part, or with `programs` every track kept under its program and drums as `DRUMS`."""
    stats = ReadStats()
    in_ticks = score.ttype == symusic.TimeUnit.tick
    plain, pedalled = [], []
    for track in score.tracks:
        n = track.note_num()
        if n == 0:
            continue
        if track.is_drum:
            stats.drum_tracks += 1
            stats.drum_notes += n
            if programs:
                plain.append(track)
        elif sustain and len(track.pedals):
            pedalled.append(track)
        else:
            plain.append(track)
    stats.tracks_merged = 0 if programs else len(plain) + len(pedalled)
    parts = []
    if plain and not programs:
        # Merging in symusic before one numpy() call is ~2x faster than a call per track.
        merged = plain[0].notes.copy()
        for track in plain[1:]:
            merged.extend(track.notes)
        parts.append((*_arrays(merged.numpy()), 0))
    elif plain:  # tracks of one program are merged first: one numpy() call per instrument
        by_program: dict[int, Any] = {}
        for track in plain:
            merged = by_program.get(program_of(track))
            if merged is None:
                by_program[program_of(track)] = track.notes.copy()
            else:
                merged.extend(track.notes)
        parts += [(*_arrays(notes.numpy()), program) for program, notes in by_program.items()]
    for track in pedalled:  # pedals act per track (channel), so these are extended one by one
        st, en, p, v = _arrays(track.notes.numpy())
        en, extended = _apply_sustain(en, track.pedals.numpy())
        stats.pedal_extended += extended
        parts.append((st, en, p, v, program_of(track) if programs else 0))
    if not parts:
        empty = Notes.empty()
        empty.meter = Meter.from_score(score) if in_ticks else None
        return empty, stats
    start, end, pitch, vel = (np.concatenate(x) for x in zip(*(part[:4] for part in parts)))
    if in_ticks:  # all of a file's normalisation happens in ticks; seconds once, at the end
        both = ticks_to_seconds(score, np.concatenate((start, end)))
        start, end = both[:start.size], both[start.size:]
    stats.notes_in = int(start.size)
    if programs:  # one key per (program, pitch): normalisation then acts per instrument
        pitch = pitch + 128 * np.concatenate([np.full(part[0].size, part[4], np.int64) for part in parts])
    notes, counts = normalise(start, end, pitch, vel)
    if programs:
        notes.program, notes.pitch = notes.pitch // 128, notes.pitch % 128
    stats.zero_length, stats.unisons_merged = counts["zero_length"], counts["unisons_merged"]
    stats.overlaps_truncated = counts["overlaps_truncated"]
    stats.notes_out = len(notes)
    notes.meter = Meter.from_score(score) if in_ticks else None
    return notes, stats


def program_of(track: symusic.Track) -> int:
    """A track's General MIDI program, or `DRUMS` for a drum track."""
    return DRUMS if track.is_drum else int(track.program)


def ticks_to_seconds(score: symusic.Score, ticks: np.ndarray) -> np.ndarray:
    """Seconds of tick positions through the score's tempo map (120 bpm before the first tempo;
    of several tempos on one tick the last counts), in float64. Vectorised: one searchsorted."""
    tempos = score.tempos.numpy()
    t = tempos["time"].astype(np.int64)
    q = tempos["mspq"].astype(np.float64)
    if t.size == 0 or t[0] > 0:
        t = np.concatenate(([0], t))
        q = np.concatenate(([500_000.0], q))
    if t.size > 1:
        last = np.append(t[1:] != t[:-1], True)
        t, q = t[last], q[last]
    per_tick = q / (1e6 * score.ticks_per_quarter)
    at = np.concatenate(([0.0], np.cumsum(np.diff(t) * per_tick[:-1])))
    idx = np.searchsorted(t, ticks, side="right") - 1
    return at[idx] + (ticks - t[idx]) * per_tick[idx]


def _arrays(arr: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    s = arr["time"].astype(np.float64) if arr["time"].dtype.kind == "f" else arr["time"].astype(np.int64)
    return s, s + arr["duration"], arr["pitch"].astype(np.int64), arr["velocity"].astype(np.int64)


def _apply_sustain(end: np.ndarray, pedals: dict) -> tuple[np.ndarray, int]:
    p_start = pedals["time"].astype(np.float64)
    p_end = p_start + pedals["duration"].astype(np.float64)
    order = np.argsort(p_start, kind="stable")
    p_start, p_end = p_start[order], p_end[order]
    # Pedals from symusic never overlap, so the last pedal starting at or before the release is
    # the only one that can hold it.
    idx = np.searchsorted(p_start, end, side="right") - 1
    held = (idx >= 0) & (end < p_end[np.maximum(idx, 0)])
    new_end = end.copy()
    new_end[held] = np.maximum(end[held], p_end[idx[held]])
    return new_end, int(np.count_nonzero(new_end > end))


def normalise(start, end, pitch, velocity) -> tuple[Notes, dict[str, int]]:
    """Drop zero-length notes, merge unisons and resolve same-pitch overlaps.

    * ``zero_length``: a note that ends where it starts (or before) has no sound: dropped.
    * ``unisons_merged``: several notes of one pitch starting at one instant (typically the same
      note on two tracks, merged into one part) become one note, as long as the longest copy and as
      loud as the loudest: a doubled note sounds at least as loud as its loudest part.
    * ``overlaps_truncated``: a note struck again while it still sounds ends at the new onset.

    Returns the notes and those three counts.
    """
    start = np.asarray(start, np.float64)
    end = np.asarray(end, np.float64)
    pitch = np.asarray(pitch, np.int64)
    velocity = np.asarray(velocity, np.int64)
    keep = end > start
    counts = {"zero_length": int(start.size - np.count_nonzero(keep)), "unisons_merged": 0, "overlaps_truncated": 0}
    # By pitch, then onset, then release: of unisons the longest comes last
    order = np.lexsort((end[keep], start[keep], pitch[keep]))
    start, end, pitch, velocity = start[keep][order], end[keep][order], pitch[keep][order], velocity[keep][order]
    twin = (pitch[1:] == pitch[:-1]) & (start[1:] == start[:-1])  # item i + 1 repeats item i's onset
    if twin.any():
        counts["unisons_merged"] = int(np.count_nonzero(twin))
        velocity = run_max(velocity, twin)
        last = np.append(~twin, True)  # each run's last item: the longest, now with the loudest velocity
        start, end, pitch, velocity = start[last], end[last], pitch[last], velocity[last]
    cut = (pitch[:-1] == pitch[1:]) & (start[1:] < end[:-1])
    if cut.any():
        counts["overlaps_truncated"] = int(np.count_nonzero(cut))
        end = end.copy()
        end[:-1] = np.where(cut, start[1:], end[:-1])
    return Notes(start, end, pitch, velocity), counts


def run_max(values: np.ndarray, twin: np.ndarray) -> np.ndarray:
    """Where twin[i] says item i+1 repeats item i, give each run's last item the run's maximum."""
    d = np.diff(np.concatenate(([0], twin.astype(np.int8), [0])))
    first, last = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    bounds = np.column_stack((first, last + 1)).ravel()
    padded = np.append(values, values[:1])  # reduceat needs every bound < len
    out = values.copy()
    out[last] = np.maximum.reduceat(padded, bounds)[::2]
    return out


def read_notes(source: str | os.PathLike | bytes, sustain: bool = True,
               programs: bool = False) -> tuple[Notes, ReadStats]:
    """Read a MIDI file (or its bytes) into normalised notes (one piano part, or with `programs`
    every instrument)."""
    return score_to_notes(load_score(source), sustain=sustain, programs=programs)


def as_notes(source) -> Notes:
    """`Notes` from `Notes`, a symusic Score, or a MIDI path/bytes (drums dropped, pedal applied)."""
    if isinstance(source, Notes):
        return source
    if isinstance(source, (str, os.PathLike, bytes, bytearray)):
        return read_notes(source)[0]
    return score_to_notes(source)[0]


def notes_to_score(notes: Notes, program: int = 0, tpq: int = DEFAULT_TPQ, name: str = "piano") -> symusic.Score:
    """A symusic Score in ticks (tpq `tpq`) holding `notes`: one track (`program`) for a one-part
    `Notes`, else one track per program, drums on a drum track. Notes with a meter keep its tempos
    and time signatures, so the score opens on its grid in a notation program; others are at 120
    bpm."""
    meter = notes.meter
    if meter is None:
        score = symusic.Score(tpq, ttype="second")
        unit, to_unit = "second", (lambda t: t.astype(np.float32))
    else:
        score = symusic.Score(tpq, ttype="tick")
        meter.write(score)
        unit, to_unit = "tick", (lambda t: np.round(meter.quarters(t) * tpq).astype(np.int32))
    if notes.program is None:
        score.tracks.append(_track(notes, name, program, unit, to_unit))
    for p in np.unique(notes.program) if notes.program is not None else ():
        part = notes.take(notes.program == p)
        score.tracks.append(_track(part, "drums" if p == DRUMS else f"program {p}", 0 if p == DRUMS else int(p),
                                   unit, to_unit, drum=bool(p == DRUMS)))
    return score.to("tick") if meter is None else score


def _track(notes: Notes, name: str, program: int, unit: str, to_unit, drum: bool = False) -> symusic.Track:
    track = symusic.Track(name, program, drum, ttype=unit)
    if len(notes):
        start, end = to_unit(notes.start), to_unit(notes.end)
        track.notes = symusic.Note.from_numpy(start, np.maximum(end - start, 1 if unit == "tick" else 0),
                                              notes.pitch.astype(np.int8), notes.velocity.astype(np.int8), unit)
    return track


def score_to_bytes(score: symusic.Score) -> bytes:
    return bytes(score.dumps_midi())


def write_midi(score_or_notes: symusic.Score | Notes, path: str | os.PathLike) -> Path:
    """Write a Score (or Notes) to a .mid file atomically."""
    score = notes_to_score(score_or_notes) if isinstance(score_or_notes, Notes) else score_or_notes
    if score.ttype != symusic.TimeUnit.tick:
        score = score.to("tick")
    write_bytes(path, score_to_bytes(score))
    return Path(path)


MIDI_SUFFIXES = (".mid", ".midi", ".kar", ".smf")


def note_name(pitch: int) -> str:
    names = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"]
    return f"{names[pitch % 12]}{pitch // 12 - 1}"
