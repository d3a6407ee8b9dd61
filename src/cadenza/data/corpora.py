"""Built-in corpora from the score collection bundled with music21 (no network needed).

Each corpus is converted once to MIDI in worker processes and cached under
``$XDG_CACHE_HOME/cadenza/corpora/<name>/`` (override with ``$CADENZA_CACHE``). The unit of work is
one score: a file, or one tune of an ABC book (a book of 700 songs is 700 units, so the work spreads
over the workers and a few tunes can be converted without the whole book). A score music21 cannot
convert is skipped and named; a finished unit leaves a small marker, so an interrupted conversion
resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from cadenza.atomic import atomic_path, exclusive, remove_leftovers, write_json
from cadenza.env.record import cache_dir


@dataclass(frozen=True)
class Corpus:
    name: str
    folders: tuple[str, ...]  # under music21/corpus/
    suffixes: tuple[str, ...]
    description: str
    include: tuple[str, ...] = ()  # only files whose names start so (all when empty)
    exclude: tuple[str, ...] = ()  # files whose names start so are left out


_ESSEN_GERMAN = ("erk", "boehme")
CORPORA: dict[str, Corpus] = {c.name: c for c in (
    Corpus("bach", ("bach",), (".mxl", ".krn", ".xml"), "J.S. Bach four-part chorales (~410 pieces)"),
    Corpus("palestrina", ("palestrina",), (".krn",), "Palestrina mass movements, Humdrum (~1,300)"),
    Corpus("irish", ("oneills1850",), (".abc",), "O'Neill's Music of Ireland (1850): jigs, reels, hornpipes, "
           "airs (~2,000 tunes)"),
    Corpus("german", ("essenFolksong",), (".abc",), "German folk songs of the Essen collection, Erk and Boehme "
           "(~2,500 melodies)", include=_ESSEN_GERMAN),
    Corpus("chinese", ("essenFolksong",), (".abc",), "Chinese (Han) folk songs of the Essen collection "
           "(~1,200 melodies)", include=("han",)),
    Corpus("american", ("ryansMammoth",), (".abc",), "Ryan's Mammoth Collection (1883): American fiddle tunes "
           "(~1,050)"),
    Corpus("madrigal", ("monteverdi", "trecento"), (".mxl", ".xml"), "Monteverdi madrigals and Italian "
           "trecento songs (~150)"),
    Corpus("quartet", ("haydn", "mozart"), (".mxl",), "Haydn and Mozart string quartet movements (~25)"),
    Corpus("essen", ("essenFolksong",), (".abc",), "the whole Essen folk song collection (~8,400 melodies)",
           exclude=("test",)),
)}


@dataclass
class CorpusFiles:
    name: str
    folder: Path
    midi: list[Path]
    failures: list[dict[str, str]]
    sources: dict[str, str] | None = None  # MIDI file name -> its source (file, or file#tune)


def _music21_corpus_root() -> Path:
    import music21

    return Path(music21.__file__).parent / "corpus"


def source_files(corpus: Corpus) -> list[Path]:
    out = []
    for folder in corpus.folders:
        root = _music21_corpus_root() / folder
        if not root.is_dir():
            raise FileNotFoundError(f"music21's corpus has no folder {folder!r} (music21 too old?)")
        out += sorted(p for p in root.rglob("*") if p.suffix.lower() in corpus.suffixes
                      and (not corpus.include or p.name.startswith(corpus.include))
                      and not (corpus.exclude and p.name.startswith(corpus.exclude)))
    return out


_TUNE_START = re.compile(r"^X:", re.MULTILINE)


def split_abc(text: str) -> tuple[str, list[str]]:
    """An ABC book as (the header before its first tune, [each tune's text])."""
    starts = [m.start() for m in _TUNE_START.finditer(text)]
    if not starts:
        return text, []
    return text[:starts[0]], [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def units(corpus: Corpus) -> list[str]:
    """The scores of a corpus: a path per file, ``path#k`` per tune of an ABC book."""
    out = []
    for src in source_files(corpus):
        tunes = split_abc(src.read_text(errors="replace"))[1] if src.suffix.lower() == ".abc" else []
        out += [f"{src}#{k}" for k in range(len(tunes))] if tunes else [str(src)]
    return out


def _key(src: Path) -> str:
    """A unique, readable name per source file (some chorales exist as both .mxl and .krn)."""
    rel = src.relative_to(_music21_corpus_root()) if src.is_relative_to(_music21_corpus_root()) else src
    return "__".join(rel.parts[1:] or rel.parts).replace(" ", "_")


def _unit_key(unit: str) -> tuple[Path, int | None, str]:
    """(source file, tune number or None, the stem of its cache files)."""
    path, _, tune = unit.partition("#")
    src = Path(path)
    return src, int(tune) if tune else None, _key(src) + (f"-{int(tune):04d}" if tune else "")


def _parse(src: Path, tune: int | None):
    from music21 import converter

    if tune is None:
        return converter.parse(src)
    header, tunes = split_abc(src.read_text(errors="replace"))
    return converter.parse(header + tunes[tune], format="abc")


# A unit's marker names the conversion that made its files: a cache converted before bar lines were
# written (version 1, `.NAME.done.json`) is converted again.
CONVERSION = 2


def _marker(out: Path, stem: str) -> Path:
    return out / f".{stem}.done-v{CONVERSION}.json"


UNIT_SECONDS = 90  # a few scores (long ABC tunes with many repeats) keep music21 busy for an hour


def _in_time(seconds: int, fn, *args):
    """fn(*args), or TimeoutError after `seconds` (where SIGALRM exists and this is the main thread)."""
    import signal

    def stop(signum, frame):
        raise TimeoutError(f"music21 took more than {seconds} s")

    try:
        old = signal.signal(signal.SIGALRM, stop)
    except (AttributeError, ValueError):  # no SIGALRM (Windows), or not the main thread
        return fn(*args)
    signal.alarm(seconds)
    try:
        return fn(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _convert_source(args: tuple[str, str]) -> dict:
    """Worker: convert one unit (a file, or one tune of an ABC book) to MIDI; a file that is an
    opus of several scores gives several MIDI files."""
    unit, out_dir = args
    src, tune, stem = _unit_key(unit)
    out_p = Path(out_dir)
    marker = _marker(out_p, stem)
    label = _label(unit)
    if marker.exists():  # the label is the unit's, never the marker's: older markers did not keep it
        return {**json.loads(marker.read_text()), "source": label}
    warnings.filterwarnings("ignore")
    from music21 import environment

    environment.UserSettings  # noqa: B018  (import side effects only)
    try:
        written, failures = _in_time(UNIT_SECONDS, _convert_unit, src, tune, out_p, stem, label)
    except TimeoutError as e:  # left half-written files behind: none (every write is atomic)
        written, failures = [], [{"source": label, "reason": f"{e}; skipped"}]
    result = {"written": written, "failures": failures, "source": label}
    write_json(marker, result)
    return result


def _convert_unit(src: Path, tune: int | None, out_p: Path, stem: str, label: str) -> tuple[list, list]:
    from music21 import stream

    written, failures = [], []
    try:
        parsed = _parse(src, tune)
    except TimeoutError:
        raise
    except Exception as e:
        failures.append({"source": label, "reason": f"music21 cannot parse it ({type(e).__name__}: {e})"[:300]})
        parsed = None
    scores = [] if parsed is None else list(parsed.scores) if isinstance(parsed, stream.Opus) else [parsed]
    for k, score in enumerate(scores):
        name = f"{stem}.mid" if len(scores) == 1 else f"{stem}-{k:04d}.mid"
        try:
            with atomic_path(out_p / name) as tmp:
                mid = tmp.with_suffix(".mid")
                _write_midi(score, mid)
                os.replace(mid, tmp)
            written.append(name)
        except TimeoutError:
            raise
        except Exception as e:
            where = label if len(scores) == 1 else f"{label}/{k}"
            failures.append({"source": where, "reason": f"music21 cannot write MIDI ({type(e).__name__}: {e})"[:300]})
    return written, failures


def _write_midi(score, path: Path) -> None:
    """music21's MIDI writer; for a score it refuses (many Essen songs with meter changes: "the
    object TimeSignature ... is already found in this Stream"), its notes, rests and tempo marks
    alone: the timing MIDI needs, without the notation that trips the writer. Either way the file's
    time signatures are then the score's bars (`bar_signatures`): music21 writes a pickup as the
    first bar of a full signature, which puts every later bar line in the wrong place."""
    import symusic
    from music21 import exceptions21, note, tempo

    try:
        score.write("midi", fp=str(path))
    except exceptions21.StreamException:
        flat = score.flatten().getElementsByClass([note.GeneralNote, tempo.MetronomeMark]).stream()
        flat.write("midi", fp=str(path))
    signatures = bar_signatures(score)
    if signatures:
        midi = symusic.Score(str(path))
        tpq = midi.ticks_per_quarter
        midi.time_signatures = symusic.core.TimeSignatureTickList(
            [symusic.TimeSignature(round(q * tpq), n, d, ttype="tick") for q, n, d in signatures])
        midi.dump_midi(str(path))


def bar_signatures(score) -> list[tuple[Fraction, int, int]]:
    """(quarter, numerator, denominator) where the bars of a music21 score change length: its
    written signatures, a pickup as a signature of its own length (1/4 before a 4/4 tune), and two
    short measures that make one bar between them (a bar split at a repeat sign) as that bar."""
    from music21 import stream

    part = score.parts[0] if hasattr(score, "parts") and score.parts else score
    bars: list[list] = []  # [offset, length, full length, written (num, den)]
    sig = None
    for m in part.getElementsByClass(stream.Measure):
        sig = m.timeSignature or sig
        if sig is None:
            continue
        length = Fraction(m.duration.quarterLength).limit_denominator(96)
        full = Fraction(4 * sig.numerator, sig.denominator)
        offset = Fraction(m.offset).limit_denominator(96)
        last = bars[-1] if bars else None
        if (last and length < full and last[1] < last[2] == full and last[0] + last[1] == offset
                and last[1] + length <= full and len(bars) > 1):
            last[1] += length  # the second half of a bar split in two
            continue
        if length > 0:
            bars.append([offset, length, full, (sig.numerator, sig.denominator)])
    out: list[tuple[Fraction, int, int]] = []
    for k, (offset, length, full, (num, den)) in enumerate(bars):
        if length != full and k + 1 < len(bars):  # a short bar before others (a short last bar needs none)
            num, den = _signature_of(length, den)
        if not out or out[-1][1:] != (num, den):
            out.append((offset, num, den))
    return out


def _signature_of(quarters: Fraction, den: int) -> tuple[int, int]:
    """A time signature `quarters` long, in `den`-th notes where they divide it, else finer ones."""
    while (quarters * den / 4).denominator != 1 and den < 64:
        den *= 2
    return int(quarters * den / 4), den


def materialize(name: str, workers: int | None = None, progress: bool = True, limit: int | None = None,
                only: set[str] | None = None) -> CorpusFiles:
    """Convert corpus `name` to MIDI (once; cached) and return the MIDI paths and the failures.

    `limit` takes only N scores, spread evenly over the corpus (a quick try, a smaller style, a
    test); `only` takes the scores whose
    source label (``file`` or ``file#tune``, as `CorpusFiles.sources` gives them) is in it. A later
    call converts the rest, reusing what is cached.
    """
    if name not in CORPORA:
        raise KeyError(f"unknown corpus {name!r}; available: {', '.join(CORPORA)}")
    out = cache_dir() / "corpora" / name
    todo = spread(units(CORPORA[name]), limit)
    if only is not None:
        todo = [u for u in todo if _label(u) in only]
    with exclusive(out, f"prepare --corpus {name}"):
        # an interrupted conversion leaves hidden temporary files (music21 writes `.NAME.XXXX.mid`)
        remove_leftovers(out)
        for p in out.glob(".*.mid"):
            p.unlink()
        _convert_all(name, todo, out, workers or min(os.cpu_count() or 1, 8), progress)
    results = [_convert_source((u, str(out))) for u in todo]  # every unit now has its marker
    midi = [out / w for r in results for w in r["written"]]
    failures = [f for r in results for f in r["failures"]]
    sources = {w: r.get("source", "") for r in results for w in r["written"]}
    if limit is None and only is None:
        write_json(out / "index.json", {"corpus": name, "midi": [p.name for p in midi], "failures": failures})
    return CorpusFiles(name, out, midi, failures, sources)


def spread(items: list, limit: int | None) -> list:
    """`limit` items spread evenly over `items`, in order (all of them without a limit)."""
    if limit is None or limit >= len(items):
        return list(items)
    picks = sorted({round(i) for i in np.linspace(0, len(items) - 1, max(limit, 1))})
    return [items[i] for i in picks]


def _label(unit: str) -> str:
    src, tune, _ = _unit_key(unit)
    return src.name if tune is None else f"{src.name}#{tune}"


def _convert_all(name: str, todo: list[str], out: Path, workers: int, progress: bool) -> None:
    from tqdm import tqdm

    pending = [u for u in todo if not _marker(out, _unit_key(u)[2]).exists()]
    desc = f"converting {name} (first use only)" if pending else f"{name} (cached)"
    with tqdm(total=len(pending), unit="score", desc=desc, disable=not progress or not pending,
              file=sys.stderr, dynamic_ncols=True) as bar:
        if workers > 1 and len(pending) > 1:
            # Large files first, so one worker is not left with the longest job at the end.
            pending.sort(key=lambda u: -Path(u.partition("#")[0]).stat().st_size if "#" not in u else 0)
            with ProcessPoolExecutor(workers) as ex:
                chunk = max(1, min(16, len(pending) // (workers * 8)))
                for _ in ex.map(_convert_source, [(u, str(out)) for u in pending], chunksize=chunk):
                    bar.update(1)
        else:
            for u in pending:
                _convert_source((u, str(out)))
                bar.update(1)


def list_corpora() -> list[Corpus]:
    """The built-in corpora (`cadenza corpora`): name, music21 folders and a description each."""
    return list(CORPORA.values())
