"""Infilling on held-out music: does the music after a span help the model predict and write it?

    python benchmarks/bench_infill.py --checkpoint runs/pilot-d --data data/bach-metrical \
        --spans 100 --follow 30 --out benchmarks/results/pilots/d-infill.json

Spans of held-out pieces (2-4 whole bars on the metrical vocabulary, 4-8 s on the note vocabulary;
`cadenza.evaluation.bar_spans` and `.spans` say how they are cut and scored): each span's NLL given
its prefix alone and given prefix and suffix (each token among the ids the model may write: a given
note's are the prompt's), the share of spans the suffix makes likelier, and on bars the same for the
span's last bar alone (the one bar shown any of the suffix, with lookahead); on bars, whether the
fills of --follow spans lead into a suffix moved by a tritone (`bar_spans.follows`).
"""

from __future__ import annotations

import sys
import time

import numpy as np


def main(argv=None) -> int:
    from _held_out import arguments, model_and_store
    from _record import write_result

    from cadenza.evaluation import bar_spans, spans

    ap = arguments(__doc__)
    ap.add_argument("--split", default="valid")
    ap.add_argument("--spans", type=int, default=100)
    ap.add_argument("--follow", type=int, default=30, help="spans filled twice to see if fills follow the suffix")
    a = ap.parse_args(argv)
    loaded, store = model_and_store(a.checkpoint, a.data)
    tok = loaded.tokenizer
    t0 = time.perf_counter()
    bars = getattr(tok, "has_bars", False)
    context = loaded.model.config.context
    drawn = (bar_spans.draw_bar_spans(store, tok, a.split, a.spans, context, seed=a.seed) if bars
             else spans.draw_spans(store, tok, a.split, a.spans, context, seed=a.seed))
    never = spans.given_only(tok)  # scored as the sampler draws: a given note's ids are never the model's
    nll = {"plain": [], "anticipatory": []}
    last = {"plain": [], "anticipatory": []}
    for s in drawn:
        for name, (ids, mask) in (bar_spans.encodings(tok, s) if bars else spans.encodings(tok, s)).items():
            nll[name].append(spans.span_nll(loaded.model, ids, mask, never)[0])
            if bars:
                last[name].append(spans.span_nll(loaded.model, ids, bar_spans.last_bar(tok, ids, mask), never)[0])
    plain, given = np.array(nll["plain"]), np.array(nll["anticipatory"])
    report = {"benchmark": "infill", "label": a.label, "checkpoint": a.checkpoint, "step": loaded.step,
              "tokenizer": tok.name, "unit": "bars" if bars else "seconds", "spans": len(drawn),
              "mean_nll_plain": float(plain.mean()), "mean_nll_with_suffix": float(given.mean()),
              "share_lower_with_suffix": float(np.mean(given < plain)), "nll_plain": plain.tolist(),
              "nll_with_suffix": given.tolist()}
    if bars:
        lp, lg = np.array(last["plain"]), np.array(last["anticipatory"])
        report["last_bar"] = {"mean_nll_plain": float(lp.mean()), "mean_nll_with_suffix": float(lg.mean()),
                              "share_lower_with_suffix": float(np.mean(lg < lp))}
    print(f"{len(drawn)} spans: NLL {plain.mean():.2f} given the prefix, {given.mean():.2f} given prefix and suffix; "
          f"lower with the suffix in {np.mean(given < plain):.0%}")
    if bars and a.follow:
        rows = []
        for i, s in enumerate(drawn[:a.follow]):
            rows.append(bar_spans.follows(loaded, s, a.seed + i, compile=not a.no_compile))
            print(f"\rfollows {i + 1}/{min(a.follow, len(drawn))}", end="", file=sys.stderr)
        rise = np.array([r["rise"] for r in rows])
        report["follows"] = {"spans": len(rows), "mean_rise": float(np.nanmean(rise)), "rows": rows}
        print(f"\nfills' last bar vs a suffix moved a tritone: agreement rises by {np.nanmean(rise):+.2f} when the "
              f"model is given the moved suffix ({np.sum(np.isfinite(rise))} spans)")
    report["seconds"] = time.perf_counter() - t0
    write_result(a.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
