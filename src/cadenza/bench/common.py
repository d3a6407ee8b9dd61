"""What every published benchmark shares: its data errors, its store, its score, and per-piece NLL alignment."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cadenza.data.store import SPLITS, StoreWriter, TokenStore


class BenchDataError(ValueError):
    """A benchmark data file that is missing or not in the expected form; the message names it."""


@dataclass
class BenchScore:
    """A split's score: `nll` = `total_nll` / `units` (frames or tokens), in nats."""

    nll: float
    total_nll: float
    units: int
    pieces: int
    unit: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def data_file(path: str | os.PathLike, how_to_get: str) -> Path:
    """The benchmark's data file, or a `BenchDataError` saying where to get it."""
    path = Path(path)
    if not path.is_file():
        raise BenchDataError(f"{path}: no such file ({how_to_get}; see docs/benchmarks-polyphonic.md)")
    return path


def file_sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_store(out_dir: str | os.PathLike, tok, data: dict[str, list[np.ndarray]], file: Path,
                sha: Callable[[np.ndarray], str], unit: str, bench: dict[str, Any]) -> TokenStore:
    """One piece per sequence of `data`, in the order train, valid, test and, within a split, the
    file's order, each keeping its official split; sources read ``FILE:split:index`` and each piece
    records its length in `unit` (frames or steps)."""
    writer = StoreWriter(out_dir, tok)
    try:
        for split in SPLITS:
            for i, item in enumerate(data[split]):
                try:
                    enc = tok.encode(item)
                except ValueError as e:
                    raise BenchDataError(f"{file}: {split}[{i}]: {e}") from None
                writer.add(enc.ids, source=f"{file.name}:{split}:{i}", sha256=sha(item), notes=enc.notes,
                           seconds=tok.seconds(enc.ids), split=split, **{unit: int(item.shape[0])})
    except BaseException:
        writer.abort()
        raise
    bench = {**bench, "file": file.name, "file_sha256": file_sha256(file), "splits": "official",
             unit: {s: int(sum(x.shape[0] for x in data[s])) for s in SPLITS}}
    writer.close([], valid_fraction=0.0, test_fraction=0.0, extra={"benchmark": bench})
    return TokenStore(out_dir)


def aligned_nll(token_nll, ids: np.ndarray, label: str = "piece") -> np.ndarray:
    """The NLLs of ids[0], ..., ids[-1] (float64): token_nll holds those, optionally then the EOS's."""
    nll = np.asarray(token_nll, dtype=np.float64).ravel()
    if nll.size == ids.size + 1:
        return nll[:-1]  # the EOS: the benchmarks score the notes, not where the piece stops
    if nll.size != ids.size:
        raise ValueError(f"{label}: {nll.size} token NLLs for {ids.size} ids; expected {ids.size} "
                         f"(ids only) or {ids.size + 1} (ids then EOS)")
    return nll


def score_pieces(store: TokenStore, token_nlls: Sequence, split: str, tokenizer_type: type,
                 piece_score: Callable[..., tuple[float, int]], unit: str) -> BenchScore:
    """A split's score from per-piece token NLLs (`token_nlls[j]` for the split's j-th piece, in
    store order): `piece_score(nll, ids, tokenizer, label, manifest_entry)` gives each piece's
    (total NLL, units); the score is their total over their units."""
    pieces = store.split(split)
    tok = store.tokenizer
    if not isinstance(tok, tokenizer_type):
        raise ValueError(f"{store.path}: store uses tokenizer {tok.name!r}, not {tokenizer_type.name!r}")
    if len(token_nlls) != len(pieces):
        raise ValueError(f"{store.path}: {len(token_nlls)} NLL arrays for {len(pieces)} {split} pieces")
    total, units = 0.0, 0
    for piece, nll in zip(pieces, token_nlls):
        t, n = piece_score(nll, np.asarray(store[piece.index], np.int64), tok, piece.source,
                           store.manifest["pieces"][piece.index])
        total += t
        units += n
    return BenchScore(total / max(units, 1), total, units, len(pieces), unit)
