"""Four-voice chorale grids as tokens: the JSB Chorales 16th-note form of Coconet / Music Transformer.

At every 16th-note step the four voices are written soprano, alto, tenor, bass, each one token: a
pitch, or REST for a silent voice (NaN in the grid). With the defaults (all 128 MIDI pitches):

====================  ==========  ===============================================
token                 ids         meaning
====================  ==========  ===============================================
PITCH p               0 .. 127    this voice sings MIDI pitch low + id
REST                  128         this voice is silent at this step
PAD, BOS, EOS         129 .. 131  padding, begin and end of a piece
====================  ==========  ===============================================

The JSB 16th data spans MIDI 36..81. The default range is the full MIDI range rather than the
data's, so any transposition the training dataset picks (it keeps pitches within 0..127) stays in
the vocabulary; unused pitch tokens only cost a slightly larger softmax. `low` / `n_pitches`
narrow it (e.g. ``low=36, n_pitches=46`` for exactly the data's range).

The token of step t, voice v is ``ids[4 * t + v]``: the voice is given by the position alone.

Playback (`decode`): each step lasts `step_seconds` (0.125 s: a 16th at 120 bpm); the grid repeats a
held pitch at every step, so consecutive equal pitches of a voice merge into one note (a re-struck
repeated note sounds held; the 16th-note grid cannot tell them apart). `decode_grid` is exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cadenza.data.midi import Notes, notes_to_score
from cadenza.data.tokenizers.base import Encoded, TokenizerError
from cadenza.data.tokenizers.frames import PLAYBACK_VELOCITY
from cadenza.data.tokenizers.grid import GridDecodeReport, PitchGridTokenizer

VOICES = ("soprano", "alto", "tenor", "bass")
N_VOICES = len(VOICES)


class SATBTokenizer(PitchGridTokenizer):
    """(T, 4) S/A/T/B pitch grids with NaN rests <-> ids, voice-interleaved per 16th step.

    >>> tok = SATBTokenizer()
    >>> tok.encode_grid(np.array([[72.0, 67.0, float("nan"), 48.0]])).tolist()
    [72, 67, 128, 48]
    """

    name = "satb"
    marker, pitch_prefix = "REST", "PITCH"
    param_names = ("low", "n_pitches", "step_seconds")
    window_align = N_VOICES  # training windows start on a soprano token (see dataset.WindowDataset)
    n_voices = N_VOICES  # ids[4 * t + v] is voice v: `voice_spans` and `transpose_limits` go voice by voice

    def __init__(self, low: int = 0, n_pitches: int = 128, step_seconds: float = 0.125):
        super().__init__(low, n_pitches, step_seconds)
        self.rest_id = self.marker_id

    # ---- encoding -----------------------------------------------------------------------------
    def encode_grid(self, grid) -> np.ndarray:
        """ids (int64, no bos/eos) of a (T, 4) grid of MIDI pitches, NaN = rest."""
        grid = np.asarray(grid, dtype=np.float64)
        if grid.ndim != 2 or grid.shape[1] != N_VOICES:
            raise TokenizerError(f"voice grid must have shape (T, {N_VOICES}), got {tuple(grid.shape)}")
        rest = np.isnan(grid)
        p = np.where(rest, self.low, grid)
        bad = ~rest & ((p != np.round(p)) | (p < self.low) | (p >= self.low + self.n_pitches))
        if bad.any():
            t, v = np.argwhere(bad)[0]
            lo, hi = self.pitch_bounds
            raise TokenizerError(f"grid value {grid[t, v]} at step {t}, voice {VOICES[v]} is not a pitch in "
                                 f"{lo}..{hi}; {int(bad.sum())} such value(s)")
        return np.where(rest, self.rest_id, p.astype(np.int64) - self.low).ravel()

    def encode(self, source: Any) -> Encoded:
        """Encode a (T, 4) grid (see `encode_grid`); notes counts the merged notes `decode` plays."""
        if not isinstance(source, (np.ndarray, list, tuple)):
            raise TokenizerError(f"satb encodes (T, {N_VOICES}) voice grids, not {type(source).__name__}")
        ids = self.encode_grid(source)
        grid = self.decode_grid(ids)
        return Encoded(ids=ids, notes=int(_note_runs(grid)[0].size),
                       stats={"steps": int(grid.shape[0]),
                              "rests": int(np.count_nonzero(ids == self.rest_id))})

    # ---- decoding -----------------------------------------------------------------------------
    def decode_grid_report(self, ids) -> tuple[np.ndarray, GridDecodeReport]:
        """Any id sequence -> (T, 4) float64 grid (NaN = rest), with the repairs made.

        ids after the first EOS are ignored and PAD/BOS skipped; a last step with fewer than four
        voices is completed with rests (`voices_filled` counts them).
        """
        report = GridDecodeReport(extra={"voices_filled": 0})
        ids = self.content(ids, report)
        missing = -ids.size % N_VOICES
        if missing:
            report.extra["voices_filled"] = missing
            ids = np.concatenate([ids, np.full(missing, self.rest_id, np.int64)])
        grid = np.where(ids == self.rest_id, np.nan, (ids + self.low).astype(np.float64))
        return grid.reshape(-1, N_VOICES), report

    def decode_grid(self, ids) -> np.ndarray:
        """The (T, 4) grid of ids; the exact inverse of `encode_grid` (bos/eos allowed)."""
        return self.decode_grid_report(ids)[0]

    def grid_to_notes(self, grid: np.ndarray) -> list[Notes]:
        """One `Notes` per voice; consecutive equal pitches of a voice are one held note."""
        voice, start, stop, pitch = _note_runs(np.asarray(grid, np.float64))
        sec = self.step_seconds
        return [Notes.from_arrays(start[voice == v] * sec, stop[voice == v] * sec, pitch[voice == v],
                                  np.full(int(np.count_nonzero(voice == v)), PLAYBACK_VELOCITY))
                for v in range(N_VOICES)]

    def decode(self, ids):
        """Decode ids into a symusic Score with one track per voice (S, A, T, B) and a report."""
        grid, report = self.decode_grid_report(ids)
        parts = [notes_to_score(n.by_time(), name=v) for n, v in zip(self.grid_to_notes(grid), VOICES)]
        score = parts[0]
        for part in parts[1:]:
            score.tracks.append(part.tracks[0])
        return score, report

    # ---- the clock -----------------------------------------------------------------------------
    def token_seconds(self) -> np.ndarray:
        secs = np.zeros(self.vocab_size)
        secs[:self.rest_id + 1] = self.step_seconds / N_VOICES  # exact at every step boundary
        return secs


def _note_runs(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(voice, first step, step after the last, pitch) of every run of one pitch in a voice."""
    g = np.full((N_VOICES, grid.shape[0] + 2), np.nan)
    g[:, 1:-1] = grid.T
    # NaN != NaN, so a rest never continues a note: only sounding steps can start or end one.
    change = g[:, 1:] != g[:, :-1]  # change[:, t]: step t differs from step t - 1
    voice, start = np.nonzero(change & ~np.isnan(g[:, 1:]))
    _, stop = np.nonzero(change & ~np.isnan(g[:, :-1]))
    return voice, start, stop, g[voice, start + 1].astype(np.int64)
