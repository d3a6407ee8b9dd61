"""Built-in corpora from the score collection bundled with music21 (no network needed).

Each corpus is converted once to MIDI in worker processes and cached under
``$XDG_CACHE_HOME/cadenza/corpora/<name>/`` (override with ``$CADENZA_CACHE``). A source file that
music21 cannot convert is skipped and named; a finished source leaves a small marker, so an
interrupted conversion resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from cadenza.atomic import atomic_path, exclusive, remove_leftovers, write_json
from cadenza.env.record import cache_dir


@dataclass(frozen=True)
class Corpus:
    name: str
    folder: str  # under music21/corpus/
    suffixes: tuple[str, ...]
    description: str
    exclude_prefixes: tuple[str, ...] = ()


CORPORA: dict[str, Corpus] = {
    c.name: c
    for c in (
        Corpus("bach", "bach", (".mxl", ".krn", ".xml"), "J.S. Bach four-part chorales (~410 pieces)"),
        Corpus("essen", "essenFolksong", (".abc",), "Essen folk song collection (~8,400 melodies)",
               exclude_prefixes=("test",)),
        Corpus("palestrina", "palestrina", (".krn",), "Palestrina masses, Humdrum (~1,300 movements)"),
        Corpus("oneills", "oneills1850", (".abc",), "O'Neill's 1850 Irish tunes (~1,800 melodies)"),
    )
}


@dataclass
class CorpusFiles:
    name: str
    folder: Path
    midi: list[Path]
    failures: list[dict[str, str]]


def _music21_corpus_root() -> Path:
    import music21

    return Path(music21.__file__).parent / "corpus"


def source_files(corpus: Corpus) -> list[Path]:
    root = _music21_corpus_root() / corpus.folder
    if not root.is_dir():
        raise FileNotFoundError(f"music21's corpus has no folder {corpus.folder!r} (music21 too old?)")
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in corpus.suffixes
                  and not p.name.startswith(corpus.exclude_prefixes))


def _key(src: Path) -> str:
    """A unique, readable name per source file (some chorales exist as both .mxl and .krn)."""
    rel = src.relative_to(_music21_corpus_root()) if src.is_relative_to(_music21_corpus_root()) else src
    return "__".join(rel.parts[1:] or rel.parts).replace(" ", "_")


def _convert_source(args: tuple[str, str]) -> dict:
    """Worker: convert one music21 source file (one score, or an opus of many) to MIDI files."""
    src, out_dir = args
    src_p, out_p = Path(src), Path(out_dir)
    stem = _key(src_p)
    marker = out_p / f".{stem}.done.json"
    if marker.exists():
        return json.loads(marker.read_text())
    warnings.filterwarnings("ignore")
    from music21 import converter, environment, stream

    environment.UserSettings  # noqa: B018  (import side effects only)
    written, failures = [], []
    try:
        parsed = converter.parse(src_p)
    except Exception as e:
        failures.append({"source": src_p.name, "reason": f"music21 cannot parse it ({type(e).__name__}: {e})"[:300]})
        result = {"written": written, "failures": failures}
        write_json(marker, result)
        return result
    scores = list(parsed.scores) if isinstance(parsed, stream.Opus) else [parsed]
    for k, score in enumerate(scores):
        name = f"{stem}.mid" if len(scores) == 1 else f"{stem}-{k:04d}.mid"
        label = src_p.name if len(scores) == 1 else f"{src_p.name}#{k}"
        try:
            with atomic_path(out_p / name) as tmp:
                mid = tmp.with_suffix(".mid")
                score.write("midi", fp=str(mid))
                os.replace(mid, tmp)
            written.append(name)
        except Exception as e:
            failures.append({"source": label, "reason": f"music21 cannot write MIDI ({type(e).__name__}: {e})"[:300]})
    result = {"written": written, "failures": failures}
    write_json(marker, result)
    return result


def materialize(name: str, workers: int | None = None, progress: bool = True,
                limit: int | None = None) -> CorpusFiles:
    """Convert corpus `name` to MIDI (once; cached) and return the MIDI paths and the failures.

    `limit` takes only the first N source files (a quick try, or a test); a later call without it
    converts the rest, reusing what is cached.
    """
    if name not in CORPORA:
        raise KeyError(f"unknown corpus {name!r}; available: {', '.join(CORPORA)}")
    corpus = CORPORA[name]
    out = cache_dir() / "corpora" / name
    todo = [str(s) for s in source_files(corpus)[:limit]]
    with exclusive(out, f"prepare --corpus {name}"):
        # an interrupted conversion leaves hidden temporary files (music21 writes `.NAME.XXXX.mid`)
        remove_leftovers(out)
        for p in out.glob(".*.mid"):
            p.unlink()
        _convert_all(name, todo, out, workers or min(os.cpu_count() or 1, 8), progress)
    results = [_convert_source((s, str(out))) for s in todo]  # every source now has its marker
    midi = [out / w for r in results for w in r["written"]]
    failures = [f for r in results for f in r["failures"]]
    if limit is None:
        write_json(out / "index.json", {"corpus": name, "midi": [p.name for p in midi], "failures": failures})
    return CorpusFiles(name, out, midi, failures)


def _convert_all(name: str, todo: list[str], out: Path, workers: int, progress: bool) -> None:
    from tqdm import tqdm

    pending = [s for s in todo if not (out / f".{_key(Path(s))}.done.json").exists()]
    desc = f"converting {name} (first use only)" if pending else f"{name} (cached)"
    with tqdm(total=len(pending), unit="file", desc=desc, disable=not progress or not pending,
              file=sys.stderr, dynamic_ncols=True) as bar:
        if workers > 1 and len(pending) > 1:
            with ProcessPoolExecutor(workers) as ex:
                # Large opus files first, so one worker is not left with the longest job at the end.
                pending.sort(key=lambda s: -Path(s).stat().st_size)
                futures = [ex.submit(_convert_source, (s, str(out))) for s in pending]
                for f in as_completed(futures):
                    f.result()
                    bar.update(1)
        else:
            for s in pending:
                _convert_source((s, str(out)))
                bar.update(1)


def list_corpora() -> list[Corpus]:
    """The built-in corpora (`cadenza corpora`): name, music21 folder and a description each."""
    return list(CORPORA.values())
