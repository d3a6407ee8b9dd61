"""Free samples asked for a length, per style: do they last it, do they end on the tonic, do they
keep to the style's instruments, how many notes run longer than the style's real ones?

    python benchmarks/bench_lengths.py --checkpoint runs/bars --data data/bars \
        --samples 32 --bars 8 --seconds 20 --out benchmarks/results/bars/lengths.json

Each style's --samples pieces are asked for --bars (a vocabulary with bars) and, separately, for
--seconds, with EOS on, and measured by `cadenza.evaluation.endings` beside the style's pieces in
--data (a store in the checkpoint's vocabulary: its held-out pieces for the endings and the
durations, all of them for the instruments).
"""

from __future__ import annotations

import sys
import time


def main(argv=None) -> int:
    from _held_out import arguments, model_and_store
    from _record import write_result

    from cadenza.evaluation.endings import LengthsConfig, real_report, sample_rows, style_report

    ap = arguments(__doc__)
    ap.add_argument("--styles", help="comma-separated (default: every style of the model)")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--bars", type=int, default=8, help="0: not asked in bars")
    ap.add_argument("--seconds", type=float, default=20.0, help="0: not asked in seconds")
    ap.add_argument("--guidance", type=float, default=1.0)
    a = ap.parse_args(argv)
    loaded, store = model_and_store(a.checkpoint, a.data)
    tok = loaded.tokenizer
    styles = a.styles.split(",") if a.styles else list(tok.styles)
    units = [u for u, v in (("bars", a.bars), ("seconds", a.seconds)) if v]
    if "bars" in units and not getattr(tok, "has_bars", False):
        print(f"{a.checkpoint}: its vocabulary has no bars; measured in seconds only", file=sys.stderr)
        units.remove("bars")
    cfg = LengthsConfig(a.samples, a.bars or None, a.seconds or None, a.guidance, a.seed, not a.no_compile)
    t0, report = time.perf_counter(), {}
    for style in styles:
        recorded = (loaded.meta.get("programs") or {}).get("styles", {}).get(style)  # its training pieces'
        real = real_report(store, style, programs=recorded)
        report[style] = {unit: style_report(sample_rows(loaded, style, cfg, unit), real) for unit in units}
        for unit, r in report[style].items():
            print(f"{style:<11} {unit:<7} lasted {r['lasted']:.0%} ({r['written_min']:g}-{r['written_max']:g}), "
                  f"tonic {r['ends_on_tonic']:.0%} (real {r['real_ends_on_tonic']:.0%}), foreign programs "
                  f"{r['foreign_program_samples']:.0%} of samples, longer than real p99.9 "
                  f"{r['longer_than_real_p999']:.2%}")
    write_result(a.out, {"benchmark": "lengths", "label": a.label, "checkpoint": a.checkpoint, "step": loaded.step,
                         "tokenizer": tok.name, "data": a.data, "samples": a.samples, "bars": cfg.bars,
                         "seconds_asked": cfg.seconds, "guidance": a.guidance, "seed": a.seed, "styles": report,
                         "seconds": time.perf_counter() - t0})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
