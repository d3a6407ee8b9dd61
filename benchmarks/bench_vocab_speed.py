"""The metrical vocabulary against the note vocabulary, in one run: how fast each decodes and how
fast each writes notes.

    python benchmarks/bench_vocab_speed.py --out benchmarks/results/generate/vocab-speed.json

For each vocabulary (`notes`: the shipped model's; `metrical`: bars and beats with lookahead, the
same five styles), bench_generate's contestants at its model size (untrained weights, 512 new
tokens, plain sampling, no early stop): HF GPT-2 `generate`, cadenza's compiled decode step under
the vocabulary's masks, and cadenza eager, all interleaved in one race. Notes a second are tokens a
second over the tokens the vocabulary spends on a note of real music: the same Bach chorales (from
music21's corpus) encoded by each, as a new piece is (no given notes).
"""

from __future__ import annotations

import argparse
import statistics
import sys

VOCABS = ("notes", "metrical")
KEEP = ("HF GPT2 generate", "cadenza relative, compiled step", "cadenza relative")


def tokens_per_note(vocab: str, files) -> float:
    """The tokens `vocab` writes per note of `files` (MIDI), summed over them."""
    from bench_generate import vocabulary

    tok = vocabulary(vocab)[0]
    encoded = [tok.encode(f) for f in files]
    return sum(len(e.ids) for e in encoded) / sum(e.notes for e in encoded)


def main(argv=None) -> int:
    from _record import write_result
    from bench_generate import contestants, race

    from cadenza.data.corpora import materialize
    from cadenza.env.record import cpu_info
    from cadenza.generation import compiled

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chorales", type=int, default=40, help="Bach chorales the tokens per note are counted on")
    ap.add_argument("--out", help="result JSON (benchmarks/results/generate/...)")
    a = ap.parse_args(argv)
    if reason := compiled.unavailable_reason():
        raise SystemExit(f"the compiled decode step is unavailable here: {reason}")
    files = materialize("bach", limit=a.chorales, progress=False).midi
    per_note = {v: tokens_per_note(v, files) for v in VOCABS}
    runs = {f"{v}: {k}": fn for v in VOCABS for k, fn in contestants(a.new_tokens, ["relative"], v).items()
            if k in KEEP}
    results, seconds, load = race(runs, a.batches, a.repeats, a.new_tokens)
    rows = []
    for k, r in results.items():
        vocab, name = k.split(": ", 1)
        hf = results[f"{vocab}: HF GPT2 generate"]
        rows.append({"vocab": vocab, "generator": name, "tokens_per_s": {str(b): r[b] for b in r},
                     "vs_hf": {str(b): r[b] / hf[b] for b in r},
                     "notes_per_s": {str(b): r[b] / per_note[vocab] for b in r},
                     "seconds_per_repeat": {str(b): seconds[k][b] for b in r}})
    cpu = cpu_info()
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores; tokens per note of {len(files)} Bach chorales: "
          + ", ".join(f"{v} {x:.2f}" for v, x in per_note.items()), file=sys.stderr)
    print("| vocabulary | generator | " + " | ".join(f"batch {b} tok/s | vs HF | notes/s" for b in a.batches) + " |")
    print("|---|---|" + "---:|---:|---:|" * len(a.batches))
    for r in rows:
        print(f"| {r['vocab']} | {r['generator']} | " + " | ".join(
            f"{r['tokens_per_s'][str(b)]:,.0f} | {r['vs_hf'][str(b)]:.2f}x | {r['notes_per_s'][str(b)]:,.0f}"
            for b in a.batches) + " |")
    print(f"load average (1 min) before and after each batch size: {', '.join(f'{x:.2f}' for x in load)}")
    write_result(a.out, {"benchmark": "vocab-speed", "new_tokens": a.new_tokens, "repeats": a.repeats,
                         "batches": a.batches, "chorales": len(files), "tokens_per_note": per_note,
                         "median_seconds": {k: {str(b): statistics.median(v) for b, v in s.items()}
                                            for k, s in seconds.items()},
                         "rows": rows, "load_average": load})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
