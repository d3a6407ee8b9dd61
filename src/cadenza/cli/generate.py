"""`cadenza generate`: flags -> a SamplingConfig -> `cadenza.generate` -> one line per sample."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_verb

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
    p.add_argument("--style", help="play in this style (see `cadenza models` for the styles of each model)")
    p.add_argument("--guidance", type=float, help="classifier-free guidance (default 1; 1.5-3 follows the "
                                                  "style more strongly)")
    p.add_argument("--primer", help="a MIDI file to continue")
    p.add_argument("--primer-seconds", type=float, help="use only the primer's first S seconds")
    p.add_argument("--num-samples", type=int, help="pieces to generate (default 1)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--max-tokens", type=int, help="new tokens per sample (default 1024)")
    length.add_argument("--seconds", type=float, help="new music per sample, in seconds")
    p.add_argument("--temperature", type=float, help="default 1.0; lower is safer, higher is wilder")
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--seed", type=int, help="default 0")
    p.add_argument("--max-polyphony", type=int,
                   help="at most this many notes sounding at once (default: the 99th percentile of the "
                        "style's training data, as the checkpoint records it; 0: no limit)")
    p.add_argument("--max-note-seconds", type=float,
                   help="release any note that has sounded this long (default: the 99.9th percentile of note "
                        "lengths in the training data, so no stuck notes from a young model; 0: no limit)")
    p.add_argument("--unconstrained", action="store_true", help="no grammar mask (the decoder still repairs)")
    p.add_argument("--no-eos", action="store_true",
                   help="never end a piece early: every sample runs to --seconds / --max-tokens")
    p.add_argument("--batch-size", type=int, help="samples generated together (default 8)")
    p.add_argument("--no-compile", action="store_true",
                   help="decode eagerly: skip the compiled decode step (by default it is built once per model and "
                        "batch size, tens of seconds, then loaded from ~/.cache/cadenza/decode)")
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default="samples", help="folder for sample-NNN.mid and generation.json")
    p.add_argument("--render", action="store_true", help="also write WAV and piano-roll PNG for each sample")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    return p


def run(a: argparse.Namespace) -> int:
    from dataclasses import fields

    from cadenza.generation.config import SamplingConfig
    from cadenza.generation.generate import generate

    # each flag's dest is its SamplingConfig field, which validates it and names the flag when it is off
    names = {f.name for f in fields(SamplingConfig)}
    settings = {k: v for k, v in vars(a).items() if k in names and v is not None}
    if a.unconstrained:
        settings["constrained"] = False
    if a.no_eos:
        settings["stop_at_eos"] = False
    if a.no_compile:
        settings["compile"] = False
    g = generate(a.checkpoint, settings, out=a.out, device=a.device, render=a.render, progress=not a.quiet)
    for path, s in zip(g.paths, g.stats):
        secs = f"{s['seconds']:.1f} s" if s["seconds"] is not None else "? s"
        print(f"{path}  {s['tokens']} tokens, {s['notes']} notes, {secs}, {s['repairs']['repairs']} repairs")
    how = "compiled step" if g.run.get("compiled") else "eager"
    if g.run.get("compile_seconds", 0) >= 1:  # a build, not a load from the disk cache
        how += f", built in {g.run['compile_seconds']:.0f} s first"
    print(f"{g.tokens_per_s:,.0f} tokens/s on {g.run['device']} ({how}); settings in {a.out}/generation.json")
    return 0
