"""`cadenza generate`: sample MIDI from a checkpoint (no architecture flags needed)."""

from __future__ import annotations

import argparse

EPILOG = """examples:
  cadenza generate --checkpoint runs/bach --num-samples 4 --seconds 30 --out samples/
  cadenza generate --checkpoint runs/bach --primer opening.mid --primer-seconds 8 --top-p 0.95 --render
the same --seed gives the same MIDI, bit for bit, on the same machine."""


def register(sub) -> None:
    p = sub.add_parser("generate", help="sample new music (or continue a primer) from a checkpoint",
                       description="Sample MIDI from a trained checkpoint: a run folder (its best checkpoint) "
                                   "or a checkpoint folder. Decoding is grammar-constrained by default, so every "
                                   "note that starts also ends.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="run folder or RUN/checkpoints/step-N")
    p.add_argument("--primer", help="a MIDI file to continue")
    p.add_argument("--primer-seconds", type=float, help="use only the primer's first S seconds")
    p.add_argument("--num-samples", type=int, default=1)
    length = p.add_mutually_exclusive_group()
    length.add_argument("--max-tokens", type=int, help="new tokens per sample (default 1024)")
    length.add_argument("--seconds", type=float, help="new music per sample, in seconds")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-polyphony", type=int, help="at most this many notes sounding at once")
    p.add_argument("--max-note-seconds", type=float,
                   help="release any note that has sounded this long (no stuck notes from a young model)")
    p.add_argument("--unconstrained", action="store_true", help="no grammar mask (the decoder still repairs)")
    p.add_argument("--no-eos", action="store_true",
                   help="never end a piece early: every sample runs to --seconds / --max-tokens")
    p.add_argument("--batch-size", type=int, default=8, help="samples generated together")
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default="samples", help="folder for sample-NNN.mid and generation.json")
    p.add_argument("--render", action="store_true", help="also write WAV and piano-roll PNG for each sample")
    p.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    from cadenza.generation import generate

    g = generate(a.checkpoint, primer=a.primer, primer_seconds=a.primer_seconds, num_samples=a.num_samples,
                 max_tokens=a.max_tokens, seconds=a.seconds, temperature=a.temperature, top_k=a.top_k,
                 top_p=a.top_p, seed=a.seed, out=a.out, constrained=not a.unconstrained,
                 max_polyphony=a.max_polyphony, device=a.device, batch_size=a.batch_size, render=a.render,
                 stop_at_eos=not a.no_eos, max_note_seconds=a.max_note_seconds)
    for path, s in zip(g.paths, g.stats):
        print(f"{path}  {s['tokens']} tokens, {s['notes']} notes, {s['seconds']:.1f} s, "
              f"{s['repairs']['repairs']} repairs")
    print(f"{g.settings['tokens_per_s']:,.0f} tokens/s on {g.settings['device']}; settings in "
          f"{g.paths[0].parent / 'generation.json' if g.paths else a.out}")
    return 0
