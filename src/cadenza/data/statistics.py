"""What a store's music is like, measured once at training time: the sampling defaults come from it.

The checkpoint carries these figures, so a model samples within its data's texture without being
told: a monophonic folk-song style plays one note at a time, a chorale at most a few voices more
than four. Without a cap an under-trained model's usual drift is to forget note-offs and pile up
notes until the texture is a cluster.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cadenza.data.midi import Notes

MAX_PIECES = 2000  # per style: enough for a stable percentile, and training starts in seconds


def onset_polyphony(notes: Notes) -> np.ndarray:
    """How many notes sound at each note's onset, itself included (a note ending exactly when
    another starts does not count)."""
    if not len(notes):
        return np.zeros(0, np.int64)
    start, end = np.sort(notes.start), np.sort(notes.end)
    return np.searchsorted(start, notes.start, side="right") - np.searchsorted(end, notes.start, side="right")


def _style_notes(store, split: str):
    """(style, notes) of up to MAX_PIECES pieces of each style of `split`, evenly spread (the same
    pieces on every machine)."""
    by_style: dict[str | None, list] = {}
    for p in store.split(split):
        by_style.setdefault(p.style, []).append(p)
    for style, ps in by_style.items():
        for p in ps[::max(1, len(ps) // MAX_PIECES)]:
            yield style, store.tokenizer.to_notes(np.asarray(store[p.index]))


def store_statistics(store, split: str = "train", percentile: float = 99.0) -> dict[str, Any]:
    """What a checkpoint carries of its data, read in one pass: ``polyphony`` (`polyphony_stats`)
    and ``programs``, the General MIDI programs each style's pieces use (drums: 128), which a
    style's samples keep to unless asked for others."""
    counts: dict[str | None, list[np.ndarray]] = {}
    programs: dict[str | None, set[int]] = {}
    for style, notes in _style_notes(store, split):
        counts.setdefault(style, []).append(onset_polyphony(notes))
        programs.setdefault(style, set()).update(np.unique(notes.programs).tolist())
    every = sorted(set().union(*programs.values())) if programs else []
    return {"polyphony": _percentiles(counts, percentile),
            "programs": {"all": every, "styles": {s: sorted(v) for s, v in programs.items() if s is not None}}}


def polyphony_stats(store, split: str = "train", percentile: float = 99.0) -> dict[str, Any] | None:
    """The `percentile` of onset polyphony over `split`, overall and per style:
    ``{"percentile": 99, "all": 6, "styles": {"bach": 6, "irish": 5, ...}}``; None when the split
    has no notes."""
    counts: dict[str | None, list[np.ndarray]] = {}
    for style, notes in _style_notes(store, split):
        counts.setdefault(style, []).append(onset_polyphony(notes))
    return _percentiles(counts, percentile)


def _percentiles(counts: dict, percentile: float) -> dict[str, Any] | None:
    def q(arrays: list[np.ndarray]) -> int | None:
        v = np.concatenate(arrays) if arrays else np.zeros(0)
        return int(np.percentile(v, percentile, method="higher")) if v.size else None

    overall = q([a for arrays in counts.values() for a in arrays])
    if overall is None:
        return None
    styles = {s: v for s, a in counts.items() if s is not None and (v := q(a)) is not None}
    return {"percentile": percentile, "all": overall, "styles": styles}


def pitch_ranges(store, split: str = "train") -> dict[str | None, tuple[int, int]]:
    """Each style's lowest and highest pitch (drums aside) over `split`: where a transposition of
    its windows may take them (a bass never below any bass of the style, a top line never above)."""
    out: dict[str | None, tuple[int, int]] = {}
    for p in store.split(split):
        notes = store.tokenizer.to_notes(np.asarray(store[p.index]))
        pitch = notes.pitch[notes.programs != 128]
        if pitch.size:
            lo, hi = out.get(p.style, (127, 0))
            out[p.style] = (min(lo, int(pitch.min())), max(hi, int(pitch.max())))
    return out
