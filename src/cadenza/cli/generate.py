"""`cadenza generate`: flags -> a SamplingConfig -> `cadenza.generate` -> one line per sample."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_settings, add_verb, settings_of
from cadenza.generation.config import SamplingConfig

EPILOG = """examples:
  cadenza generate --style irish --seconds 30 --render          # the shipped style model
  cadenza generate --style bach --guidance 2 --num-samples 4    # follow the style more strongly
  cadenza generate --checkpoint runs/bach --num-samples 4 --seconds 30 --out samples/
  cadenza generate --checkpoint runs/bach --primer opening.mid --primer-seconds 8 --top-p 0.95 --render
the same --seed gives the same MIDI, bit for bit, on the same machine."""


def register(sub) -> argparse.ArgumentParser:
    p = add_verb(sub, "generate", "new music in a style, or continuing a primer, from a shipped model or yours",
                 "Sample MIDI from the shipped style model, or from a trained checkpoint: a run folder (its "
                 "best checkpoint) or a checkpoint folder. Decoding is grammar-constrained by default, so "
                 "every note that starts also ends.",
                 epilog=EPILOG)
    p.add_argument("--checkpoint", help="run folder, RUN/checkpoints/step-N or a shipped model's name "
                                         "(default: the shipped style model, see `cadenza models`)")
    p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, cuda:1, mps")
    p.add_argument("--out", default="samples", help="folder for sample-NNN.mid and generation.json")
    p.add_argument("--render", action="store_true", help="also write WAV and piano-roll PNG for each sample")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_settings(p, SamplingConfig, "sampling settings",
                 "The fields of SamplingConfig, as cadenza.generate() and the studio take them.")
    p.set_defaults(func=run)
    return p


def run(a: argparse.Namespace) -> int:
    # lazy: it imports torch, which `cadenza --help` and the other verbs must not wait for
    from cadenza.generation.generate import generate

    # each flag's dest is its SamplingConfig field, which validates it (and the error names the flag)
    settings = settings_of(a, SamplingConfig)
    g = generate(a.checkpoint, settings, out=a.out, device=a.device, render=a.render, progress=not a.quiet)
    for path, s in zip(g.paths, g.stats):
        secs = f"{s['seconds']:.1f} s" if s["seconds"] is not None else "? s"
        print(f"{path}  {s['tokens']} tokens, {s['notes']} notes, {secs}, {s['repairs']['repairs']} repairs")
    how = "compiled decode step" if g.run.get("compiled") else "eager"
    if g.run.get("compile_seconds", 0) >= 1:  # a build, not a load from the disk cache
        how += f", built in {g.run['compile_seconds']:.0f} s first"
    print(f"{g.tokens_per_s:,.0f} tokens/s on {g.run['device']} ({how}); settings in {a.out}/generation.json")
    return 0
