"""Piano-roll frames as tokens: the bijective encoding of the polyphonic benchmarks (issue 5).

A piano roll is a sequence of frames, each the set of keys sounding at that time step. Each frame
becomes its active keys in ascending order followed by a frame-end token; an empty frame is the
frame-end token alone. With the default 88 keys (MIDI 21..108):

====================  ==========  ===============================================
token                 ids         meaning
====================  ==========  ===============================================
KEY k                 0 .. 87     MIDI pitch 21 + k is active in this frame
FRAME_END             88          the current frame is complete
PAD, BOS, EOS         89 .. 91    padding, begin and end of a piece
====================  ==========  ===============================================

Because the order inside a frame is fixed, every roll has exactly one token sequence and back, so
a model's log-likelihood of the tokens is exactly its log-likelihood of the frames (the benchmark's
frame-level NLL, see `cadenza.bench.polyphonic.frame_nll`).

Playback (`decode`): every frame lasts `frame_seconds`; consecutive active frames of one key merge
into one sustained note, so a re-struck chord of the same notes sounds held. That loss is only in
playback: `decode_roll` is the exact inverse of `encode_roll`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cadenza.data.midi import Notes, notes_to_score
from cadenza.data.tokenizers.base import Encoded, TokenizerError
from cadenza.data.tokenizers.grid import GridDecodeReport, PitchGridTokenizer

PLAYBACK_VELOCITY = 80  # rolls carry no dynamics; a mezzo-forte default for listening


def _runs(active: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(column, first row, row after the last) of every run of True down the columns of a 2-D mask."""
    t, k = active.shape
    edges = np.zeros((k, t + 2), np.int8)
    edges[:, 1:-1] = active.T
    d = np.diff(edges, axis=1)
    # np.nonzero walks row-major (column of `active`, then time), so starts and ends pair up.
    col, start = np.nonzero(d == 1)
    _, stop = np.nonzero(d == -1)
    return col, start, stop


