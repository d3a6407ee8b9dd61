"""What a generation starts from: a task built from `Notes` in memory, and its encoding.

* `Continue(notes, seconds)`: a new piece, or the continuation of `notes` (their first `seconds`);
* `Infill(notes, start, end)`: the notes starting in [start, end) seconds rewritten, every other
  note kept exactly (a model trained with anticipation);
* `Accompany(notes)`: voices under the melody of `notes`, which comes back note for note.

`Prompt.encode` turns a task into what the sampler is fed for one checkpoint's tokenizer; a
`Prompt` then decodes every sample, and says which of its notes were given (`given_mask`). No file
is read here: the command line, the studio and the Python API's file wrappers read MIDI at their
edge, with the checkpoint's tokenizer (`Tokenizer.read`), and hand the notes in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from cadenza.data.meter import Meter
from cadenza.data.midi import Notes, notes_to_score
from cadenza.data.requests import Request, accompany_request, given_mask, infill_request, key_of
from cadenza.generation.config import SamplingConfig
from cadenza.settings import SettingError

EXACT = 1000  # steps per second at which given notes are matched in a sample: they come back unchanged


@dataclass(frozen=True)
class Continue:
    """A new piece (no notes), or a continuation of `notes`, cut to their first `seconds`."""

    notes: Notes | None = None
    seconds: float | None = None
    source: str | None = field(default=None, compare=False)  # where the notes came from, for the record

    def __post_init__(self):
        check_cut(self.seconds, self.notes is not None)


def check_cut(seconds: float | None, has_primer: bool) -> None:
    """Refuse a primer cut that is not > 0 seconds, or one with no primer to cut."""
    if seconds is not None and not seconds > 0:
        raise SettingError("primer_seconds", f"must be > 0, got {seconds}")
    if seconds is not None and not has_primer:
        raise SettingError("primer_seconds", "needs a primer to cut")


@dataclass(frozen=True)
class Infill:
    """Rewrite the notes of `notes` that start in [start, end) seconds; keep every other one.
    `Infill.bars(notes, 9, 16)`: bars 9 to 16, as the score numbers them."""

    notes: Notes
    start: float
    end: float
    source: str | None = field(default=None, compare=False)
    bar_span: tuple[int, int] | None = field(default=None, compare=False)  # the bars asked for, for the record

    @classmethod
    def bars(cls, notes: Notes, first: int, last: int, source: str | None = None) -> Infill:
        """Rewrite bars `first` to `last` (both included) of `notes`, numbered as a score numbers
        them: a pickup is bar 0, the first full bar is bar 1. Notes without a meter are in 4/4 at
        120 qpm."""
        start, end = bar_seconds(notes, first, last)
        return cls(notes, start, end, source, (first, last))

    def __post_init__(self):
        if not 0 <= self.start < self.end:
            raise SettingError("infill", f"must have 0 <= START < END seconds, got {self.start:g}:{self.end:g}")

    @property
    def span(self) -> str:
        """The span as the command line writes it (START:END seconds)."""
        return f"{self.start:g}:{self.end:g}"


@dataclass(frozen=True)
class Accompany:
    """Write voices under the melody of `notes` (its lead instrument, or its top line). `live`: each
    melody note is answered where it sounds, without looking at the bars ahead, as when the melody
    is being played (a model that can look ahead does, otherwise)."""

    notes: Notes
    source: str | None = field(default=None, compare=False)
    live: bool = False


Task = Continue | Infill | Accompany


def parse_span(text: str, name: str = "infill", kind=float) -> tuple:
    """START:END seconds (the command line's --infill), or FIRST:LAST bars (--infill-bars), as a pair."""
    try:
        start, end = (kind(x) for x in text.split(":"))
    except ValueError:
        unit = "in seconds, such as 8:16" if kind is float else "bar numbers, such as 9:16"
        raise SettingError(name, f"must be {'START:END' if kind is float else 'FIRST:LAST'} {unit}, got {text!r}") \
            from None
    return start, end


def bar_seconds(notes: Notes, first: int, last: int) -> tuple[float, float]:
    """(start, end) seconds of bars `first` to `last` of `notes` (a pickup is bar 0)."""
    meter = notes.meter or Meter.constant()
    if not 0 <= first <= last:
        raise SettingError("infill_bars", f"must be FIRST:LAST with 0 <= FIRST <= LAST, got {first}:{last}")
    lines = meter.bar_starts(float(meter.quarters(notes.duration)) + 1e-9)
    pickup = lines.size > 2 and lines[1] - lines[0] < lines[2] - lines[1]
    at = first - (0 if pickup else 1)
    if at < 0 or at >= lines.size - 1:
        raise SettingError("infill_bars", f"bar {first} is not in the piece (bars {0 if pickup else 1}-"
                           f"{lines.size - 2 + (0 if pickup else 1)})")
    stop = lines[min(last - first + at + 1, lines.size - 1)]
    return float(meter.seconds(lines[at])), float(meter.seconds(stop))


def _check_metrical(tok, task: Task, settings: SamplingConfig | None) -> int | None:
    """Refuse bars, a meter, a tempo or a key for a vocabulary without them, and a meter or tempo for
    anything but a new piece; the key asked for, as an index into `keys.KEYS`."""
    if settings is None:
        return None
    for name in ("bars", "meter", "tempo", "key"):
        has = getattr(tok, "has_keys" if name == "key" else "has_bars", False)
        if getattr(settings, name) is not None and not has:
            raise SettingError(name, f"needs a model on the metrical vocabulary (`--tokenizer metrical`); this one "
                               f"is on {tok.name}")
    if (settings.meter or settings.tempo) and not (isinstance(task, Continue) and task.notes is None):
        raise SettingError("meter" if settings.meter else "tempo", "is for a new piece: a primer, an infill or an "
                           "accompaniment keeps the meter and tempo of its music")
    return settings.key_index()


def at_tempo(notes: Notes, qpm: float) -> Notes:
    """`notes` (with a meter of one tempo) on the same beats at `qpm` quarter notes a minute."""
    m = notes.meter
    exact = Meter((0.0,), (float(qpm),), m.signature_at, m.numerator, m.denominator)
    start, end = (exact.seconds(m.quarters(t)) for t in (notes.start, notes.end))
    return Notes.from_arrays(start, end, notes.pitch, notes.velocity, notes.programs, meter=exact)


def describe(task: Task) -> dict[str, Any]:
    """A task as generation.json records it: its kind, its numbers and where its notes came from."""
    d: dict[str, Any] = {"task": type(task).__name__.lower(), "source": task.source,
                         "notes": None if task.notes is None else len(task.notes)}
    if isinstance(task, Continue):
        d["seconds"] = task.seconds
    elif isinstance(task, Infill):
        d.update(start=task.start, end=task.end, **({"bars": list(task.bar_span)} if task.bar_span else {}))
    elif task.live:
        d["live"] = True
    return d


@dataclass
class Prompt:
    """A task encoded for one tokenizer: the primer's ids, the ids fed first (the window prefix,
    BOS, the primer), the notes given (the primer as the tokenizer hears it, or the notes an
    infill or an accompaniment keeps exactly) and, for those two, the `Request` (the given notes,
    and the plan that places them)."""

    task: Task
    tokenizer: Any
    primer: list[int]
    ids: list[int]
    given: Notes
    request: Request | None = None
    tempo: float | None = None  # the tempo a new piece was asked for, exactly (its TEMPO token is a bin)

    @classmethod
    def encode(cls, tok, task: Task, style: str | None = None, settings: SamplingConfig | None = None) -> Prompt:
        """What every sample of `task` in `style` is fed first, for the tokenizer `tok`; `settings`
        may ask for a key, a meter and a tempo (a vocabulary with tokens for them)."""
        key = _check_metrical(tok, task, settings)
        if isinstance(task, Continue):
            primer = [] if task.notes is None else tok.encode_primer(task.notes, task.seconds).tolist()
            given = tok.to_notes(primer) if primer else Notes.empty()
            if key is None and primer and getattr(tok, "has_keys", False):
                key = key_of(given)
            tempo = None
            if settings is not None and (settings.meter or settings.tempo):  # a new piece: its first bar line
                primer, tempo = tok.header(settings.meter_fraction(), settings.tempo), settings.tempo
            head = tok.window_prefix(style, "autoregress", key) + [tok.bos_id]
            return cls(task, tok, primer, head + primer, given, tempo=tempo)
        what = "infill" if isinstance(task, Infill) else "accompany"
        if not tok.anticipates:
            raise ValueError(f"this model cannot {what}: its {tok.name} vocabulary has no given notes; use a model "
                             "trained on `--tokenizer notes`, such as the shipped styles model")
        if isinstance(task, Infill):
            request = infill_request(tok, task.notes, task.start, task.end)
        else:
            request = accompany_request(tok, task.notes, task.live)
        prompt = request.prompt.tolist()
        key = request.key if key is None else key
        return cls(task, tok, prompt[1:], tok.window_prefix(style, request.task, key) + prompt, request.given, request)

    def decoding(self, cfg: SamplingConfig) -> SamplingConfig:
        """The settings the decoding loop runs with: for an infill or an accompaniment, no EOS and
        a length that runs to where the new notes stop (with room for the given notes' tokens)."""
        r = self.request
        if r is None:
            return cfg
        seconds, budget = self.tokenizer.span_tokens(r.clock, r.stop)
        room = 4 * (len(r.plan.controls) - r.plan.placed)
        return replace(cfg, seconds=seconds, bars=None, max_tokens=budget + room, stop_at_eos=False)

    def notes_of(self, ids: list[int]) -> Notes:
        """A sample's notes in seconds: the primer's and the new ones; for an infill or an
        accompaniment the given notes exactly as they came in, and the new ones."""
        return self.decode(ids)[1]

    def decode(self, ids: list[int]) -> tuple[Any, Notes, Any]:
        """A sample's (symusic Score, notes in seconds, decoder repairs)."""
        tok, r = self.tokenizer, self.request
        if r is None:
            full = self.primer + ids
            score, report = tok.decode(full)
            if self.tempo is None:
                return score, tok.to_notes(full), report
            notes = at_tempo(tok.to_notes(full), self.tempo)
            return notes_to_score(notes), notes, report
        flagged = self.ids[len(tok.style_prefix(None)):] + ids  # from the task flag on
        events, _, report = tok.decode_grid(flagged)
        new = events.take(events.onset >= r.plan.events_from)
        if r.meter is not None:  # new notes on the given music's own tempo map, not its tempo tokens'
            new.meter = r.meter
        new = tok.to_grid_notes(new)
        both = [r.given, new]
        notes = Notes.from_arrays(*(np.concatenate([getattr(n, f) for n in both])
                                    for f in ("start", "end", "pitch", "velocity")),
                                  np.concatenate([n.programs for n in both]), meter=r.given.meter)
        return notes_to_score(notes), notes, report

    def given_of(self, notes: Notes) -> np.ndarray:
        """Which of a sample's `notes` were given: the primer's, or those an infill or an
        accompaniment kept."""
        return given_mask(notes, self.given, EXACT)
