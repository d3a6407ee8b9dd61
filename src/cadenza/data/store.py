"""The token store: every piece's ids in one flat uint16 file, memory-mapped for training.

A store is a folder:

* ``tokens.bin``: the ids of all pieces back to back (little-endian uint16, no bos/eos);
* ``offsets.npy``: int64, ``offsets[i]:offsets[i + 1]`` are piece i's ids;
* ``manifest.json``: written last, so a folder without it is not a store. It holds the format
  version, the tokenizer config, each piece (source, sha256, tokens, notes, seconds, split), each
  skipped file with its reason, and totals.

Opening checks sizes and counts against the manifest, so a truncated or mismatched store fails
with a message that says what to re-run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cadenza.atomic import atomic_path, write_json
from cadenza.data.tokenizers import Tokenizer, tokenizer_from_dict
from cadenza.env.record import library_versions

FORMAT = "cadenza-token-store"
FORMAT_VERSION = 1
TOKENS = "tokens.bin"
OFFSETS = "offsets.npy"
MANIFEST = "manifest.json"
DTYPE = np.dtype("<u2")
SPLITS = ("train", "valid", "test")


class StoreError(RuntimeError):
    """A store that is missing, incomplete or inconsistent; the message says what to do."""


def split_of(sha256: str, valid_fraction: float, test_fraction: float) -> str:
    """Deterministic split from a piece's content hash, stable when files are added or renamed."""
    u = int(sha256[:16], 16) / 2**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + valid_fraction:
        return "valid"
    return "train"


def assign_splits(shas: list[str], valid_fraction: float, test_fraction: float) -> list[str]:
    """`split_of` for each piece, then moved so that train is never empty and, from 3 pieces on,
    no requested split is empty.

    A piece moves out of train into an empty split when its hash lies closest to that split's
    interval; into an empty train, the piece whose hash lies highest (closest to train's interval)
    moves. Both are deterministic functions of the contents.
    """
    splits = [split_of(s, valid_fraction, test_fraction) for s in shas]
    u = np.array([int(s[:16], 16) / 2**64 for s in shas])
    if shas and "train" not in splits:
        splits[int(np.argmax(u))] = "train"
    bounds = {"test": (0.0, test_fraction), "valid": (test_fraction, test_fraction + valid_fraction)}
    for name, frac in (("valid", valid_fraction), ("test", test_fraction)):
        if frac <= 0 or name in splits or splits.count("train") < 2:
            continue
        lo, hi = bounds[name]
        cand = [i for i, s in enumerate(splits) if s == "train"]
        dist = [min(abs(u[i] - lo), abs(u[i] - hi)) for i in cand]
        splits[cand[int(np.argmin(dist))]] = name
    return splits


class StoreWriter:
    """Append pieces to a new store; `close()` writes the manifest last, atomically.

    Until `close()` succeeds the folder holds no manifest.json (an old one is removed first), so an
    interrupted prepare never leaves a store that looks complete.
    """

    def __init__(self, out: str | os.PathLike, tokenizer: Tokenizer):
        if tokenizer.vocab_size > np.iinfo(DTYPE).max + 1:
            raise StoreError(f"vocabulary of {tokenizer.vocab_size} ids does not fit the store's uint16")
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / MANIFEST).unlink(missing_ok=True)
        self.tokenizer = tokenizer
        self._tokens_ctx = atomic_path(self.out / TOKENS)
        self._tokens_tmp = self._tokens_ctx.__enter__()
        self._f = open(self._tokens_tmp, "wb")
        self.offsets = [0]
        self.pieces: list[dict[str, Any]] = []

    def add(self, ids: np.ndarray, **meta: Any) -> None:
        ids = np.asarray(ids)
        self._f.write(ids.astype(DTYPE).tobytes())
        self.offsets.append(self.offsets[-1] + int(ids.size))
        self.pieces.append({**meta, "tokens": int(ids.size)})

    def close(self, skipped: Iterable[dict], valid_fraction: float, test_fraction: float,
              extra: dict[str, Any] | None = None) -> Path:
        self._f.close()
        self._tokens_ctx.__exit__(None, None, None)
        with atomic_path(self.out / OFFSETS) as tmp, open(tmp, "wb") as f:
            np.save(f, np.asarray(self.offsets, dtype=np.int64))
        # Pieces may arrive with a split (a benchmark's official one); the rest are hashed.
        free = [p for p in self.pieces if "split" not in p]
        for p, s in zip(free, assign_splits([p["sha256"] for p in free], valid_fraction, test_fraction)):
            p["split"] = s
        skipped = list(skipped)
        wanted = {"valid": valid_fraction, "test": test_fraction}
        empty = [s for s in SPLITS if wanted.get(s, 1) > 0 and not any(p["split"] == s for p in self.pieces)]
        totals = {
            "pieces": len(self.pieces),
            "tokens": self.offsets[-1],
            "notes": int(sum(p.get("notes", 0) for p in self.pieces)),
            "seconds": float(sum(p.get("seconds", 0.0) for p in self.pieces)),
            "skipped": len(skipped),
            "empty_splits": empty,
            "splits": {s: {"pieces": sum(p["split"] == s for p in self.pieces),
                           "tokens": int(sum(p["tokens"] for p in self.pieces if p["split"] == s))}
                       for s in SPLITS},
        }
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "cadenza_version": library_versions(("cadenza",))["cadenza"],
            "dtype": DTYPE.str,
            "tokenizer": self.tokenizer.to_dict(),
            "valid_fraction": valid_fraction,
            "test_fraction": test_fraction,
            "totals": totals,
            **(extra or {}),
            "pieces": self.pieces,
            "skipped": skipped,
        }
        write_json(self.out / MANIFEST, manifest)
        return self.out

    def abort(self) -> None:
        self._f.close()
        self._tokens_ctx.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)


