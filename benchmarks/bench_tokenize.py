"""Tokenization speed: cadenza's performance and note tokenizers vs MidiTok MIDILike on the same files.

    python benchmarks/bench_tokenize.py                 # the Bach chorales (built-in corpus)
    python benchmarks/bench_tokenize.py ../shared/data/midi/one_track --repeats 5

Each reads the MIDI file from disk and produces ids, single process, same files, same run; the
table shows medians over the repeats and the ratio. Notes are counted once with symusic.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import symusic


def _time(fns: dict, files, repeats: int) -> dict[str, list[float]]:
    """Interleave the contestants repeat by repeat, so a slow spell of the machine hits both."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            for f in files:
                fn(f)
            times[name].append(time.perf_counter() - t)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", help="MIDI files/folders (default: the built-in Bach corpus)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--label", help="what the files are, for the result table (default: the folders' names)")
    ap.add_argument("--out", help="write the result JSON here (benchmarks/results/tokenize/...)")
    a = ap.parse_args(argv)

    from cadenza.data.ingest import collect_midi_files
    from cadenza.data.tokenizers import NoteTokenizer, PerformanceTokenizer

    if a.inputs:
        files = collect_midi_files(a.inputs)
        # The folders' names, not their paths: the label goes into docs read on other machines.
        label = a.label or ", ".join(Path(p).name for p in a.inputs)
    else:
        from cadenza.data.corpora import materialize

        files = materialize("bach").midi
        label = "Bach chorales (music21 corpus)"
    good = []
    for f in files:
        try:
            symusic.Score(str(f))
            good.append(str(f))
        except Exception:
            pass
    notes = sum(symusic.Score(f).note_num() for f in good)

    cad = PerformanceTokenizer()
    fns = {"cadenza performance": cad.encode, "cadenza notes": NoteTokenizer().encode}
    try:
        import miditok

        mt = miditok.MIDILike()
        fns["MidiTok MIDILike"] = mt.encode
    except ImportError:
        print("MidiTok not installed: pip install 'cadenza[miditok]' to compare", file=sys.stderr)
    rows = list(_time(fns, good, a.repeats).items())

    print(f"\n{len(good)} files, {notes:,} notes: {label}; median of {a.repeats}\n")
    print(f"| {'tokenizer':<22} | {'files/s':>10} | {'notes/s':>12} | {'vs MidiTok':>10} |")
    print(f"|{'-' * 24}|{'-' * 12}:|{'-' * 14}:|{'-' * 12}:|")
    base = statistics.median(rows[-1][1])
    table = []
    for name, ts in rows:
        m = statistics.median(ts)
        print(f"| {name:<22} | {len(good) / m:>10,.0f} | {notes / m:>12,.0f} | {base / m:>9.1f}x |")
        table.append({"tokenizer": name, "files_per_s": len(good) / m, "notes_per_s": notes / m, "vs_miditok": base / m,
                      "seconds": ts})
    from _record import write_result

    write_result(a.out, {"benchmark": "tokenize", "label": label, "files": len(good), "notes": notes,
                         "repeats": a.repeats, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
