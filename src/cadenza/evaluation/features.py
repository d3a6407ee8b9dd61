"""What a piece sounds like, as a vector of numbers a style classifier can separate.

Every feature is a plain function of `Notes` (seconds), so it applies equally to real pieces and to
generated samples. Groups (75 numbers in all):

* pitch: the pitch-class histogram (12), the same sorted largest first (12: how many pitch
  classes carry the music, whatever the key: pentatonic, diatonic, chromatic), pitch mean, spread
  and range;
* melody: the histogram of intervals (0 .. 12 semitones and larger, 14 bins) between successive
  notes of the top voice (the highest note at each onset), and the share of steps, leaps, repeats;
* texture: notes per onset (1 .. 5 and more, 5 bins), mean polyphony, note density;
* rhythm: histograms of inter-onset intervals and of note lengths in log-spaced bins (10 each),
  their means on a log scale;
* dynamics: mean and spread of velocity.
"""

from __future__ import annotations

import numpy as np

from cadenza.data.midi import Notes

TIME_BINS = np.geomspace(0.03, 4.0, 11)  # seconds: 30 ms to 4 s, log-spaced
N_FEATURES = 75


def excerpt(notes: Notes, start: float, seconds: float) -> Notes:
    """The notes that start in [start, start + seconds), shifted to start at 0."""
    keep = (notes.start >= start) & (notes.start < start + seconds)
    return Notes.from_arrays(notes.start[keep] - start, notes.end[keep] - start, notes.pitch[keep],
                             notes.velocity[keep])


def _hist(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    h = np.histogram(np.clip(values, edges[0], edges[-1]), edges)[0].astype(np.float64)
    return h / max(h.sum(), 1.0)


def _top_voice(notes: Notes) -> tuple[np.ndarray, np.ndarray]:
    """Onset times and the highest pitch at each onset (onsets within 10 ms are one)."""
    t = notes.by_time()
    onset = np.round(t.start / 0.01).astype(np.int64)
    times, first = np.unique(onset, return_index=True)
    top = np.maximum.reduceat(t.pitch, first) if t.pitch.size else t.pitch
    return times * 0.01, top


def style_features(notes: Notes) -> np.ndarray:
    """The 75-number description of a piece (see the module docstring); zeros for no notes."""
    out = np.zeros(N_FEATURES)
    if len(notes) == 0:
        return out
    p = notes.pitch
    pc = np.bincount(p % 12, minlength=12) / len(p)
    onsets, top = _top_voice(notes)
    steps = np.abs(np.diff(top))
    melody = np.bincount(np.minimum(steps, 13), minlength=14) / max(steps.size, 1)
    sizes = np.unique(np.round(notes.start / 0.01), return_counts=True)[1]  # notes per onset
    chords = np.bincount(np.minimum(sizes, 5), minlength=6)[1:] / max(sizes.size, 1)
    span = max(float(notes.end.max() - notes.start.min()), 1e-3)
    ioi = np.diff(onsets) if onsets.size > 1 else np.array([span])
    dur = notes.end - notes.start
    parts = [
        pc, np.sort(pc)[::-1], [p.mean() / 127, p.std() / 24, (p.max() - p.min()) / 48],
        melody, [np.mean(steps == 0) if steps.size else 0, np.mean((steps > 0) & (steps <= 2)) if steps.size else 0,
                 np.mean(steps > 4) if steps.size else 0],
        chords, [dur.sum() / span / 4, len(notes) / span / 10],
        _hist(ioi, TIME_BINS), _hist(dur, TIME_BINS), [np.log(ioi.mean()), np.log(dur.mean())],
        [notes.velocity.mean() / 127, notes.velocity.std() / 32],
    ]
    flat = np.concatenate([np.asarray(x, np.float64).ravel() for x in parts])
    out[:flat.size] = flat
    return out
