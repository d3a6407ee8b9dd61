"""Ship a trained style model inside the package (maintainers): src/cadenza/models/shipped/NAME/.

    python tools/ship_model.py --run runs/styles --data data/styles --name styles --guidance 2

Writes, from the run's best checkpoint (by validation loss) and the labelled store it was trained on:
  model.safetensors  fp16 weights (half the size of fp32), checksummed in checkpoint.json
  checkpoint.json    config, tokenizer with its styles, step, environment (CPU, versions, commit)
  run.json, metrics.jsonl   the training run's record and its loss curves
  classifier.json    the style classifier (fit on train excerpts), each style's real metric means and
                     the guidance the card recommends: `make demo` and the studio use them
  pieces.json        the corpus spec and the origin of every valid/test piece (`cadenza models --rebuild`)
  data.json          pieces, tokens and hours per style and split, and the store's fingerprint
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def style_data(store) -> dict:
    """Per style: pieces and tokens in each split, notes and hours (the card's data table)."""
    out: dict = {}
    stats = store.manifest.get("styles", {})
    for split in ("train", "valid", "test"):
        for p in store.split(split):
            s = out.setdefault(p.style, {"pieces": {"train": 0, "valid": 0, "test": 0}, "tokens": 0})
            s["pieces"][split] += 1
            s["tokens"] += len(p)
    for style, s in out.items():
        s.update({k: stats.get(style, {}).get(k) for k in ("notes", "hours", "skipped")})
    return {"corpus": store.manifest.get("corpus"), "styles": out, "totals": store.manifest["totals"],
            "fingerprint": store.fingerprint}


def pieces_card(store) -> dict:
    """`store_pieces`, with origins completed for stores made from a corpus cache of an older version
    (its markers did not keep the source, so such pieces were recorded as "bach:" alone)."""
    from cadenza.data.corpora import materialize
    from cadenza.evaluation.pieces import store_pieces

    card, sources = store_pieces(store), {}
    for split in ("valid", "test"):
        for i, p in enumerate(store.split(split)):
            if card[split][i] and card[split][i].endswith(":"):
                if p.style not in sources:  # cached: reads the conversion markers only
                    sources[p.style] = materialize(p.style, progress=False).sources
                card[split][i] += sources[p.style][Path(p.source).name]
    return card


def classifier_card(store, guidance: float, seconds: float = 30.0) -> dict:
    """The style classifier with each style's real metric means (what the demo prints beside a sample)."""
    from cadenza.demo import METRICS
    from cadenza.evaluation.metrics import compute_all
    from cadenza.evaluation.styles import classifier_report

    clf, real = classifier_report(store, seconds)
    reference = {}
    for style in clf.styles:
        rows = [compute_all(notes, list(METRICS)) for s, notes in real["train"] if s == style and len(notes)]
        reference[style] = {m: float(np.nanmean([r[m] for r in rows])) for m in METRICS}
    return {**clf.to_dict(), "reference": reference, "guidance": guidance, "seconds": seconds,
            "accuracy_on_test_pieces": real["report"]["accuracy"]}


def machine(run: Path, step_dir: Path) -> dict:
    """The CPU (this machine's: ship on the machine that trained) and the run's wall time, from the
    run record's start to the exported checkpoint (a resumed run counts the gaps too, and says so)."""
    import json

    from cadenza.env.record import cpu_info

    rec = json.loads((run / "run.json").read_text())
    start = (run / "config.json").stat().st_mtime
    return {"cpu": cpu_info(), "wall_hours": ((step_dir / "checkpoint.json").stat().st_mtime - start) / 3600,
            "resumed": len(rec.get("resumes", []))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, type=Path, help="the training run folder")
    ap.add_argument("--data", required=True, type=Path, help="the labelled store it was trained on")
    ap.add_argument("--name", default="styles")
    ap.add_argument("--guidance", type=float, default=2.0, help="the guidance the demo and the studio start from")
    a = ap.parse_args(argv)
    from cadenza.data.store import TokenStore
    from cadenza.models.zoo import shipped_root
    from cadenza.training.export import export

    store = TokenStore(a.data)
    if not store.styles:
        raise SystemExit(f"{a.data}: no style labels; a shipped model needs a store made with --corpus a,b")
    from cadenza.models import checkpoint as ckpt

    extra = {"classifier.json": classifier_card(store, a.guidance), "pieces.json": pieces_card(store),
             "data.json": {**style_data(store), "machine": machine(a.run, ckpt.resolve(a.run))}}
    from cadenza.data.statistics import polyphony_stats

    # what sampling defaults come from (a run begun before cadenza recorded it lacks it)
    dest = export(a.run, shipped_root() / a.name, extra_files=extra, meta={"polyphony": polyphony_stats(store)})
    size = sum(f.stat().st_size for f in dest.iterdir()) / 1e6
    print(f"shipped {a.name}: {dest.relative_to(ROOT)} ({size:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
