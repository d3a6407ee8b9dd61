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

from cadenza.data.anticipation import Request, accompany_request, given_mask, infill_request
from cadenza.data.midi import Notes, notes_to_score
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
    """Rewrite the notes of `notes` that start in [start, end) seconds; keep every other one."""

    notes: Notes
    start: float
    end: float
    source: str | None = field(default=None, compare=False)

    def __post_init__(self):
        if not 0 <= self.start < self.end:
            raise SettingError("infill", f"must have 0 <= START < END seconds, got {self.start:g}:{self.end:g}")

    @property
    def span(self) -> str:
        """The span as the command line writes it (START:END seconds)."""
        return f"{self.start:g}:{self.end:g}"


@dataclass(frozen=True)
class Accompany:
    """Write voices under the melody of `notes` (its lead instrument, or its top line)."""

    notes: Notes
    source: str | None = field(default=None, compare=False)


Task = Continue | Infill | Accompany


def parse_span(text: str) -> tuple[float, float]:
    """START:END seconds (the command line's --infill) as (start, end)."""
    try:
        start, end = (float(x) for x in text.split(":"))
    except ValueError:
        raise SettingError("infill", f"must be START:END in seconds, such as 8:16, got {text!r}") from None
    return start, end


def describe(task: Task) -> dict[str, Any]:
    """A task as generation.json records it: its kind, its numbers and where its notes came from."""
    d: dict[str, Any] = {"task": type(task).__name__.lower(), "source": task.source,
                         "notes": None if task.notes is None else len(task.notes)}
    if isinstance(task, Continue):
        d["seconds"] = task.seconds
    elif isinstance(task, Infill):
        d.update(start=task.start, end=task.end)
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

    @classmethod
    def encode(cls, tok, task: Task, style: str | None = None) -> Prompt:
        """What every sample of `task` in `style` is fed first, for the tokenizer `tok`."""
        if isinstance(task, Continue):
            primer = [] if task.notes is None else tok.encode_primer(task.notes, task.seconds).tolist()
            given = tok.to_notes(primer) if primer else Notes.empty()
            return cls(task, tok, primer, tok.window_prefix(style) + [tok.bos_id] + primer, given)
        what = "infill" if isinstance(task, Infill) else "accompany"
        if not tok.anticipates:
            raise ValueError(f"this model cannot {what}: its {tok.name} vocabulary has no given notes; use a model "
                             "trained on `--tokenizer notes`, such as the shipped styles model")
        if isinstance(task, Infill):
            request = infill_request(tok, task.notes, task.start, task.end)
        else:
            request = accompany_request(tok, task.notes)
        prompt = request.prompt.tolist()
        return cls(task, tok, prompt[1:], tok.window_prefix(style, request.anticipate) + prompt, request.given,
                   request)

    def decoding(self, cfg: SamplingConfig) -> SamplingConfig:
        """The settings the decoding loop runs with: for an infill or an accompaniment, no EOS and
        a length that runs to where the new notes stop (with room for the given notes' tokens)."""
        r = self.request
        if r is None:
            return cfg
        seconds = (r.stop - r.clock) / self.tokenizer.steps_per_second
        room = 4 * (len(r.plan.controls) - r.plan.placed)
        return replace(cfg, seconds=seconds, max_tokens=int(seconds * 60) + 64 + room, stop_at_eos=False)

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
            return score, tok.to_notes(full), report
        flagged = self.ids[len(tok.style_prefix(None)):] + ids  # from the task flag on
        events, _, report = tok.decode_grid(flagged)
        new = tok.to_grid_notes(events.take(events.onset >= r.plan.events_from))
        both = [r.given, new]
        notes = Notes.from_arrays(*(np.concatenate([getattr(n, f) for n in both])
                                    for f in ("start", "end", "pitch", "velocity")),
                                  np.concatenate([n.programs for n in both]))
        return notes_to_score(notes), notes, report

    def given_of(self, notes: Notes) -> np.ndarray:
        """Which of a sample's `notes` were given: the primer's, or those an infill or an
        accompaniment kept."""
        return given_mask(notes, self.given, EXACT)
