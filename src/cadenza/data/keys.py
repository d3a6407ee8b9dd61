"""The key of a passage, by the Krumhansl-Kessler key profiles (Krumhansl 1990, ch. 4).

A passage's pitch classes, each weighted by how long it sounds, are correlated with the 24 major and
minor profiles rotated to every tonic; the best correlation names the key. It is the standard
estimate (music21's `analyze('key')` uses the same profiles), cheap enough to label every training
window, and it is what a vocabulary's KEY token and the accompaniment measures agree on.
"""

from __future__ import annotations

import numpy as np

MAJOR = np.array([6.35, 2.23, 3.48, 2.33, 4.38, 4.09, 2.52, 5.19, 2.39, 3.66, 2.29, 2.88])
MINOR = np.array([6.33, 2.68, 3.52, 5.38, 2.60, 3.53, 2.54, 4.75, 3.98, 2.69, 3.34, 3.17])
NAMES = ("C", "C#", "D", "Eb", "E", "F", "F#", "G", "Ab", "A", "Bb", "B")
KEYS = tuple(f"{n} major" for n in NAMES) + tuple(f"{n} minor" for n in NAMES)  # index: mode * 12 + tonic
_PROFILES = np.stack([np.roll(p, t) for p in (MAJOR, MINOR) for t in range(12)])  # (24, 12)
_Z = (_PROFILES - _PROFILES.mean(1, keepdims=True)) / _PROFILES.std(1, keepdims=True)


def pitch_class_weights(pitch, duration) -> np.ndarray:
    """(12,) the total duration of each pitch class."""
    return np.bincount(np.asarray(pitch, np.int64) % 12, weights=np.asarray(duration, np.float64), minlength=12)


def estimate_key(pitch, duration) -> int | None:
    """The key (an index into KEYS) of notes of `pitch` lasting `duration` (any unit), or None for
    no notes (or no pitch-class variety to correlate)."""
    w = pitch_class_weights(pitch, duration)
    if w.sum() <= 0 or np.allclose(w, w[0]):
        return None
    z = (w - w.mean()) / w.std()
    return int(np.argmax(_Z @ z))


def parse_key(text: str) -> int:
    """A key written as "D minor", "Eb major", "f# minor" or "A" (major) -> its index in KEYS."""
    parts = text.strip().split()
    if not parts or len(parts) > 2:
        raise ValueError(f"a key is a tonic and a mode, such as 'D minor', got {text!r}")
    tonic = parts[0][:1].upper() + parts[0][1:].lower()
    mode = parts[1].lower() if len(parts) == 2 else "major"
    spelled = {"Db": "C#", "D#": "Eb", "Gb": "F#", "G#": "Ab", "A#": "Bb", "Cb": "B", "B#": "C", "E#": "F", "Fb": "E"}
    tonic = spelled.get(tonic, tonic)
    if tonic not in NAMES or mode not in ("major", "minor"):
        raise ValueError(f"unknown key {text!r}: write a tonic (C, F#, Bb, ...) and major or minor")
    return KEYS.index(f"{tonic} {mode}")


def transposed(key: int, semitones: int) -> int:
    """The key `semitones` higher."""
    return key // 12 * 12 + (key % 12 + semitones) % 12
