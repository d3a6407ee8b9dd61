"""An old model beside a new one on the same held-out pieces: note durations, nats per note,
infilling and accompaniment (`cadenza.evaluation.anticipation` says what each measures).

    cadenza prepare --corpus bach,palestrina:400,irish,german,chinese --out data/styles-388
    cadenza prepare --corpus bach,palestrina:400,irish,german,chinese --tokenizer notes --out data/styles
    python benchmarks/bench_anticipation.py --old OLD_CHECKPOINT --new runs/styles \\
        --old-data data/styles-388 --new-data data/styles --out benchmarks/results/anticipation/

Both stores are one corpus prepared with each model's tokenizer: the splits go by content, so they
hold the same held-out pieces. Writes anticipation.json (with the machine, the code commit and the
command), durations.png and infilling.png to --out. `--parts` measures some of the four only;
`--provisional NOTE` marks a result measured on a model still training.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main(argv=None) -> int:
    from card_tables import short_value

    from cadenza.cli.common import add_settings, settings_of
    from cadenza.evaluation.anticipation import PARTS, AnticipationEvalConfig, evaluate_anticipation

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the old model: a run, a checkpoint or a shipped model's name")
    ap.add_argument("--new", required=True, help="the new model (a run folder: its best checkpoint)")
    ap.add_argument("--old-data", required=True, help="the held-out pieces in the old model's vocabulary (a store)")
    ap.add_argument("--new-data", required=True, help="the same pieces in the new model's vocabulary (a store)")
    ap.add_argument("--out", help="folder for anticipation.json and the pictures")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--provisional", help="why these figures are not final (recorded in the JSON)")
    ap.add_argument("--device", default="auto")
    add_settings(ap, AnticipationEvalConfig, "measurement settings")
    a = ap.parse_args(argv)
    settings = settings_of(a, AnticipationEvalConfig)
    seconds: dict[str, float] = {}
    last = time.perf_counter()

    def show(part: str, report: dict) -> None:  # each part's figures as soon as they are measured
        nonlocal last
        seconds[part], last = time.perf_counter() - last, time.perf_counter()
        print(f"\n{part} ({seconds[part]:.0f} s)")
        for name, g in report["goals"].items():
            if name.startswith(part):
                print(f"  {'met' if g['met'] else 'NOT met':>8}  {name}: {short_value(g['value'])} (goal: {g['goal']})")
        if part == "likelihood":
            for m in ("old", "new"):
                r = report["likelihood"][m]
                print(f"  {m}: {r['nats_per_note']:.3f} nats/note ({r['nats_per_token']:.3f} nats/token)")

    report = evaluate_anticipation(a.old, a.new, a.old_data, a.new_data, parts=a.parts, out=a.out, device=a.device,
                                   on_part=show, **settings)
    report["seconds"] = seconds
    from _record import write_result

    payload = {"benchmark": "anticipation", **({"provisional": a.provisional} if a.provisional else {}), **report}
    write_result(str(Path(a.out) / "anticipation.json") if a.out else None, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
