"""`cadenza evaluate`: NLL of a checkpoint on a store split, or musical metrics of samples."""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """examples:
  cadenza evaluate --checkpoint runs/bach --data data/bach --split test
  cadenza evaluate --samples samples/ --reference data/bach"""


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="NLL on held-out data, or musical metrics of generated samples",
                       description="With --checkpoint and --data: NLL per token (nats, bits) and perplexity over "
                                   "a whole split, every token scored once with context. With --samples and "
                                   "--reference: musical metrics of the samples against the reference set, the "
                                   "overlapping area of their distributions, and a memorisation check.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", help="run folder or checkpoint folder")
    p.add_argument("--data", help="token store to score")
    p.add_argument("--split", default="test", choices=["train", "valid", "test"])
    p.add_argument("--stride", type=int, help="window stride (default: half the context)")
    p.add_argument("--samples", help="a folder of generated .mid files")
    p.add_argument("--reference", help="token store whose pieces are the reference set")
    p.add_argument("--reference-split", default="train", help="reference pieces (and memorisation corpus)")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.set_defaults(func=run)


def nll_report(checkpoint, data, split="test", stride=None, device="auto") -> dict:
    from cadenza import checkpoint as ckpt
    from cadenza.device import pick_device
    from cadenza.evaluate import token_nll
    from cadenza.store import TokenStore

    dev = pick_device(device)
    model, meta = ckpt.load_model(checkpoint, dev)
    store = TokenStore(data)
    if store.manifest["tokenizer"]["name"] != meta["tokenizer"]["name"] or \
            store.manifest["tokenizer"]["params"] != meta["tokenizer"]["params"]:
        raise ValueError(f"{data} was tokenized differently from the checkpoint's training data")
    r = token_nll(model, store, split, stride=stride, device=dev, progress=True)
    out = r.as_dict()
    out.update({"checkpoint": meta["path"], "step": meta["step"], "unigram_nll": store.unigram_nll(split)})
    return out


def reference_notes(store, split: str):
    """Each piece of a store split decoded back to notes (exact for the performance tokenizer)."""
    from cadenza.midi import score_to_notes

    tok = store.tokenizer
    out = []
    for p in store.split(split):
        if hasattr(tok, "decode_notes"):
            out.append(tok.decode_notes(store[p.index])[0])
        else:
            out.append(score_to_notes(tok.decode(store[p.index])[0])[0])
    return out


def samples_report(samples, reference, reference_split="train") -> dict:
    from cadenza.metrics import RunFinder, compare_sets
    from cadenza.midi import MIDI_SUFFIXES, read_notes
    from cadenza.store import TokenStore

    files = sorted(f for f in Path(samples).iterdir() if f.suffix.lower() in MIDI_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"{samples}: no MIDI files")
    store = TokenStore(reference)
    gen = [read_notes(f)[0] for f in files]
    ref = reference_notes(store, reference_split)
    metrics = compare_sets(gen, ref)
    corpus = [store[p.index] for p in store.split(reference_split)]
    finder = RunFinder(corpus)
    pieces = store.split(reference_split)
    memo = []
    for f in files:
        ids = store.tokenizer.encode(f).ids
        run = finder.longest_common_run(ids)
        memo.append({"file": f.name, "tokens": int(ids.size), "longest_shared_run": run.length,
                     "piece": pieces[run.piece_index].source if run.length else None})
    return {"samples": len(files), "reference": len(ref), "metrics": metrics, "memorisation": memo}


def print_metrics(rep: dict) -> None:
    print(f"{rep['samples']} samples vs {rep['reference']} reference pieces\n")
    print(f"| {'metric':<22} | {'samples':>15} | {'reference':>15} | {'overlap':>7} |")
    print(f"|{'-' * 24}|{'-' * 17}|{'-' * 17}|{'-' * 9}|")
    for name, m in rep["metrics"].items():
        print(f"| {name:<22} | {m['generated_mean']:>7.3f} ± {m['generated_std']:<5.2f} | "
              f"{m['reference_mean']:>7.3f} ± {m['reference_std']:<5.2f} | {m['overlap']:>7.2f} |")
    longest = max(rep["memorisation"], key=lambda r: r["longest_shared_run"])
    print(f"\nmemorisation: the longest token run a sample shares with a training piece is "
          f"{longest['longest_shared_run']} tokens ({longest['file']} vs {longest['piece']})")


def run(a: argparse.Namespace) -> int:
    if a.checkpoint and a.data:
        rep = nll_report(a.checkpoint, a.data, a.split, a.stride, a.device)
        print(f"{rep['split']}: {rep['nll_nats']:.4f} nats/token = {rep['nll_bits']:.4f} bits/token, perplexity "
              f"{rep['perplexity']:.2f} over {rep['tokens']:,} tokens in {rep['pieces']} pieces "
              f"(unigram baseline {rep['unigram_nll']:.4f} nats)")
    elif a.samples and a.reference:
        rep = samples_report(a.samples, a.reference, a.reference_split)
        print_metrics(rep)
    else:
        raise SystemExit("cadenza evaluate: give --checkpoint and --data, or --samples and --reference")
    if a.json:
        from cadenza.atomic import write_json

        write_json(a.json, rep)
    return 0
