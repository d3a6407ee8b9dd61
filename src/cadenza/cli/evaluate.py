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
    p.add_argument("--styles", action="store_true",
                   help="with --checkpoint and --data (a labelled store): does the model play each style? a style "
                        "classifier, samples per style with and without guidance, overlaps, memorisation")
    p.add_argument("--per-style", type=int, default=20, help="--styles: samples per style (default 20)")
    p.add_argument("--seconds", type=float, default=30.0, help="--styles: seconds per sample (default 30)")
    p.add_argument("--guidance", type=float, default=2.0, help="--styles: guidance of the guided samples")
    p.add_argument("--out", help="--styles: folder for the report and the confusion-matrix pictures")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.set_defaults(func=run)
    return p


def run(a: argparse.Namespace) -> int:
    # lazy: it imports numpy and symusic, which `cadenza --help` and the other verbs must not wait for
    from cadenza.evaluation.report import evaluate

    rep = evaluate(a.checkpoint, a.data, split=a.split, stride=a.stride, samples=a.samples, reference=a.reference,
                   reference_split=a.reference_split, device=a.device, progress=True, json_path=a.json,
                   styles=a.styles, per_style=a.per_style, seconds=a.seconds, guidance=a.guidance, out=a.out)
    if "nll" in rep:
        r = rep["nll"]
        print(f"{r['split']}: {r['nll_nats']:.4f} nats/token = {r['nll_bits']:.4f} bits/token, perplexity "
              f"{r['perplexity']:.2f} over {r['tokens']:,} tokens in {r['pieces']} pieces "
              f"(unigram baseline {r['unigram_nll']:.4f} nats)")
        for style, nll in r.get("per_style", {}).items():
            print(f"  {style:<14} {nll:.4f} nats/token")
    if "samples" in rep:
        print_metrics(rep["samples"])
    if "styles" in rep:
        print_styles(rep["styles"])
    return 0


def print_styles(rep: dict) -> None:
    c = rep["classifier"]
    print(f"\nstyle classifier on real test pieces: accuracy {c['accuracy']:.1%} ({c['test_pieces']} pieces)")
    g = rep["settings"]["guidance"]
    print(f"\n| {'style':<12} | {'accuracy, guidance ' + format(g, 'g'):>22} | {'without':>8} | {'overlap':>7} | "
          f"{'ceiling':>7} | {'copied run':>10} |")
    print(f"|{'-' * 14}|{'-' * 24}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 12}|")
    for style, s in rep["styles"].items():
        print(f"| {style:<12} | {s['accuracy_guided']:>22.0%} | {s['accuracy_plain']:>8.0%} | {s['overlap']:>7.2f} | "
              f"{s['ceiling']:>7.2f} | {s['memorisation']['max']:>10} |")
    print(f"\nstyle accuracy {rep['style_accuracy_guided']:.1%} with guidance {g:g}, "
          f"{rep['style_accuracy_plain']:.1%} without; overlap {rep['overlap_vs_ceiling']:.0%} of the ceiling")


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
