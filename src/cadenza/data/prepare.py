"""`cadenza.prepare`: MIDI files or a corpus -> a token store, in worker processes, never stopped by a bad file."""

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

from cadenza.atomic import output_folder
from cadenza.data.midi import MIDI_SUFFIXES, MidiReadError
from cadenza.settings import SettingError, setting, validate
from cadenza.data.store import StoreWriter, TokenStore
from cadenza.data.tokenizers import Tokenizer, TokenizerError, tokenizer_from_dict


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
        if t.get("empty_splits"):
            empty = " and ".join(t["empty_splits"])
            lines.insert(3, f"note       the {empty} split{'s are' if len(t['empty_splits']) > 1 else ' is'} empty: "
                            f"{t['pieces']} piece{'s' if t['pieces'] != 1 else ''} cannot fill every split"
                            + ("; training will run without validation" if "valid" in t["empty_splits"] else ""))
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
        from cadenza.data.midi import load_score

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


@dataclass
class PrepareConfig:
    """The numeric settings of `prepare`, each with its valid range (checked by `validate`)."""

    valid_fraction: float = setting(0.1, ge=0, lt=1, doc="share of pieces held out for validation")
    test_fraction: float = setting(0.1, ge=0, lt=1, doc="share of pieces held out for testing")
    workers: int | None = setting(None, ge=1, doc="worker processes (default: CPU count, at most 8)")

    def validate(self) -> "PrepareConfig":
        validate(self)
        if self.valid_fraction + self.test_fraction >= 1:
            raise SettingError("valid_fraction", f"plus test_fraction must be < 1, got "
                               f"{self.valid_fraction} + {self.test_fraction}")
        return self


def prepare(inputs: Iterable[str | os.PathLike] = (), out: str | os.PathLike | None = None, *,
            corpus: str | None = None, tokenizer: Tokenizer | str | None = None, valid_fraction: float = 0.1,
            test_fraction: float = 0.1, workers: int | None = None, progress: bool = True) -> PrepareResult:
    """Tokenize MIDI files/folders, or a built-in corpus (`cadenza.data.corpora`), into a token store.

    Bad files (corrupt, empty, not MIDI, drums only) are skipped and listed with their reason;
    duplicates (same bytes) are stored once. Returns the opened store and the skipped files.
    """
    from cadenza.data.tokenizers import get_tokenizer

    cfg = PrepareConfig(valid_fraction, test_fraction, workers).validate()
    if out is None:
        raise ValueError("prepare needs an output folder (out=...)")
    inputs = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    if bool(corpus) == bool(inputs):
        raise ValueError("give MIDI files/folders or a built-in corpus name (not both)")
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else get_tokenizer(tokenizer or "performance")
    pre_skipped, extra = [], None
    if corpus:
        from cadenza.data.corpora import materialize

        cf = materialize(corpus, workers=cfg.workers, progress=progress)
        inputs, pre_skipped, extra = cf.midi, cf.failures, {"corpus": corpus}
    files = [str(f) for f in collect_midi_files(inputs)]
    if not files:
        raise FileNotFoundError(f"no MIDI files ({', '.join(MIDI_SUFFIXES)}) found in {', '.join(map(str, inputs))}")
    return _tokenize_files(files, Path(out), tok, cfg, progress, pre_skipped, extra)


def _tokenize_files(files: list[str], out: Path, tokenizer: Tokenizer, cfg: PrepareConfig, progress: bool,
                    pre_skipped: list[dict], extra_manifest: dict | None) -> PrepareResult:
    workers = cfg.workers or min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                 else (os.cpu_count() or 1), 8)
    workers = max(1, min(workers, len(files) // 8 or 1))
    with output_folder(out, "prepare"):
        return _write_store(files, out, tokenizer, cfg, workers, progress, pre_skipped, extra_manifest)


def _write_store(files: list[str], out: Path, tokenizer: Tokenizer, cfg: PrepareConfig, workers: int,
                 progress: bool, pre_skipped: list[dict], extra_manifest: dict | None) -> PrepareResult:
    skipped = list(pre_skipped)
    writer = StoreWriter(out, tokenizer)
    seen: dict[str, str] = {}
    lengths = np.zeros(len(DURATION_EDGES) - 1, np.int64)
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
            if r["durations"] is not None:
                lengths += r["durations"]
            writer.add(r["ids"], source=r["source"], sha256=r["sha256"], notes=r["notes"],
                       seconds=r["seconds"], stats=r["stats"])
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
    extra = {**(extra_manifest or {}), "note_seconds": note_seconds(lengths)}
    writer.close(skipped, cfg.valid_fraction, cfg.test_fraction, extra=extra)
    return PrepareResult(TokenStore(out), skipped)
