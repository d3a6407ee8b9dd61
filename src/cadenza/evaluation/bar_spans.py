"""Infilling in bars, on the metrical vocabulary: held-out spans of whole bars, how likely the model
finds each span's music with and without the music after it, its fills, and whether a fill leads
into what follows.

A span is 2-4 whole bars of a held-out piece with at least one bar before it and one after it. Its
excerpt runs from a bar line up to 4 bars before the span (fewer where the context needs it) to 2
bars after it, re-based to that bar line, and is encoded as the model's training windows encode it,
two ways (no key in either):

* plain: ``[style] AUTOREGRESS NO_KEY [BOS] notes``, every note the model's (the prefix alone given);
* with the suffix: ``[style] INFILL NO_KEY [BOS] ...``, the notes from the span's end on given,
  each at its own position (and, with lookahead, shown a bar early after each bar line).

The span's music is every token that is not a given note's (its CONTROL_NOTE, DURATION, an
INSTRUMENT before it; an AHEAD block) nor a TEMPO (a window with given notes states only its first)
from the one after the prefix's last note to the BAR that closes the span, included; its NLL is
their sum, each scored among the ids the model may write (`spans.given_only` are the prompt's).
Only the span's last bar is shown any of the suffix (its first bar, with lookahead), so the last
bar is also scored alone (`last_bar`).

Leading into the suffix (`follows`): the span is filled twice, with the suffix as it is and moved
by a tritone, and the last bar of each fill is compared with the first bar of the moved suffix (the
correlation of their pitch-class histograms, duration-weighted). A fill that follows the music
after it agrees with the moved suffix when it was given it; one that ignores it does not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cadenza.data.anticipation import window_ids
from cadenza.data.keys import pitch_class_weights
from cadenza.data.midi import Notes
from cadenza.data.tokenizers.note_grid import GridNotes
from cadenza.evaluation.features import excerpt
from cadenza.evaluation.spans import control_tokens, take_turns
from cadenza.generation.generate import sample, sampling_config
from cadenza.generation.prompt import Infill

BARS = (2, 4)  # a span's length in bars, drawn uniformly
PREFIX_BARS = 4  # bars an excerpt keeps before its span, at most
TRITONE = 6


@dataclass
class BarSpan:
    """A held-out span of whole bars: the excerpt (grid notes from a bar line, with their meter), the
    span [start, end) in its ticks (bar lines), the piece, its style, whether the excerpt opens it."""

    notes: GridNotes
    start: int
    end: int
    piece: int
    style: str | None
    at_start: bool

    def seconds(self) -> tuple[float, float]:
        m, q = self.notes.meter, self.notes.tpq
        return float(m.seconds(self.start / q)), float(m.seconds(self.end / q))

    def real(self, tok) -> Notes:
        """The real notes starting in the span, in seconds from its start."""
        a, b = self.seconds()
        return excerpt(tok.to_grid_notes(self.notes), a, b - a)


def span_music(tok, body: np.ndarray, prefix_notes: int, end: int) -> np.ndarray:
    """The mask of the span's music in `body` (ids after the window's flags): tokens not a given
    note's, from the one after the `prefix_notes`-th note's DURATION to the BAR that reaches `end`."""
    after = tok.token_ticks(body)
    before = np.concatenate([[0], after[:-1]])
    notes = np.flatnonzero((body >= tok.note_offset) & (body < tok.control_offset))
    first = notes[prefix_notes - 1] + 2 if prefix_notes else 0
    given = control_tokens(tok, body) | _previews(tok, body)
    given |= (body >= tok.tempo_offset) & (body < tok.meter_offset)  # the piece's tempo: one encoding drops it
    at = np.arange(body.size)
    mask = (at >= first) & (before < end) & ~given
    return mask if mask.any() and after[mask].max() >= end else np.zeros(body.size, bool)


def last_bar(tok, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The part of `mask` (a span's music) in the span's last bar: after its second-to-last BAR."""
    bars = np.flatnonzero(mask & (ids == tok.bar_id))
    return mask & (np.arange(ids.size) > bars[-2]) if bars.size >= 2 else mask


def _previews(tok, body: np.ndarray) -> np.ndarray:
    """AHEAD and the preview notes after it (a vocabulary with lookahead)."""
    ahead = getattr(tok, "ahead_id", -1)
    out = np.zeros(body.size, bool)
    inside = False
    for i, t in enumerate(body.tolist()):
        inside = t == ahead or (inside and tok.control_offset <= t < tok.velocity_offset)
        out[i] = inside
    return out