@dataclass
class Piece:
    index: int
    source: str
    split: str
    start: int
    stop: int
    style: str | None = None

    def __len__(self) -> int:
        return self.stop - self.start


class TokenStore:
    """Read access to a store: `store[i]` is piece i's ids (a read-only memmap slice)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        mpath = self.path / MANIFEST
        if not mpath.exists():
            hint = " (an interrupted `cadenza prepare`? run it again)" if (self.path / TOKENS).exists() \
                or any(self.path.glob(f".{TOKENS}.*")) else " (create one with `cadenza prepare`)"
            raise StoreError(f"{self.path}: not a token store, no {MANIFEST}{hint}")
        raw = mpath.read_bytes()
        try:
            self.manifest = json.loads(raw)
        except json.JSONDecodeError as e:
            raise StoreError(f"{mpath}: unreadable manifest ({e}); re-run `cadenza prepare`") from None
        if self.manifest.get("format") != FORMAT:
            raise StoreError(f"{mpath}: not a cadenza token store manifest")
        if self.manifest.get("format_version", 0) > FORMAT_VERSION:
            raise StoreError(f"{mpath}: store format {self.manifest['format_version']} is newer than this "
                             f"cadenza understands ({FORMAT_VERSION}); upgrade cadenza")
        self.fingerprint = hashlib.sha256(raw).hexdigest()
        self.tokenizer = tokenizer_from_dict(self.manifest["tokenizer"])
        n_tokens = int(self.manifest["totals"]["tokens"])
        tpath = self.path / TOKENS
        size = tpath.stat().st_size if tpath.exists() else -1
        if size != n_tokens * DTYPE.itemsize:
            raise StoreError(
                f"{tpath}: expected {n_tokens * DTYPE.itemsize} bytes for {n_tokens} tokens, found "
                f"{max(size, 0)}: the store is truncated or mismatched; re-run `cadenza prepare`"
            )
        try:
            self.offsets = np.load(self.path / OFFSETS)
        except (OSError, ValueError) as e:
            raise StoreError(f"{self.path / OFFSETS}: unreadable ({e}); re-run `cadenza prepare`") from None
        pieces = self.manifest["pieces"]
        if self.offsets.shape != (len(pieces) + 1,) or int(self.offsets[-1]) != n_tokens or \
                any(int(self.offsets[i + 1] - self.offsets[i]) != p["tokens"] for i, p in enumerate(pieces)):
            raise StoreError(f"{self.path}: offsets do not match the manifest; re-run `cadenza prepare`")
        self.pieces = [Piece(i, p["source"], p["split"], int(self.offsets[i]), int(self.offsets[i + 1]),
                             p.get("style")) for i, p in enumerate(pieces)]
        self._tokens: np.memmap | None = None

    @property
    def tokens(self) -> np.ndarray:
        # Opened lazily and dropped on pickling, so each DataLoader worker maps the file itself.
        if self._tokens is None:
            n = int(self.offsets[-1])
            self._tokens = np.memmap(self.path / TOKENS, dtype=DTYPE, mode="r", shape=(n,)) if n else \
                np.zeros(0, DTYPE)
        return self._tokens

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_tokens"] = None
        return state

    def __len__(self) -> int:
        return len(self.pieces)

    def __getitem__(self, i: int) -> np.ndarray:
        p = self.pieces[i]
        return self.tokens[p.start:p.stop]

    def split(self, name: str) -> list[Piece]:
        if name not in SPLITS:
            raise StoreError(f"unknown split {name!r}; use one of {', '.join(SPLITS)}")
        return [p for p in self.pieces if p.split == name]

    @property
    def styles(self) -> list[str]:
        """The style labels of the store's pieces, in the order `prepare` met them."""
        return list(self.manifest.get("styles") or {})

    @property
    def totals(self) -> dict[str, Any]:
        return self.manifest["totals"]

    @property
    def skipped(self) -> list[dict]:
        return self.manifest["skipped"]

    def unigram_nll(self, split: str = "valid", train_split: str = "train") -> float:
        """NLL (nats/token) of `split` under the add-one-smoothed unigram of `train_split`.

        The baseline a trained model must beat; bos/eos are scored like the model sees them.
        """
        tok = self.tokenizer
        counts = np.ones(tok.vocab_size)
        for p in self.split(train_split):
            counts += np.bincount(self[p.index], minlength=tok.vocab_size)
            counts[tok.eos_id] += 1
        logp = np.log(counts / counts.sum())
        total, n = 0.0, 0
        for p in self.split(split):
            ids = np.asarray(self[p.index], np.int64)
            total -= logp[ids].sum() + logp[tok.eos_id]
            n += ids.size + 1
        return total / max(n, 1)
