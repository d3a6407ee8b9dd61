"""`cadenza.prepare`: MIDI files or built-in corpora -> a token store, each piece with its style.

Where the files come from decides their style label: a corpus name (``corpus="bach,irish"``), one
label for everything (``style="mine"``), or the first-level subfolder of each file
(``styles_from_folders=True``). Bad files are skipped and named, never stopping the job.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cadenza.atomic import output_folder
from cadenza.data.corpora import materialize
from cadenza.data.ingest import DURATION_EDGES, collect_midi_files, default_workers, encode_files, note_seconds
from cadenza.data.midi import MIDI_SUFFIXES
from cadenza.data.store import SPLITS, StoreWriter, TokenStore
from cadenza.data.tokenizers import Tokenizer, check_style_names, get_tokenizer
from cadenza.settings import SettingError, setting, validate


@dataclass
class PrepareConfig:
    """The numeric settings of `prepare`, each with its valid range (checked by `validate`)."""

    valid_fraction: float = setting(0.1, ge=0, lt=1, doc="share of pieces held out for validation")
    test_fraction: float = setting(0.1, ge=0, lt=1, doc="share of pieces held out for testing")
    workers: int | None = setting(None, ge=1, doc="worker processes (default: CPU count, at most 8)")

    def validate(self) -> PrepareConfig:
        validate(self)
        if self.valid_fraction + self.test_fraction >= 1:
            raise SettingError("valid_fraction", f"plus test_fraction must be < 1, got "
                               f"{self.valid_fraction} + {self.test_fraction}")
        return self


@dataclass
class Inputs:
    """The files to read, each with its style label (None: unlabelled) and, for corpora, its origin."""

    files: list[str] = field(default_factory=list)
    styles: dict[str, str | None] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    skipped: list[dict] = field(default_factory=list)  # failed before reading (corpus conversion)
    corpora: list[str] = field(default_factory=list)
    split: str | None = None  # every piece in this split (else a split from each piece's hash)
    held_out: dict[str, str] | None = None  # origin -> its split; with it, every other piece is trained on


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
        ]
        for name, st in self.store.manifest.get("styles", {}).items():
            lines.append(f"style      {name:<12} {st['pieces']:>6,} pieces  {st['notes']:>9,} notes  "
                         f"{st['hours']:6.2f} hours  {st['skipped']:>4} skipped")
        if t.get("empty_splits"):
            empty = " and ".join(t["empty_splits"])
            lines.append(f"note       the {empty} split{'s are' if len(t['empty_splits']) > 1 else ' is'} empty: "
                         f"{t['pieces']} piece{'s' if t['pieces'] != 1 else ''} cannot fill every split"
                         + ("; training will run without validation" if "valid" in t["empty_splits"] else ""))
        lines.append(f"skipped    {t['skipped']}")
        for s in self.skipped[:20]:
            lines.append(f"  - {s['source']}: {s['reason']}")
        if len(self.skipped) > 20:
            lines.append(f"  ... and {len(self.skipped) - 20} more (see manifest.json)")
        return "\n".join(lines)


def prepare(inputs: Iterable[str | os.PathLike] = (), out: str | os.PathLike | None = None, *,
            corpus: str | Iterable[str] | None = None, style: str | None = None, styles_from_folders: bool = False,
            tokenizer: Tokenizer | str | None = None, valid_fraction: float = 0.1, test_fraction: float = 0.1,
            workers: int | None = None, progress: bool = True, origins: Iterable[str] | None = None,
            split: str | None = None, held_out: Mapping[str, str] | None = None) -> PrepareResult:
    """Tokenize MIDI files/folders, or built-in corpora (`cadenza.data.corpora`), into a token store.

    Styles: each corpus name labels its pieces; `style` labels every file given; with
    `styles_from_folders` each file takes the name of the first-level subfolder it is in. Bad
    files (corrupt, empty, not MIDI, drums only) are skipped and listed with their reason;
    duplicates (same bytes) are stored once. Returns the opened store and the skipped files.

    To rebuild a few pieces of corpora exactly (a shipped model's validation pieces, say): `origins`
    (``corpus:score`` as a store records them) takes only those scores, and `split` puts every piece
    in that split. `held_out` (origin -> "valid" or "test") holds out exactly those pieces and trains
    on every other one: a new model is then measured on the pieces an older one was.
    """
    if split is not None and split not in SPLITS:
        raise SettingError("split", f"must be one of {', '.join(SPLITS)}, got {split!r}")
    cfg = PrepareConfig(valid_fraction, test_fraction, workers).validate()
    if out is None:
        raise ValueError("prepare needs an output folder (out=...)")
    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    names = [c.strip() for c in corpus.split(",")] if isinstance(corpus, str) else list(corpus or [])
    if bool(names) == bool(paths):
        raise ValueError("give MIDI files/folders or built-in corpus names (not both)")
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else get_tokenizer(tokenizer or "performance")
    origins = set(origins) if origins is not None else None
    found = _from_corpora(names, cfg, progress, origins) if names else _from_paths(paths, style, styles_from_folders)
    found.split = split
    if held_out is not None:
        if bad := {v for v in held_out.values()} - {"valid", "test"}:
            raise SettingError("held_out", f"splits must be valid or test, got {sorted(bad)}")
        found.held_out = dict(held_out)
    if not found.files:
        raise FileNotFoundError(f"no MIDI files ({', '.join(MIDI_SUFFIXES)}) found in "
                                f"{', '.join(map(str, paths or names))}")
    with output_folder(out, "prepare"):
        return _write_store(found, Path(out), tok, cfg, progress)


def _from_corpora(names: list[str], cfg: PrepareConfig, progress: bool, origins: set[str] | None) -> Inputs:
    found = Inputs(corpora=names)
    for spec in names:  # "name", or "name:N" for N scores spread over the corpus
        name, _, limit = spec.partition(":")
        if limit and not limit.isdigit():
            raise ValueError(f"--corpus {spec}: write NAME or NAME:COUNT (e.g. palestrina:400)")
        only = None if origins is None else {o.partition(":")[2] for o in origins if o.partition(":")[0] == name}
        cf = materialize(name, workers=cfg.workers, progress=progress, limit=int(limit) if limit else None,
                         only=only)
        for p in cf.midi:
            found.files.append(str(p))
            found.styles[str(p)] = name
            found.origins[str(p)] = f"{name}:{(cf.sources or {}).get(p.name, p.name)}"
        found.skipped += [{**f, "style": name} for f in cf.failures]
    return found


def folder_style(name: str) -> str:
    """A folder name as a style name: lowercase, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-")[:40] or "unnamed"


def _from_paths(paths: list, style: str | None, from_folders: bool) -> Inputs:
    if style is not None and from_folders:
        raise ValueError("give one --style for everything or --styles-from-folders, not both")
    if style is not None:
        check_style_names([style])
    found = Inputs(files=[str(f) for f in collect_midi_files(paths)])
    for f in found.files:
        found.styles[f] = style
    if from_folders:
        for root in (Path(p) for p in paths):
            if not root.is_dir():
                raise ValueError(f"{root}: --styles-from-folders needs folders whose subfolders are the styles")
            for f in collect_midi_files([root]):
                rel = f.relative_to(root)
                found.styles[str(f)] = folder_style(rel.parts[0]) if len(rel.parts) > 1 else None
    return found


def _write_store(found: Inputs, out: Path, tokenizer: Tokenizer, cfg: PrepareConfig, progress: bool) -> PrepareResult:
    from tqdm import tqdm

    skipped, seen = list(found.skipped), {}
    writer = StoreWriter(out, tokenizer)
    lengths = np.zeros(len(DURATION_EDGES) - 1, np.int64)
    bar = tqdm(total=len(found.files), unit="file", desc="prepare", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    try:
        for r in encode_files(found.files, tokenizer.to_dict(), default_workers(len(found.files), cfg.workers)):
            bar.update(1)
            label = {"style": found.styles[r["source"]]} if found.styles.get(r["source"]) else {}
            if "reason" in r or r["sha256"] in seen:
                reason = r.get("reason") or f"duplicate of {seen[r['sha256']]}"
                skipped.append({"source": r["source"], "reason": reason, **label})
                continue
            seen[r["sha256"]] = r["source"]
            if r["durations"] is not None:
                lengths += r["durations"]
            meta = {"origin": found.origins[r["source"]]} if r["source"] in found.origins else {}
            if found.split:
                meta["split"] = found.split
            elif found.held_out is not None:
                meta["split"] = found.held_out.get(meta.get("origin", ""), "train")
            writer.add(r["ids"], source=r["source"], sha256=r["sha256"], notes=r["notes"], seconds=r["seconds"],
                       stats=r["stats"], **label, **meta)
            bar.set_postfix(kept=len(writer.pieces), skipped=len(skipped), refresh=False)
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    if not writer.pieces:
        writer.abort()
        raise ValueError(f"none of the {len(found.files)} files could be used; first reasons: "
                         + "; ".join(f"{s['source']}: {s['reason']}" for s in skipped[:3]))
    extra = {"note_seconds": note_seconds(lengths), "styles": style_totals(writer.pieces, skipped)}
    if found.corpora:
        extra["corpus"] = ",".join(found.corpora)
    writer.close(skipped, cfg.valid_fraction, cfg.test_fraction, extra=extra)
    return PrepareResult(TokenStore(out), skipped)


def style_totals(pieces: list[dict], skipped: list[dict]) -> dict[str, dict]:
    """Per style, in order of first appearance: pieces, notes, hours, and what was skipped."""
    out: dict[str, dict] = {}
    for p in pieces:
        if p.get("style"):
            st = out.setdefault(p["style"], {"pieces": 0, "notes": 0, "hours": 0.0, "skipped": 0})
            st["pieces"] += 1
            st["notes"] += int(p.get("notes", 0))
            st["hours"] += float(p.get("seconds", 0.0)) / 3600
    for s in skipped:
        if s.get("style"):
            out.setdefault(s["style"], {"pieces": 0, "notes": 0, "hours": 0.0, "skipped": 0})["skipped"] += 1
    return out
