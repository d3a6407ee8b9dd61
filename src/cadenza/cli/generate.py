"""`cadenza generate`: flags -> a task and a SamplingConfig -> `cadenza.generate` -> one line per sample.

The MIDI files a task names are read here, with the checkpoint's tokenizer, and handed down as notes.
"""

from __future__ import annotations

import argparse
import functools

from cadenza.cli.common import add_settings, add_verb, settings_of
from cadenza.generation.config import SamplingConfig
from cadenza.settings import SettingError

EPILOG = """examples:
  cadenza generate --style irish --seconds 30 --render          # the shipped style model
  cadenza generate --style bach --guidance 2 --num-samples 4    # follow the style more strongly
  cadenza generate --checkpoint runs/bach --num-samples 4 --seconds 30 --out samples/
  cadenza generate --checkpoint runs/bach --primer opening.mid --primer-seconds 8 --top-p 0.95 --render
  cadenza generate --primer tune.mid --infill 8:16 --style irish --num-samples 3   # rewrite 8-16 s
  cadenza generate --primer chorale.mid --infill-bars 9:12 --style bach             # rewrite bars 9-12
  cadenza generate --accompany melody.mid --style bach                              # voices under it
  cadenza generate --style bach --bars 16 --meter 3/4 --tempo 80 --key "D minor"  # a new piece, in bars
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
    task = p.add_argument_group("what to start from", "A new piece without these.")
    task.add_argument("--primer", metavar="MIDI", help="a MIDI file to continue (or, with --infill, to fill)")
    task.add_argument("--primer-seconds", type=float, metavar="S", help="use only the primer's first S seconds")
    task.add_argument("--infill", metavar="START:END", help="rewrite the primer's notes that start in this span "
                      "(seconds), keeping every other note as it is (a model trained with anticipation)")
    task.add_argument("--infill-bars", metavar="FIRST:LAST", help="rewrite bars FIRST to LAST of the primer, as the "
                      "score numbers them (a pickup is bar 0), keeping every other note")
    task.add_argument("--accompany", metavar="MIDI", help="write voices under the melody of this MIDI file (its "
                      "lead instrument, or its top line), which comes back note for note")
    task.add_argument("--live", action="store_true", help="with --accompany: answer each melody note where it "
                      "sounds, without looking ahead, as when it is being played")
    add_settings(p, SamplingConfig, "sampling settings",
                 "The fields of SamplingConfig, as cadenza.generate() and the studio take them.")
    p.set_defaults(func=run)
    return p


def run(a: argparse.Namespace) -> int:
    # lazy: it imports torch, which `cadenza --help` and the other verbs must not wait for
    from cadenza.generation.generate import generate, open_checkpoint, read_notes_for, sampling_config

    # each flag's dest is its SamplingConfig field, which validates it (and the error names the flag)
    cfg = sampling_config(settings_of(a, SamplingConfig))
    # opened once, after the flags are checked: its tokenizer reads the task's file, then it samples
    checkpoint = functools.cache(lambda: open_checkpoint(a.checkpoint, cfg, a.device))
    task = task_of(a, lambda path: read_notes_for(checkpoint(), path))
    g = generate(checkpoint(), cfg, prompt=task, out=a.out, render=a.render, progress=not a.quiet)
    for path, s in zip(g.paths, g.stats):
        secs = f"{s['seconds']:.1f} s" if s["seconds"] is not None else "? s"
        print(f"{path}  {s['tokens']} tokens, {s['notes']} notes, {secs}, {s['repairs']['repairs']} repairs")
    how = "compiled decode step" if g.run.get("compiled") else "eager"
    if g.run.get("compile_seconds", 0) >= 1:  # a build, not a load from the disk cache
        how += f", built in {g.run['compile_seconds']:.0f} s first"
    print(f"{g.tokens_per_s:,.0f} tokens/s on {g.run['device']} ({how}); settings in {a.out}/generation.json")
    return 0


def task_of(a: argparse.Namespace, read):
    """The task the flags ask for, its MIDI file read by `read` (path -> Notes) once the flags are
    known to agree."""
    # lazy: it imports numpy, which `cadenza --help` must not wait for
    from cadenza.generation.prompt import Accompany, Continue, Infill, check_cut, parse_span

    if a.live and a.accompany is None:
        raise SettingError("live", "is for --accompany")
    if a.accompany is not None:
        if a.primer is not None or a.infill is not None or a.infill_bars is not None:
            raise SettingError("accompany", "and --primer/--infill are exclusive: the melody file is the piece")
        return Accompany(read(a.accompany), source=a.accompany, live=a.live)
    if a.infill is not None or a.infill_bars is not None:
        name = "infill" if a.infill is not None else "infill_bars"
        if a.infill is not None and a.infill_bars is not None:
            raise SettingError("infill", "and --infill-bars are exclusive: give the span once")
        span = parse_span(a.infill) if a.infill is not None else parse_span(a.infill_bars, name, int)
        if a.primer is None:
            raise SettingError(name, "needs --primer, the piece to fill")
        if a.primer_seconds is not None:
            raise SettingError("primer_seconds", "cuts a primer to continue; an infill keeps the whole piece")
        if a.infill_bars is not None:
            return Infill.bars(read(a.primer), *span, source=a.primer)
        return Infill(read(a.primer), *span, source=a.primer)
    check_cut(a.primer_seconds, a.primer is not None)  # before the checkpoint and the file are opened
    notes = read(a.primer) if a.primer is not None else None
    return Continue(notes, a.primer_seconds, source=a.primer)
