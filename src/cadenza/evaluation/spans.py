"""Infilling measured on held-out music: spans of real pieces, how likely the model finds each
span's music with and without the music after it, and the model's own fills beside the real ones.

A span is 4-8 s of a piece with music before it (the prefix) and a note at least `anticipation`
seconds after it. Its excerpt (from up to `prefix_seconds` before the span, fewer where the context
needs it, to 2 x `anticipation` after it; time re-based to its first note, as a training window
is) is encoded as the model's training windows encode it, two ways:

* plain: ``[style] AUTOREGRESS [BOS] notes``, every note an event (the prefix alone is given);
* anticipatory: ``[style] ANTICIPATE [BOS] ...``, the notes before the span's end as events and
  those from its end on as controls, each `anticipation` seconds early (prefix and suffix given).

The span's music, in each encoding, is every token that is not a control's (CONTROL_NOTE, its
DURATION, an INSTRUMENT before it) from the first token after the prefix's last note to the token
that brings the clock to the span's end, included (`span_music`); its NLL is the sum over those
(`span_nll`; with `never=given_only(tok)`, as bench_infill scores, each token among the ids the
model may write there: a given note's are the prompt's, not its).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cadenza.data.anticipation import window_ids
from cadenza.data.midi import Notes
from cadenza.data.tokenizers.note_grid import GridNotes
from cadenza.evaluation.features import excerpt
from cadenza.generation.generate import sample, sampling_config
from cadenza.generation.prompt import Infill

SECONDS = (4.0, 8.0)  # a span's length, drawn uniformly
MIN_PREFIX = 1.0  # seconds of music a span keeps before it, at least
TRIES = 50  # draws per span before a style's pieces are given up on


@dataclass
class Span:
    """A held-out span: the excerpt's notes (grid steps, re-based to its first note), the span
    [start, end) in the excerpt's steps, the piece and style, and whether the excerpt opens the
    piece (its windows then start with BOS, as in training)."""

    notes: GridNotes
    start: int
    end: int
    piece: int
    style: str | None
    at_start: bool

    def real(self, tok) -> Notes:
        """The real notes starting in the span, in seconds from its start."""
        a, b = self.seconds(tok)
        return excerpt(tok.to_grid_notes(self.notes), a, b - a)

    def seconds(self, tok) -> tuple[float, float]:
        """The span [start, end) in seconds of the excerpt."""
        return self.start / tok.steps_per_second, self.end / tok.steps_per_second


def control_tokens(tok, ids: np.ndarray) -> np.ndarray:
    """Which of `ids` are a control's: its CONTROL_NOTE, the DURATION after it, an INSTRUMENT before it."""
    ctl = (ids >= tok.control_offset) & (ids < tok.duration_offset)
    out = ctl.copy()
    out[1:] |= ctl[:-1]
    out[:-1] |= ctl[1:] & (ids[:-1] >= tok.instrument_offset) & (ids[:-1] < tok.pad_id)
    return out


def span_music(tok, body: np.ndarray, clock: int, prefix_notes: int, end: int) -> np.ndarray:
    """The mask of the span's music in `body` (ids without flags, their clock starting at step
    `clock`): the tokens that are not a control's from the one after the `prefix_notes`-th event's
    DURATION up to the one that brings the clock to step `end`, included. All False where no token
    reaches `end` (the span cannot be scored)."""
    steps = np.rint(tok.token_seconds()[body] * tok.steps_per_second).astype(np.int64)
    after = clock + np.cumsum(steps)
    notes = np.flatnonzero((body >= tok.note_offset) & (body < tok.control_offset))
    first = notes[prefix_notes - 1] + 2 if prefix_notes else 0
    at = np.arange(body.size)
    mask = (at >= first) & (after - steps < end) & ~control_tokens(tok, body)
    return mask if mask.any() and after[mask].max() >= end else np.zeros(body.size, bool)


