"""What the music benchmarks share (bench_accompany, bench_infill, bench_lengths): their command
line's common part, and a checkpoint with a store of its pieces in the checkpoint's vocabulary."""

from __future__ import annotations

import argparse


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A parser with --checkpoint, --data, --seed, --no-compile, --label and --out."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="a run, a checkpoint or a shipped model's name")
    ap.add_argument("--data", required=True, help="a store of the model's pieces (held out) in the model's vocabulary")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true", help="decode eagerly")
    ap.add_argument("--label", help="what this run is (recorded)")
    ap.add_argument("--out", help="result JSON")
    return ap


def model_and_store(checkpoint: str, data: str):
    """(the loaded checkpoint on the CPU, the store `data`), refused unless `data` was tokenized as
    the checkpoint's training data was."""
    from cadenza.data.store import TokenStore
    from cadenza.models import checkpoint as ckpt

    loaded, store = ckpt.load(checkpoint, "cpu"), TokenStore(data)
    if not store.tokenizer.same_as(loaded.meta["tokenizer"], ids_only=True):
        raise SystemExit(f"{data} was tokenized differently from {checkpoint}'s training data")
    return loaded, store