class FrameTokenizer(PitchGridTokenizer):
    """Piano-roll frames <-> ids: active keys ascending, then FRAME_END (n_keys + 4 ids).

    >>> tok = FrameTokenizer()
    >>> roll = np.zeros((3, 88), bool); roll[0, [39, 43]] = True; roll[2, 39] = True
    >>> tok.encode_roll(roll).tolist()
    [39, 43, 88, 88, 39, 88]
    >>> bool((tok.decode_roll(tok.encode_roll(roll)) == roll).all())
    True
    """

    name = "frames"
    marker, pitch_prefix = "FRAME_END", "KEY"
    param_names = ("low", "n_keys", "frame_seconds")

    def __init__(self, low: int = 21, n_keys: int = 88, frame_seconds: float = 0.5):
        super().__init__(low, n_keys, frame_seconds)
        self.frame_end_id = self.marker_id

    def frame_ends(self, ids) -> np.ndarray:
        """Boolean mask of the FRAME_END tokens in ids."""
        return np.asarray(ids) == self.frame_end_id

    # ---- encoding -----------------------------------------------------------------------------
    def encode_roll(self, roll) -> np.ndarray:
        """ids (int64, no bos/eos) of a (T, n_keys) piano roll; nonzero = active."""
        roll = np.asarray(roll)
        if roll.ndim != 2 or roll.shape[1] != self.n_keys:
            raise TokenizerError(f"piano roll must have shape (T, {self.n_keys}), got {tuple(roll.shape)}")
        active = roll != 0
        t, k = np.nonzero(active)  # row-major: frames in order, keys ascending inside each frame
        counts = active.sum(axis=1)
        out = np.empty(t.size + roll.shape[0], np.int64)
        # Each key token sits after the t frame-ends before it; frame t ends after all its keys.
        out[np.arange(t.size) + t] = k
        out[np.cumsum(counts) + np.arange(roll.shape[0])] = self.frame_end_id
        return out

    def roll_from_notes(self, notes: Notes) -> tuple[np.ndarray, int]:
        """Sample notes onto the frame grid: a note covers frames round(start)..round(end)-1, at least one.

        Returns the roll and the number of notes dropped for lying outside the keys. Exact inverse
        of `decode` for the notes it produces (they start and end on frame boundaries).
        """
        fs = self.frame_seconds
        k = notes.pitch - self.low
        inside = (k >= 0) & (k < self.n_keys)
        s = np.floor(notes.start[inside] / fs + 0.5).astype(np.int64)
        e = np.maximum(np.floor(notes.end[inside] / fs + 0.5).astype(np.int64), s + 1)
        k = k[inside]
        n_frames = int(e.max()) if e.size else 0
        delta = np.zeros((n_frames + 1, self.n_keys), np.int32)
        np.add.at(delta, (s, k), 1)
        np.add.at(delta, (e, k), -1)
        roll = np.cumsum(delta[:-1], axis=0) > 0
        return roll, int(np.count_nonzero(~inside))

    def encode(self, source: Any) -> Encoded:
        """Encode a (T, n_keys) piano roll, or `Notes` / a Score / a MIDI file sampled onto frames."""
        stats: dict[str, int] = {}
        if isinstance(source, (list, tuple)):
            source = np.asarray(source)
        if isinstance(source, np.ndarray) and source.ndim == 2:
            roll = source != 0
        else:
            if isinstance(source, np.ndarray):
                raise TokenizerError(f"piano roll must have shape (T, {self.n_keys}), got {source.shape}")
            notes, read = self.read(source)
            stats.update(read)
            roll, stats["out_of_keys"] = self.roll_from_notes(notes)
        ids = self.encode_roll(roll)
        onsets = roll.copy()
        onsets[1:] &= ~roll[:-1]
        stats["frames"] = int(roll.shape[0])
        stats["empty_frames"] = int(np.count_nonzero(~roll.any(axis=1)))
        return Encoded(ids=ids, notes=int(np.count_nonzero(onsets)), stats=stats)

    # ---- decoding -----------------------------------------------------------------------------
    def decode_roll_report(self, ids) -> tuple[np.ndarray, GridDecodeReport]:
        """Any id sequence -> (T, n_keys) bool roll, repairing what is not a canonical encoding.

        Repairs (counted in the report): ids after the first EOS are ignored, PAD/BOS skipped; a key
        repeated inside one frame is kept once (`repeated_in_frame`); keys out of ascending order
        are sorted (`out_of_order_in_frame`); keys after the last FRAME_END form a last frame
        (`closed_at_end` counts them).
        """
        report = GridDecodeReport(extra={"repeated_in_frame": 0, "out_of_order_in_frame": 0})
        ids = self.content(ids, report)
        is_end = ids == self.frame_end_id
        frame = np.cumsum(is_end) - is_end  # frame-ends before each token
        n_frames = int(np.count_nonzero(is_end))
        if ids.size and not is_end[-1]:
            report.closed_at_end = int(ids.size - (np.flatnonzero(is_end)[-1] + 1 if n_frames else 0))
            n_frames += 1
        key = frame[~is_end] * self.n_keys + ids[~is_end]  # increases along a canonical sequence
        if key.size:
            _, first = np.unique(key, return_index=True)
            is_first = np.zeros(key.size, bool)
            is_first[first] = True
            report.extra["repeated_in_frame"] = int(key.size - first.size)
            prev_max = np.maximum.accumulate(np.concatenate(([-1], key[:-1])))
            report.extra["out_of_order_in_frame"] = int(np.count_nonzero(is_first & (key < prev_max)))
        roll = np.zeros((n_frames, self.n_keys), bool)
        roll[frame[~is_end], ids[~is_end]] = True
        return roll, report

    def decode_roll(self, ids) -> np.ndarray:
        """The (T, n_keys) bool roll of ids; the exact inverse of `encode_roll` (bos/eos allowed)."""
        return self.decode_roll_report(ids)[0]

    def roll_to_notes(self, roll: np.ndarray) -> Notes:
        """Notes of a roll: each run of consecutive active frames of a key is one sustained note."""
        k, start, stop = _runs(np.asarray(roll, bool))
        fs = self.frame_seconds
        return Notes.from_arrays(start * fs, stop * fs, k + self.low, np.full(k.size, PLAYBACK_VELOCITY))

    def decode(self, ids):
        """Decode ids into a one-track symusic Score (frames of `frame_seconds`) and a report."""
        roll, report = self.decode_roll_report(ids)
        return notes_to_score(self.roll_to_notes(roll).by_time()), report

    def token_seconds(self) -> np.ndarray:
        secs = np.zeros(self.vocab_size)
        secs[self.frame_end_id] = self.frame_seconds  # a frame's time passes at its end
        return secs
