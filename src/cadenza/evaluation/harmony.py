"""Do new notes fit the notes they are given? The measures of an accompaniment, on notes in seconds.

* `harmony`: at each melody onset, the interval from the bass (the lowest other note sounding
  below the melody) up to the melody: the share that is consonant (unison, thirds, fifth, sixths);
  how many voices sound below it, and how often something sounds above it.
* `synchrony`: the share of notes that start together with at least two others (chorale texture
  moves in chords: 82% of notes in the real chorales do).
* `same_key`: whether the accompaniment's key (Krumhansl-Kessler) is the melody's.
* `melody_gain`: teacher-forced, how much likelier the real lower voices' pitches are with the
  melody given than without it (nats a note): whether a model writes *to* the melody.
"""

from __future__ import annotations

import numpy as np
import torch

from cadenza.data.keys import estimate_key
from cadenza.data.midi import DRUMS, Notes
from cadenza.data.tokenizers.note_grid import GridNotes

CONSONANT = (0, 3, 4, 7, 8, 9)  # semitones mod 12: unison and octave, thirds, fifth, sixths
ONSET = 1e-6  # seconds: a note sounds at an onset when it starts at most this after it
TOGETHER = 1e-3  # seconds: onsets this close start together


def under_melody(tune: Notes, others: Notes) -> dict[str, np.ndarray]:
    """At each melody onset: the interval (semitones mod 12) from the bass (the lowest other note
    sounding below the melody) up to the melody, -1 where nothing sounds below it; how many other
    notes sound below it; whether any sounds above it."""
    t = tune.start[:, None] + ONSET
    sounding = (others.start[None] <= t) & (others.end[None] > t)
    below = sounding & (others.pitch[None] < tune.pitch[:, None])
    bass = np.where(below, others.pitch[None], 128).min(axis=1, initial=128)
    return {"interval": np.where(below.any(axis=1), (tune.pitch - bass) % 12, -1), "voices": below.sum(axis=1),
            "above": (sounding & (others.pitch[None] > tune.pitch[:, None])).any(axis=1)}


def harmony(tune: Notes, others: Notes) -> dict[str, float]:
    """`under_melody` summed up: the share of consonant intervals (over onsets with a bass), the
    mean number of voices below the melody, the share of onsets with a note above it."""
    u = under_melody(tune, others)
    bassed = u["interval"] >= 0
    consonant = np.isin(u["interval"][bassed], CONSONANT).mean() if bassed.any() else float("nan")
    return {"consonant": float(consonant), "voices_under": float(u["voices"].mean()), "above": float(u["above"].mean())}


def synchrony(notes: Notes) -> float:
    """The share of notes that start within `TOGETHER` of at least two other notes."""
    start = np.sort(notes.start)
    if start.size < 3:
        return float("nan")
    lo = np.searchsorted(start, start - TOGETHER, side="left")
    hi = np.searchsorted(start, start + TOGETHER, side="right")
    return float(np.mean(hi - lo >= 3))


def key_of(notes: Notes) -> int | None:
    pitched = notes.programs != DRUMS
    return estimate_key(notes.pitch[pitched], (notes.end - notes.start)[pitched])


def same_key(tune: Notes, others: Notes) -> bool:
    """Whether the accompaniment's Krumhansl-Kessler key is the melody's."""
    k = key_of(tune)
    return k is not None and k == key_of(others)


def fit(tune: Notes, others: Notes) -> dict[str, float]:
    """Every measure of one accompaniment: `harmony`, `synchrony` of all its notes, `same_key`."""
    both = Notes.from_arrays(np.concatenate([tune.start, others.start]), np.concatenate([tune.end, others.end]),
                             np.concatenate([tune.pitch, others.pitch]),
                             np.concatenate([tune.velocity, others.velocity]))
    return {**harmony(tune, others), "synchrony": synchrony(both), "same_key": float(same_key(tune, others))}


@torch.no_grad()
def melody_gain(model, tok, g: GridNotes, tune: np.ndarray, style: str | None, context: int) -> dict[str, float]:
    """Teacher-forced: the NLL (nats a note) of the real lower voices' NOTE tokens in one window
    of `g` (a piece's grid notes from its start), with the melody (`tune`) given as controls and with
    the melody left out; both read from the piece's start with no key, over the first lower-voice
    notes that both windows hold. `gain` = without - with: positive when the melody helps."""
    from cadenza.data.anticipation import window_ids  # lazy: evaluation reads windows only here

    lower = g.take(~tune)
    head = tok.style_prefix(style)
    given = window_ids(tok, g, tune, True, False, "accompany", None)
    alone = window_ids(tok, lower, None, True, False, "autoregress", None)
    nll = [_note_nll(model, tok, np.concatenate([head, ids])[:context + 1]) for ids in (given, alone)]
    n = min(nll[0].size, nll[1].size)
    with_m, without = float(nll[0][:n].mean()), float(nll[1][:n].mean())
    return {"with_melody": with_m, "without_melody": without, "gain": without - with_m, "notes": int(n)}


def _note_nll(model, tok, ids: np.ndarray) -> np.ndarray:
    """-log p of each event NOTE token of `ids` (in order), given those before it."""
    x = torch.as_tensor(ids[None, :-1], dtype=torch.long, device=next(model.parameters()).device)
    logp = torch.log_softmax(model(x)[0][0].double(), -1)
    target = torch.as_tensor(ids[1:], device=logp.device)
    nll = -logp.gather(1, target[:, None])[:, 0].cpu().numpy()
    is_note = (ids[1:] >= tok.note_offset) & (ids[1:] < tok.control_offset)
    return nll[is_note]