def encodings(tok, span: BarSpan) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"plain" | "anticipatory": (ids from the style token on, the mask of the span's music)}."""
    g = span.notes
    prefix = int(np.count_nonzero(g.onset < span.start))
    style = tok.style_prefix(span.style if span.style in tok.styles else None)
    out = {}
    for name, given, task in (("plain", None, "autoregress"), ("anticipatory", g.onset >= span.end, "infill")):
        ids = np.concatenate([style, window_ids(tok, g, given, span.at_start, False, task, None)]).astype(np.int64)
        head = len(style) + len(tok.task_prefix(task)) + span.at_start
        mask = np.concatenate([np.zeros(head, bool), span_music(tok, ids[head:], prefix, span.end)])
        out[name] = (ids, mask)
    return out


def _fits(encoded: dict, context: int) -> int:
    """1: both spans can be scored in `context` tokens; 0: too long; -1: one cannot be scored."""
    ends = [int(np.flatnonzero(mask)[-1]) if mask.any() else -1 for _, mask in encoded.values()]
    return -1 if min(ends) < 0 else int(max(ends) <= context)


def draw_bar_spans(store, tok, split: str, count: int, context: int, seed: int = 0, bars=BARS) -> list[BarSpan]:
    """`count` spans of `bars` whole bars from the pieces of `split`, the styles taking turns
    (seeded); a style whose pieces give none in `spans.TRIES` draws is left out."""
    rng = np.random.default_rng(seed)
    decoded: dict[int, GridNotes] = {}

    def draw(pieces) -> BarSpan | None:
        p = pieces[int(rng.integers(len(pieces)))]
        if p.index not in decoded:
            decoded[p.index] = store.tokenizer.decode_grid(store[p.index])[0]
        g = decoded[p.index]
        lines = np.round(g.meter.bar_starts((int(g.end.max(initial=0)) + 1) / g.tpq) * g.tpq).astype(np.int64)
        n = int(rng.integers(bars[0], bars[1] + 1))
        if lines.size < n + 3:
            return None
        k = int(rng.integers(1, lines.size - n - 1))  # a bar before, one after
        for first in range(max(0, k - PREFIX_BARS), k):
            keep = (g.onset >= lines[first]) & (g.onset < lines[min(k + n + 2, lines.size - 1)])
            span = BarSpan(g.take(keep).shifted(-int(lines[first])), int(lines[k] - lines[first]),
                           int(lines[k + n] - lines[first]), p.index, p.style, first == 0)
            if not np.any((span.notes.onset >= span.start) & (span.notes.onset < span.end)):
                return None
            fits = _fits(encodings(tok, span), context)
            if fits:
                return span if fits > 0 else None
        return None

    return take_turns(store, split, count, draw)


def fill(checkpoint, span: BarSpan, seed: int, compile: bool = True, shift: int = 0) -> Notes:
    """The model's fill of `span` (its suffix moved `shift` semitones), in seconds of the excerpt."""
    tok = checkpoint.tokenizer
    notes = tok.to_grid_notes(span.notes)
    if shift:
        after = notes.start >= span.seconds()[1] - 1e-9
        notes = Notes.from_arrays(notes.start, notes.end, np.where(after, notes.pitch + shift, notes.pitch),
                                  notes.velocity, notes.programs, meter=notes.meter)
    cfg = sampling_config(seed=seed, compile=compile, style=span.style if span.style in tok.styles else None)
    a, b = span.seconds()
    return sample(checkpoint, cfg, Infill(notes, a, b)).notes[0]


def follows(checkpoint, span: BarSpan, seed: int, compile: bool = True) -> dict[str, float]:
    """How the fill's last bar agrees with the first bar of the suffix moved by a tritone, when the
    model was given the moved suffix and when it was given the real one; `rise` is the difference."""
    m, q = span.notes.meter, span.notes.tpq
    end = span.end / q
    last = (float(m.seconds(m.bar_starts(end)[-2])), float(m.seconds(end)))  # the span's last bar
    after = (float(m.seconds(end)), float(m.seconds(m.bar_starts(end + 1e-6)[-1])))  # the bar after it
    real, moved = (fill(checkpoint, span, seed, compile, shift) for shift in (0, TRITONE))
    suffix = _between(moved, *after)
    out = {"given_moved": _agreement(_between(moved, *last), suffix),
           "given_real": _agreement(_between(real, *last), suffix)}
    out["rise"] = out["given_moved"] - out["given_real"]
    return out


def _between(notes: Notes, a: float, b: float) -> Notes:
    return notes.take((notes.start >= a - 1e-9) & (notes.start < b - 1e-9))


def _agreement(x: Notes, y: Notes) -> float:
    """The correlation of two passages' duration-weighted pitch-class histograms (NaN if either is
    empty or flat)."""
    hx, hy = (pitch_class_weights(n.pitch, n.end - n.start) for n in (x, y))
    if hx.std() == 0 or hy.std() == 0:
        return float("nan")
    return float(np.corrcoef(hx, hy)[0, 1])
