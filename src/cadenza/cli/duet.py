"""`cadenza duet`: play with a model in real time through MIDI ports."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_settings, add_verb, settings_of
from cadenza.live.config import DuetConfig

EPILOG = """examples:
  cadenza duet --list-ports
  cadenza duet --in 1 --out 2 --style irish            # play a phrase, pause: the model answers
  cadenza duet --in "Keystation" --out "FluidSynth" --reply 8 --wait 0.6 --program 40
Ctrl-C stops; every note the model started is ended, then all-notes-off is sent."""


def register(sub) -> argparse.ArgumentParser:
    p = add_verb(sub, "duet", "play with a model in real time: play a phrase, pause, hear it answered",
                 "Play with a model through MIDI ports (python-rtmidi: pip install 'cadenza[live]'). In answer "
                 "mode, when you pause the model continues your phrase in the chosen style; play again to cut "
                 "it short. See docs/duet.md for connecting a keyboard and a synthesizer.", epilog=EPILOG)
    p.add_argument("--list-ports", action="store_true", help="list the MIDI input and output ports, then exit")
    p.add_argument("--in", dest="inport", default="0", help="input port: a name, part of one, or its number")
    p.add_argument("--out", dest="outport", default="0", help="output port: a name, part of one, or its number")
    p.add_argument("--checkpoint", help="run folder, checkpoint folder or shipped model (default: the shipped one)")
    p.add_argument("--device", default="cpu", help="cpu (default: decoding one sample is fastest there), cuda, mps")
    add_settings(p, DuetConfig, "duet settings")
    p.set_defaults(func=run)
    return p


def run(a: argparse.Namespace) -> int:
    from cadenza.live import ports  # lazy: MIDI ports load only to play

    if a.list_ports:
        found = ports.list_ports()
        for kind in ("inputs", "outputs"):
            print(f"{kind}:")
            for i, name in enumerate(found[kind]):
                print(f"  {i}: {name}")
        return 0
    from cadenza.live.engine import duet  # lazy: it imports torch and loads a model

    stats = duet(a.inport, a.outport, a.checkpoint, device=a.device, **settings_of(a, DuetConfig))
    if stats.latency:
        print(f"{stats.answers} answers, {stats.cut} cut short; first note after the pause: "
              f"median {sorted(stats.latency)[len(stats.latency) // 2] * 1000:.0f} ms")
    return 0
