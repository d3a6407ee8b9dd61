"""The polyphonic piano-roll benchmarks (Boulanger-Lewandowski, Bengio and Vincent, ICML 2012).

Four data sets of 88-key piano rolls, each in one MATLAB file with the official train / valid /
test split (`DATASETS`). Every sequence is written to a token store with `FrameTokenizer` (each
frame: its active keys ascending, then FRAME_END), a bijection, so a model's NLL of the tokens of
a frame is exactly its NLL of that frame given the frames before it.

The reported number is the frame-level NLL of the test split: the sum over all test frames (the
first frame of every sequence included) of -log p(frame | earlier frames of its sequence), divided
by the number of test frames, in nats. `frame_nll` / `score_split` compute it from per-token NLLs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cadenza.bench.common import BenchDataError, BenchScore, aligned_nll, data_file, score_pieces, write_store
from cadenza.data.store import TokenStore
from cadenza.data.tokenizers.frames import FrameTokenizer

DATASETS = {"jsb": "JSB_Chorales.mat", "nottingham": "Nottingham.mat", "musedata": "MuseData.mat",
            "piano": "Piano_midi.mat"}
LABELS = {"jsb": "JSB", "nottingham": "Nottingham", "musedata": "MuseData", "piano": "Piano-midi"}
MAT_KEYS = {"train": "traindata", "valid": "validdata", "test": "testdata"}
OFFICIAL_SPLITS = {"jsb": (229, 76, 77), "nottingham": (694, 173, 170), "musedata": (524, 135, 124),
                   "piano": (87, 12, 25)}  # (train, valid, test) sequences
N_KEYS, LOW_KEY = 88, 21  # column j is MIDI pitch j + 21
# Playback only: JSB was sampled every quarter note, the others every eighth; 120 bpm.
FRAME_SECONDS = {"jsb": 0.5, "nottingham": 0.25, "musedata": 0.25, "piano": 0.25}

# Frame-level test NLL (nats per frame). The last row is not a published model: the trivial
# independent per-key frequency model (`per_key_bernoulli_nll`), a floor any model must beat.
PUBLISHED: dict[str, dict[str, float]] = {
    "RNN-NADE (Boulanger-Lewandowski et al. 2012)": {"jsb": 5.19, "nottingham": 2.31, "musedata": 5.60,
                                                     "piano": 7.05},
    "TCN (Bai et al. 2018)": {"jsb": 8.10, "nottingham": 3.07},
    "LSTM (Bai et al. 2018)": {"jsb": 8.45, "nottingham": 3.29},
    "per-key frequency (trivial baseline)": {"jsb": 11.06, "nottingham": 10.25, "musedata": 11.51,
                                             "piano": 11.05},
}


def dataset_key(path: str | os.PathLike) -> str:
    """The `DATASETS` key of a .mat file, from its file name (e.g. JSB_Chorales.mat -> "jsb")."""
    name = Path(path).name
    for key, fname in DATASETS.items():
        if fname.lower() == name.lower():
            return key
    raise BenchDataError(f"{path}: not one of the benchmark files ({', '.join(DATASETS.values())})")


def load_mat(path: str | os.PathLike) -> dict[str, list[np.ndarray]]:
    """{"train" | "valid" | "test": [bool (T, 88) rolls]} of one benchmark .mat file, in file order."""
    from scipy.io import loadmat

    path = data_file(path, "download it from the Boulanger-Lewandowski 2012 data page")
    try:
        mat = loadmat(path)
    except Exception as e:  # scipy raises several types for a file that is not MATLAB
        raise BenchDataError(f"{path}: not a readable MATLAB file ({type(e).__name__}: {e})") from None
    out: dict[str, list[np.ndarray]] = {}
    for split, key in MAT_KEYS.items():
        if key not in mat:
            found = ", ".join(k for k in mat if not k.startswith("_"))
            raise BenchDataError(f"{path}: no {key!r} array (found {found})")
        rolls = []
        for i, seq in enumerate(np.asarray(mat[key], dtype=object).ravel()):
            seq = np.asarray(seq)
            if seq.ndim != 2 or seq.shape[1] != N_KEYS or (seq.size and not np.isin(seq, (0, 1)).all()):
                raise BenchDataError(f"{path}: {key}[{i}] is not a 0/1 (T, {N_KEYS}) piano roll "
                                     f"(shape {seq.shape}, dtype {seq.dtype})")
            rolls.append(seq.astype(bool))
        out[split] = rolls
    return out


def roll_sha256(roll: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(roll, dtype=np.uint8).tobytes()).hexdigest()


def build_store(mat_path: str | os.PathLike, out_dir: str | os.PathLike,
                frame_seconds: float | None = None) -> TokenStore:
    """Write every sequence of a benchmark .mat file as one piece of a token store, keeping its split.

    Pieces are in the order train, valid, test and, within a split, the file's order; piece sources
    read ``JSB_Chorales.mat:test:17`` (split, index in that split). `frame_seconds` (playback only)
    defaults to the data set's frame rate at 120 bpm (`FRAME_SECONDS`).
    """
    mat_path = Path(mat_path)
    key = dataset_key(mat_path)
    data = load_mat(mat_path)
    tok = FrameTokenizer(LOW_KEY, N_KEYS, frame_seconds or FRAME_SECONDS[key])
    return write_store(out_dir, tok, data, mat_path, roll_sha256, "frames", {"name": "polyphonic", "dataset": key})


# ---- scoring ---------------------------------------------------------------------------------
def frame_nll(token_nll, ids, tokenizer: FrameTokenizer, label: str = "piece") -> tuple[float, int]:
    """(total NLL of the piece's frames, number of frames) from per-token NLLs.

    Alignment: `ids` are the piece's ids as stored (no BOS/EOS). The model reads
    ``[BOS] ids[0] ... ids[-1]`` and `token_nll[i]` = -log p(ids[i] | BOS, ids[:i]) in nats;
    `token_nll` may carry one more entry, -log p(EOS | BOS, ids), which is ignored. In the usual
    shifted-target form (inputs ``[BOS] ids``, targets ``ids [EOS]``) that is the per-target loss.
    The total sums the NLLs of every key and FRAME_END token; by the chain rule it is
    -log p(frames | first frame in context of BOS), since each frame is exactly its tokens. Leaving
    out the EOS can only make the number worse, so it never flatters a model.
    """
    ids = tokenizer.check_ids(ids)
    if ids.size and (ids[-1] != tokenizer.frame_end_id or (ids > tokenizer.frame_end_id).any()):
        raise ValueError(f"{label}: ids are not a frame encoding (must hold keys and FRAME_END only and "
                         "end with FRAME_END)")
    return float(aligned_nll(token_nll, ids, label).sum()), int(np.count_nonzero(tokenizer.frame_ends(ids)))


def score_split(store: TokenStore, token_nlls: Sequence, split: str = "test") -> BenchScore:
    """Frame-level NLL of a split: `token_nlls[j]` are the token NLLs of the split's j-th piece.

    Pieces are in store order (`store.split(split)`), each aligned as in `frame_nll`; each piece's
    frame count is checked against the manifest.
    """
    def piece(nll, ids, tok, label, meta):
        t, n = frame_nll(nll, ids, tok, label)
        if n != meta.get("frames", n):
            raise ValueError(f"{store.path}: {label} has {n} frames in its tokens, {meta['frames']} in the manifest")
        return t, n

    return score_pieces(store, token_nlls, split, FrameTokenizer, piece, "frame")


# ---- the trivial baseline --------------------------------------------------------------------
def key_probabilities(rolls: Sequence[np.ndarray]) -> np.ndarray:
    """P(key active) per key over all frames of `rolls`, add-one smoothed: (count + 1) / (frames + 2)."""
    counts = np.zeros(N_KEYS, np.int64)
    frames = 0
    for r in rolls:
        counts += np.count_nonzero(r, axis=0)
        frames += r.shape[0]
    return (counts + 1) / (frames + 2)


def per_key_bernoulli_nll(train: Sequence[np.ndarray], test: Sequence[np.ndarray]) -> float:
    """Frame-level NLL of `test` under independent per-key Bernoullis fitted on `train`."""
    p = key_probabilities(train)
    log_on, log_off = np.log(p), np.log1p(-p)
    total, frames = 0.0, 0
    for r in test:
        on = np.count_nonzero(r, axis=0)
        total -= float(on @ log_on + (r.shape[0] - on) @ log_off)
        frames += r.shape[0]
    return total / max(frames, 1)


# ---- the table -------------------------------------------------------------------------------
def format_table(rows: Sequence[Mapping[str, Any]] = (), datasets: Sequence[str] = tuple(DATASETS)) -> str:
    """A Markdown table: the published numbers, then `rows`.

    Each row is a mapping with "model" (str), optional "note" (str) and a frame-level NLL per
    dataset key ("jsb", "nottingham", "musedata", "piano"); missing data sets print as "-".
    """
    head = "| model | " + " | ".join(LABELS[d] for d in datasets) + " | source |"
    lines = [head, "|" + " --- |" * (len(datasets) + 2)]
    for name, nums in PUBLISHED.items():
        src = "trivial baseline" if "trivial" in name else "published"
        cells = [f"{nums[d]:.2f}" if d in nums else "-" for d in datasets]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {src} |")
    for row in rows:
        cells = [f"{row[d]:.3f}" if isinstance(row.get(d), (int, float)) else str(row.get(d, "-"))
                 for d in datasets]
        model, note = row.get("model", "cadenza"), row.get("note", "cadenza")
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {note} |")
    return "\n".join(lines)
