"""`cadenza prepare`: MIDI files -> a token store, in worker processes, never stopped by a bad file."""

from __future__ import annotations

import hashlib
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from cadenza.midi import MIDI_SUFFIXES, MidiReadError
from cadenza.store import StoreWriter, TokenStore
from cadenza.tokenizers import Tokenizer, tokenizer_from_dict


@dataclass
class PrepareResult:
    store: TokenStore
    skipped: list[dict[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        t = self.store.totals
        lines = [
            f"store      {self.store.path}",
            f"pieces     {t['pieces']:,}   tokens {t['tokens']:,}   notes {t['notes']:,}   "
            f"hours {t['seconds'] / 3600:.2f}",
            "splits     " + "   ".join(f"{s} {v['pieces']:,} pieces / {v['tokens']:,} tokens"
                                       for s, v in t["splits"].items()),
            f"skipped    {t['skipped']}",
        ]
        for s in self.skipped[:20]:
            lines.append(f"  - {s['source']}: {s['reason']}")
        if len(self.skipped) > 20:
            lines.append(f"  ... and {len(self.skipped) - 20} more (see manifest.json)")
        return "\n".join(lines)


def collect_midi_files(inputs: Iterable[str | os.PathLike]) -> list[Path]:
    """Files given by name are taken as they are; folders are searched recursively for MIDI files."""
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            files.extend(f for f in sorted(p.rglob("*")) if f.is_file() and f.suffix.lower() in MIDI_SUFFIXES)
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    seen: set[Path] = set()
    unique = []
    for f in files:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(f)
    return unique


_WORKER_TOKENIZER: Tokenizer | None = None


def _init_worker(tok_config: dict) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tokenizer_from_dict(tok_config)


def _encode_file(path: str) -> dict[str, Any]:
    """Runs in a worker: read, hash, encode. Never raises; failures come back as a reason."""
    tok = _WORKER_TOKENIZER
    assert tok is not None
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        return {"source": path, "reason": f"cannot read file ({e.strerror or e})"}
    sha = hashlib.sha256(data).hexdigest()
    if not data:
        return {"source": path, "sha256": sha, "reason": "empty file (0 bytes)"}
    try:
        from cadenza.midi import load_score

        enc = tok.encode(load_score(data, name=path))
    except MidiReadError as e:
        return {"source": path, "sha256": sha, "reason": str(e).split(": ", 1)[-1]}
    except Exception as e:  # a tokenizer bug must not lose the other files
        return {"source": path, "sha256": sha, "reason": f"{type(e).__name__}: {e}"}
    if enc.notes == 0 or enc.ids.size == 0:
        return {"source": path, "sha256": sha, "reason": "no notes (empty or drums only)"}
    return {"source": path, "sha256": sha, "ids": enc.ids.astype(np.uint16), "notes": enc.notes,
            "stats": enc.stats}


def _run_isolated(paths: list[str], tok_config: dict) -> Iterable[dict[str, Any]]:
    """After a worker crashed (a parser segfault), retry files one per process to find the culprit."""
    for p in paths:
        try:
            with ProcessPoolExecutor(1, initializer=_init_worker, initargs=(tok_config,)) as ex:
                yield ex.submit(_encode_file, p).result()
        except BrokenProcessPool:
            yield {"source": p, "reason": "the MIDI parser crashed on this file"}


def _encode_all(paths: list[str], tok_config: dict, workers: int) -> Iterable[dict[str, Any]]:
    if workers <= 1:
        _init_worker(tok_config)
        yield from map(_encode_file, paths)
        return
    chunk = max(1, min(64, len(paths) // (workers * 16)))
    done = 0
    try:
        with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(tok_config,)) as ex:
            for r in ex.map(_encode_file, paths, chunksize=chunk):
                done += 1
                yield r
    except BrokenProcessPool:
        yield from _run_isolated(paths[done:], tok_config)


def prepare(inputs: Iterable[str | os.PathLike], out: str | os.PathLike, tokenizer: Tokenizer | None = None,
            valid_fraction: float = 0.1, test_fraction: float = 0.1, workers: int | None = None,
            progress: bool = True, pre_skipped: Iterable[dict[str, str]] = (),
            extra_manifest: dict[str, Any] | None = None) -> PrepareResult:
    """Tokenize MIDI files/folders into a token store at `out` (see `cadenza.store`).

    Bad files (corrupt, empty, not MIDI, drums only) are skipped and listed with their reason;
    duplicates (same bytes) are stored once. Returns the opened store and the skipped files.
    """
    from cadenza.tokenizers import PerformanceTokenizer

    if not (0 <= valid_fraction < 1 and 0 <= test_fraction < 1 and valid_fraction + test_fraction < 1):
        raise ValueError("valid and test fractions must be in [0, 1) and sum to less than 1")
    tokenizer = tokenizer or PerformanceTokenizer()
    files = [str(f) for f in collect_midi_files(inputs)]
    if not files:
        raise FileNotFoundError(f"no MIDI files ({', '.join(MIDI_SUFFIXES)}) found in {', '.join(map(str, inputs))}")
    workers = workers if workers is not None else min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                                      else (os.cpu_count() or 1), 8)
    workers = max(1, min(workers, len(files) // 8 or 1))
    skipped = list(pre_skipped)
    writer = StoreWriter(out, tokenizer)
    seen: dict[str, str] = {}
    from tqdm import tqdm

    bar = tqdm(total=len(files), unit="file", desc="prepare", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    try:
        for r in _encode_all(files, tokenizer.to_dict(), workers):
            bar.update(1)
            if "reason" in r:
                skipped.append({"source": r["source"], "reason": r["reason"]})
                continue
            if r["sha256"] in seen:
                skipped.append({"source": r["source"], "reason": f"duplicate of {seen[r['sha256']]}"})
                continue
            seen[r["sha256"]] = r["source"]
            ids = r["ids"]
            writer.add(ids, source=r["source"], sha256=r["sha256"], notes=r["notes"],
                       seconds=_seconds(tokenizer, ids), stats=r["stats"])
            bar.set_postfix(kept=len(writer.pieces), skipped=len(skipped), refresh=False)
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    if not writer.pieces:
        writer.abort()
        raise ValueError(f"none of the {len(files)} files could be used; first reasons: "
                         + "; ".join(f"{s['source']}: {s['reason']}" for s in skipped[:3]))
    writer.close(skipped, valid_fraction, test_fraction, extra=extra_manifest)
    return PrepareResult(TokenStore(out), skipped)


def _seconds(tokenizer: Tokenizer, ids: np.ndarray) -> float:
    """Duration of a performance-token piece (sum of time shifts); 0 for other tokenizers."""
    off = getattr(tokenizer, "shift_offset", None)
    if off is None:
        return 0.0
    ids = np.asarray(ids, np.int64)
    shifts = ids[(ids >= off) & (ids < tokenizer.velocity_offset)] - off + 1
    return float(shifts.sum()) / tokenizer.steps_per_second
