"""JSB Chorales at 16th-note resolution, four voices (Coconet, Huang et al. 2017; Music Transformer,
Huang et al. 2018).

`Jsb16thSeparated.npz` holds the 382 chorales with the same train / valid / test split as the
piano-roll JSB set (229 / 76 / 77); each chorale is a (T, 4) grid of S, A, T, B MIDI pitches per
16th note, NaN = rest. `SATBTokenizer` writes each step as its four voice tokens, S A T B, and the
benchmark number is the mean NLL per grid token in nats (the EOS excluded). Music Transformer
reports 0.335 on the validation split; cadenza reports validation and test.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cadenza.bench.common import BenchDataError, BenchScore, aligned_nll, data_file, score_pieces, write_store
from cadenza.data.store import SPLITS, TokenStore
from cadenza.data.tokenizers.satb import N_VOICES, SATBTokenizer

FILENAME = "Jsb16thSeparated.npz"
OFFICIAL_SPLITS = (229, 76, 77)  # (train, valid, test) chorales

# NLL per token (nats) with the voices serialised S, A, T, B at every 16th-note step.
PUBLISHED: dict[str, dict[str, float]] = {
    "Music Transformer (Huang et al. 2018)": {"valid": 0.335},
}


def load_npz(path: str | os.PathLike) -> dict[str, list[np.ndarray]]:
    """{"train" | "valid" | "test": [float64 (T, 4) pitch grids, NaN = rest]}, in file order."""
    path = data_file(path, f"download {FILENAME} from czhuang/JSB-Chorales-dataset")
    try:
        # The public file stores each split as an object array of per-chorale arrays, written by
        # Python 2: loading it needs pickle and latin1. Only this known file is loaded this way;
        # nothing else in cadenza unpickles data.
        with np.load(path, allow_pickle=True, encoding="latin1") as npz:
            raw = {s: npz[s] for s in SPLITS if s in npz.files}
    except Exception as e:  # a damaged or non-npz file: numpy raises several types
        raise BenchDataError(f"{path}: not a readable .npz file ({type(e).__name__}: {e})") from None
    out: dict[str, list[np.ndarray]] = {}
    for split in SPLITS:
        if split not in raw:
            raise BenchDataError(f"{path}: no {split!r} array")
        grids = []
        for i, g in enumerate(raw[split]):
            try:
                g = np.asarray(g, dtype=np.float64)
            except (TypeError, ValueError):
                g = np.empty((0, 0))
            if g.ndim != 2 or g.shape[1] != N_VOICES:
                raise BenchDataError(f"{path}: {split}[{i}] is not a (T, {N_VOICES}) voice grid "
                                     f"(shape {g.shape})")
            grids.append(g)
        out[split] = grids
    return out


def grid_sha256(grid: np.ndarray) -> str:
    # NaN payloads differ between files; hash the canonical integer form (-1 = rest) instead.
    canon = np.where(np.isnan(grid), -1, grid).astype("<i2")
    return hashlib.sha256(canon.tobytes()).hexdigest()


def build_store(npz_path: str | os.PathLike, out_dir: str | os.PathLike,
                tokenizer: SATBTokenizer | None = None) -> TokenStore:
    """Write every chorale of the .npz as one piece of a token store, keeping its official split.

    Pieces are in the order train, valid, test and, within a split, the file's order; sources read
    ``Jsb16thSeparated.npz:valid:3``.
    """
    npz_path = Path(npz_path)
    data = load_npz(npz_path)
    tok = tokenizer or SATBTokenizer()
    return write_store(out_dir, tok, data, npz_path, grid_sha256, "steps", {"name": "jsb16"})


def per_token_nll(token_nll, ids, tokenizer: SATBTokenizer, label: str = "piece") -> tuple[float, int]:
    """(total NLL of the piece's grid tokens, number of grid tokens) from per-token NLLs.

    Alignment as in `cadenza.bench.polyphonic.frame_nll`: `ids` as stored (no BOS/EOS),
    `token_nll[i]` = -log p(ids[i] | BOS, ids[:i]), optionally followed by the EOS's NLL, which is
    left out: the benchmark counts the 4 * T voice tokens only.
    """
    ids = tokenizer.check_ids(ids)
    if ids.size % N_VOICES or (ids > tokenizer.rest_id).any():
        raise ValueError(f"{label}: ids are not a voice grid (must hold pitch and REST tokens only, "
                         f"a multiple of {N_VOICES})")
    return float(aligned_nll(token_nll, ids, label).sum()), int(ids.size)


def score_split(store: TokenStore, token_nlls: Sequence, split: str = "test") -> BenchScore:
    """Mean NLL per grid token of a split: `token_nlls[j]` for the split's j-th piece (store order)."""
    return score_pieces(store, token_nlls, split, SATBTokenizer,
                        lambda nll, ids, tok, label, meta: per_token_nll(nll, ids, tok, label), "token")


def format_table(rows: Sequence[Mapping[str, Any]] = ()) -> str:
    """A Markdown table: the published number, then `rows` (mappings with "model", optional
    "note", and NLL per token under "valid" and/or "test")."""
    lines = ["| model | valid | test | source |", "| --- | --- | --- | --- |"]

    def cell(v: Any, digits: int) -> str:
        return f"{v:.{digits}f}" if isinstance(v, (int, float)) else str(v if v is not None else "-")

    for name, nums in PUBLISHED.items():
        lines.append(f"| {name} | {cell(nums.get('valid'), 3)} | {cell(nums.get('test'), 3)} | published |")
    for row in rows:
        lines.append(f"| {row.get('model', 'cadenza')} | {cell(row.get('valid'), 4)} | "
                     f"{cell(row.get('test'), 4)} | {row.get('note', 'cadenza')} |")
    return "\n".join(lines)
