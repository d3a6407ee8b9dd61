"""`cadenza render`: MIDI files -> WAV, piano-roll PNG, score PNG."""

from __future__ import annotations

import argparse
import sys

from cadenza.cli.common import add_verb


def register(sub) -> argparse.ArgumentParser:
    s = add_verb(sub, "render", "MIDI -> WAV audio, piano-roll PNG, score PNG",
                 "Render MIDI files to WAV (a General MIDI SoundFont: FluidSynth if installed, else midirenderer from "
                 "pip; a built-in synthesizer without either), a piano-roll PNG and, with MuseScore 3 installed, a "
                 "score PNG. With no --wav/--png/--score: WAV and PNG. One line on stderr says which audio backend "
                 "is used.", settings=_audio_flags)
    s.add_argument("files", nargs="+", metavar="FILE.mid", help="MIDI files")
    s.add_argument("--wav", action="store_true", help="write <name>.wav")
    s.add_argument("--png", action="store_true", help="write <name>.png, a piano roll")
    s.add_argument("--score", action="store_true", help="write <name>.score.png with MuseScore 3")
    s.add_argument("--soundfont", help="General MIDI .sf2 (default: $CADENZA_SOUNDFONT, then system SoundFonts, "
                                       "then the one in the pretty_midi package)")
    s.add_argument("--out", help="output folder (default: beside each MIDI file)")
    s.set_defaults(func=run)
    return s


def _audio_flags(s: argparse.ArgumentParser) -> None:
    """The audio flags, added when `cadenza render` is parsed."""
    # lazy: it imports numpy and symusic, which `cadenza --help` and the other verbs must not wait for
    from cadenza.listen.audio import BACKENDS, SAMPLE_RATE

    s.add_argument("--sample-rate", type=int, default=SAMPLE_RATE, help="WAV sample rate (default %(default)s)")
    s.add_argument("--synth", choices=BACKENDS, default="auto",
                   help="audio backend (default auto: FluidSynth if installed, else midirenderer, else numpy)")


def run(a: argparse.Namespace) -> int:
    # lazy: it imports numpy, symusic and matplotlib, which `cadenza --help` and the other verbs must not wait for
    from cadenza.listen.render import render

    chosen = a.wav or a.png or a.score
    res = render(a.files, wav=a.wav or not chosen, png=a.png or not chosen, score=a.score, soundfont=a.soundfont,
                 out_dir=a.out, sample_rate=a.sample_rate, backend=a.synth)
    for note in res.notes:
        print(note, file=sys.stderr)
    for written in res.written:
        for p in written.values():
            print(p)
    for _, reason in res.skipped:
        print(f"cadenza render: skipped {reason}", file=sys.stderr)
    return 1 if res.skipped else 0
