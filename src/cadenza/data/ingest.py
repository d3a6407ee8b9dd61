"""Reading MIDI files into token ids in worker processes, never stopped by a bad file.

Each file comes back as its ids and statistics, or as a one-line reason it was skipped. A parser
crash (a segfault in a C extension) kills only its worker: the files of that batch are retried one
per process to find the culprit, and the others go on.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np

from cadenza.data.midi import MIDI_SUFFIXES, MidiReadError, load_score
from cadenza.data.tokenizers import Tokenizer, TokenizerError, tokenizer_from_dict


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
        enc = tok.encode(load_score(data, name=path))
    except MidiReadError as e:
        return {"source": path, "sha256": sha, "reason": str(e).split(": ", 1)[-1]}
    except TokenizerError as e:  # e.g. a piece that would last for days
        return {"source": path, "sha256": sha, "reason": str(e)}
    except Exception as e:  # a tokenizer bug must not lose the other files
        return {"source": path, "sha256": sha, "reason": f"{type(e).__name__}: {e}"}
    if enc.notes == 0 or enc.ids.size == 0:
        drums, silent = enc.stats.get("drum_notes", 0), enc.stats.get("zero_length", 0)
        reason = (f"only drums ({drums} drum notes)" if drums else
                  f"no playable notes ({silent} notes of zero length)" if silent else "no notes in any track")
        return {"source": path, "sha256": sha, "reason": reason}
    seconds = tok.seconds(enc.ids)
    return {"source": path, "sha256": sha, "ids": enc.ids.astype(np.uint16), "notes": enc.notes,
            "seconds": seconds if seconds is not None else (enc.seconds or 0.0), "stats": enc.stats,
            "durations": None if enc.durations is None else duration_histogram(enc.durations)}


# Note lengths are summarised in a histogram with log-spaced bins (1 ms to a day, 5 % apart), so
# a corpus of millions of notes gives its percentiles without keeping every length.
DURATION_EDGES = np.geomspace(1e-3, 86400.0, 401)


def duration_histogram(durations: np.ndarray) -> np.ndarray:
    return np.histogram(np.clip(durations, DURATION_EDGES[0], DURATION_EDGES[-1]), DURATION_EDGES)[0]


def note_seconds(hist: np.ndarray) -> dict[str, float] | None:
    """Percentiles of note length from a `duration_histogram` (each the upper edge of its bin, so
    never below the true value), as the store's manifest records them."""
    total = int(hist.sum())
    if not total:
        return None
    cum = np.cumsum(hist)
    upper = {f"p{q:g}".replace(".", ""): float(DURATION_EDGES[1 + int(np.searchsorted(cum, q / 100 * total))])
             for q in (50, 99, 99.9)}
    return {**upper, "max": float(DURATION_EDGES[1 + int(np.flatnonzero(hist)[-1])]), "notes": total}


def _run_isolated(paths: list[str], tok_config: dict) -> Iterable[dict[str, Any]]:
    """After a worker crashed (a parser segfault), retry files one per process to find the culprit."""
    for p in paths:
        try:
            with ProcessPoolExecutor(1, initializer=_init_worker, initargs=(tok_config,)) as ex:
                yield ex.submit(_encode_file, p).result()
        except BrokenProcessPool:
            yield {"source": p, "reason": "the MIDI parser crashed on this file"}


def encode_files(paths: list[str], tok_config: dict, workers: int) -> Iterable[dict[str, Any]]:
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


def default_workers(n_files: int, asked: int | None) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(asked or min(cores, 8), n_files // 8 or 1))
