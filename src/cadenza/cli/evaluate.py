"""`cadenza evaluate`: NLL of a checkpoint on a store split, or musical metrics of samples."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_verb

EPILOG = """examples:
  cadenza evaluate --checkpoint runs/bach --data data/bach --split test
  cadenza evaluate --samples samples/ --reference data/bach"""


def register(sub) -> argparse.ArgumentParser:
    p = add_verb(sub, "evaluate", "NLL on held-out data, or musical metrics of generated samples",
                 "With --checkpoint and --data: NLL per token (nats, bits) and perplexity over a whole split, "
                 "every token scored once with context. With --samples and --reference: musical metrics of the "
                 "samples against the reference set, the overlapping area of their distributions, and a "
                 "memorisation check.", epilog=EPILOG)
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
    return p


def run(a: argparse.Namespace) -> int:
    from cadenza.evaluation.report import evaluate

    rep = evaluate(a.checkpoint, a.data, split=a.split, stride=a.stride, samples=a.samples, reference=a.reference,
                   reference_split=a.reference_split, device=a.device, progress=True, json_path=a.json)
    if "nll" in rep:
        r = rep["nll"]
        print(f"{r['split']}: {r['nll_nats']:.4f} nats/token = {r['nll_bits']:.4f} bits/token, perplexity "
              f"{r['perplexity']:.2f} over {r['tokens']:,} tokens in {r['pieces']} pieces "
              f"(unigram baseline {r['unigram_nll']:.4f} nats)")
    if "samples" in rep:
        print_metrics(rep["samples"])
    return 0


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