def encodings(tok, span: Span) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"plain" | "anticipatory": (ids from the style token on, the mask of the span's music)}:
    the excerpt as a training window encodes it (`window_ids`), without and with its suffix given."""
    g = span.notes
    prefix = int(np.count_nonzero(g.onset < span.start))
    style = tok.style_prefix(span.style if span.style in tok.styles else None)
    out = {}
    for name, given, clock in (("plain", None, 0), ("anticipatory", g.onset >= span.end, -tok.lead)):
        ids = np.concatenate([style, window_ids(tok, g, given, span.at_start, False)]).astype(np.int64)
        head = len(style) + 1 + span.at_start  # the style token, the task flag, BOS
        mask = np.concatenate([np.zeros(head, bool), span_music(tok, ids[head:], clock, prefix, span.end)])
        out[name] = (ids, mask)
    return out


def _scored_length(encoded: dict) -> int:
    """Tokens the model must read to score every encoding's span (0: one cannot be scored)."""
    ends = [int(np.flatnonzero(mask)[-1]) if mask.any() else -1 for _, mask in encoded.values()]
    return 0 if min(ends) < 0 else max(ends)


def cut_span(tok, g: GridNotes, start: int, end: int, piece, context: int, prefix_seconds: float) -> Span | None:
    """The span [start, end) steps of piece `g` with its excerpt, its prefix cut (whole onsets at a
    time) until both encodings fit `context`; None where even a MIN_PREFIX prefix does not fit."""
    sps = tok.steps_per_second
    first = int(np.searchsorted(g.onset, start - round(prefix_seconds * sps)))
    stop = int(np.searchsorted(g.onset, end + 2 * tok.lead))
    while first < g.onset.size and g.onset[first] <= start - round(MIN_PREFIX * sps):
        base = int(g.onset[first])
        span = Span(g.take(slice(first, stop)).shifted(-base), start - base, end - base, piece.index, piece.style,
                    first == 0)
        need = _scored_length(encodings(tok, span))
        if 0 < need <= context:
            return span
        if need == 0:
            return None
        first = int(np.searchsorted(g.onset, base + 1))  # the next onset: a window starts on a whole chord
    return None


def draw_spans(store, tok, split: str, count: int, context: int, seed: int = 0, seconds=SECONDS,
               prefix_seconds: float = 10.0) -> list[Span]:
    """`count` spans from the pieces of `split`, the styles taking turns (seeded): a piece of the
    style, a length in `seconds`, a start with MIN_PREFIX of music before it and a note
    `anticipation` seconds after its end, and at least one note in it. A style whose pieces give
    no span in TRIES draws is left out."""
    rng = np.random.default_rng(seed)
    decoded: dict[int, GridNotes] = {}

    def draw(pieces) -> Span | None:
        p = pieces[int(rng.integers(len(pieces)))]
        if p.index not in decoded:
            decoded[p.index] = store.tokenizer.decode_grid(store[p.index], clock=0)[0]
        g, sps = decoded[p.index], tok.steps_per_second
        length = round(float(rng.uniform(*seconds)) * sps)
        lo = int(g.onset.min(initial=0)) + round(MIN_PREFIX * sps)
        hi = int(g.onset.max(initial=0)) - tok.lead - length
        if hi < lo:
            return None
        start = int(rng.integers(lo, hi + 1))
        span = cut_span(tok, g, start, start + length, p, context, prefix_seconds)
        music = span is not None and np.any((span.notes.onset >= span.start) & (span.notes.onset < span.end))
        return span if music else None

    return take_turns(store, split, count, draw)


def take_turns(store, split: str, count: int, draw) -> list:
    """`count` spans of the pieces of `split`, the styles taking turns: `draw(a style's pieces)`
    gives a span or None, and a style whose pieces give none in TRIES draws is left out."""
    pieces = {s: [p for p in store.split(split) if p.style == s] for s in (store.styles or [None])}
    styles = [s for s, ps in pieces.items() if ps]
    out: list = []
    while len(out) < count and styles:
        style = styles[len(out) % len(styles)]
        span = next((s for s in (draw(pieces[style]) for _ in range(TRIES)) if s is not None), None)
        if span is None:
            styles.remove(style)
        else:
            out.append(span)
    return out


def given_only(tok) -> np.ndarray:
    """(vocab,) bool: the ids only a given note writes (CONTROL_NOTE; AHEAD, in a vocabulary with
    lookahead). The prompt places them; decoding never lets the model sample one."""
    out = np.zeros(tok.vocab_size, bool)
    out[tok.control_offset:tok.duration_offset] = True
    if getattr(tok, "ahead_id", -1) >= 0:
        out[tok.ahead_id] = True
    return out


@torch.no_grad()
def span_nll(model, ids: np.ndarray, mask: np.ndarray, never: np.ndarray | None = None) -> tuple[float, int]:
    """(summed NLL in nats, tokens) of the tokens `mask` marks in `ids`, each given those before it.
    `never` (vocab,) bool: ids left out of each prediction, its rest renormalised: scored as the
    sampler draws, where the model is never asked for a given note's id (`given_only`)."""
    last = int(np.flatnonzero(mask)[-1])
    x = torch.as_tensor(ids[:last], dtype=torch.long, device=next(model.parameters()).device)[None]
    logits, _ = model(x)
    logits = logits[0].double()
    if never is not None:
        logits = logits.masked_fill(torch.as_tensor(never, device=logits.device), float("-inf"))
    logp = torch.log_softmax(logits, -1)
    targets = torch.as_tensor(ids[1:last + 1], device=logp.device)
    nll = -logp.gather(1, targets[:, None])[:, 0].cpu().numpy()
    return float(nll[mask[1:last + 1]].sum()), int(mask.sum())


def infill(checkpoint, span: Span, seed: int, compile: bool = True) -> Notes:
    """The model's fill of `span` (`cadenza.generate` with an `Infill` of the excerpt), as the notes
    it starts in the span, in seconds from its start."""
    tok = checkpoint.tokenizer
    a, b = span.seconds(tok)
    cfg = sampling_config(seed=seed, compile=compile, style=span.style if span.style in tok.styles else None)
    notes = sample(checkpoint, cfg, Infill(tok.to_grid_notes(span.notes), a, b)).notes[0]
    return excerpt(notes, a, b - a)
