"""Accompaniment of held-out melodies: does a model write to the notes it is given?

    python benchmarks/bench_accompany.py --checkpoint runs/pilot-c --data data/bach-metrical \
        --pieces 32 --variations 0:1,-6:1,6:1,0:0.8,0:1.2 --out benchmarks/results/pilots/c.json

For each of the first --pieces held-out pieces of --style (valid, then test), its melody is
accompanied by the model in each variation (SEMITONES:FACTOR, FACTOR 1.2 is 20% slower), and
measured (`cadenza.evaluation.harmony`): bass-melody consonance, notes starting with two others,
the key, beside the real pieces (--classify: and the style a classifier calls each; --live: each
melody note answered where it sounds, as when it is played); and teacher-forced, how much likelier
the real lower voices are with the melody given. --data is a store of the same pieces in the
checkpoint's vocabulary.
"""

from __future__ import annotations

import sys
import time


def main(argv=None) -> int:
    from _held_out import arguments, model_and_store
    from _record import write_result

    from cadenza.evaluation.accompaniment import CLASSIFIED, AccompanyConfig, Variation, accompany_report
    from cadenza.evaluation.styles import classifier_report

    ap = arguments(__doc__)
    ap.add_argument("--style", default="bach")
    ap.add_argument("--pieces", type=int, default=32)
    ap.add_argument("--variations", default="0:1", help="SEMITONES:FACTOR, comma-separated (0:1,-6:1,0:1.2)")
    ap.add_argument("--no-key", action="store_true", help="give a model with KEY tokens no key")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--live", action="store_true",
                    help="answer each melody note where it sounds, without looking ahead (as when it is played)")
    ap.add_argument("--classify", action="store_true",
                    help="also say which style a classifier trained on --data's train split calls each result")
    a = ap.parse_args(argv)
    variations = [Variation(int(v.split(":")[0]), float(v.split(":")[1])) for v in a.variations.split(",")]
    loaded, store = model_and_store(a.checkpoint, a.data)
    cfg = AccompanyConfig(a.style, a.pieces, variations, a.seed, not a.no_compile, not a.no_key, a.temperature,
                          a.live)
    t0 = time.perf_counter()
    clf, extra = None, {}
    if a.classify:
        if (n := len(store.styles or ())) < 2:
            raise SystemExit(f"--classify: {a.data} has {n} style; a style classifier needs two or more")
        clf, real = classifier_report(store, CLASSIFIED, a.seed)
        extra["classifier"] = real["report"]
    report = accompany_report(loaded, store, cfg, progress=lambda i, n: print(f"\r{i}/{n} pieces", end="",
                                                                              file=sys.stderr), classifier=clf)
    gen, real, gain = report["generated"], report["real"], report["melody_gain"]
    print(f"\n{a.checkpoint}: {report['accompaniments']} accompaniments of {report['pieces']} melodies, "
          f"{report['melody_returned']} returned note for note")
    for k in gen:
        print(f"  {k:<13} generated {gen[k]:.3f}   real {real[k]:.3f}")
    print(f"  melody gain   {gain['gain']:+.3f} nats a note ({gain['without_melody']:.3f} without, "
          f"{gain['with_melody']:.3f} with)")
    write_result(a.out, {"benchmark": "accompany", "label": a.label, "checkpoint": a.checkpoint,
                         "step": loaded.step, "tokenizer": loaded.tokenizer.name, "data": a.data,
                         "seconds": time.perf_counter() - t0, **report, **extra})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
