"""Trace how a `cadenza` command's input travels through the stages: the calls from one cadenza
module into another, as an indented tree, each with its stage's layer (docs/architecture.md).

    python tools/trace_stages.py generate --primer scale.mid --infill 4:8 --style irish --no-compile

Only the first call of each (caller, callee) pair at a depth is shown, and the sampler's
token-by-token loop is cut at `--depth`, so the tree shows the route, not the repetitions. A file
read or written (symusic's MIDI in and out) is marked `[file]`: where files are read tells whether
the input is read once at the edge or re-read deeper down.
"""

from __future__ import annotations

import argparse
import sys

LAYERS = ("cadenza.settings cadenza.atomic", "cadenza.env", "cadenza.data", "cadenza.models", "cadenza.listen",
          "cadenza.generation", "cadenza.evaluation", "cadenza.training", "cadenza.bench cadenza.demo",
          "cadenza.studio", "cadenza", "cadenza.cli")
LAYER = {stage: level for level, names in enumerate(LAYERS, 1) for stage in names.split()}
FILES = {("cadenza.data.midi", "read_notes"), ("cadenza.data.midi", "write_midi"),
         ("cadenza.data.midi", "read_score")}


def layer(module: str) -> int:
    stage = ".".join(module.split(".")[:2])
    return LAYER.get(stage, LAYER["cadenza"])


def trace(argv: list[str], depth: int) -> list[str]:
    from cadenza.cli import main

    lines, seen, stack = [], set(), []

    def profile(frame, event, arg):
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            ours = module.startswith("cadenza")
            caller = next((m for m, o in reversed(stack) if o), None)
            stack.append((module, ours))
            level = sum(o for _, o in stack)
            if not ours or caller == module or level > depth:
                return
            name = frame.f_code.co_qualname
            key = (level, caller, module, name)
            if key in seen or "__" in name or "<" in name or name.endswith(("register", "add_verb")):
                return
            seen.add(key)
            mark = "  [file]" if (module, name) in FILES else ""
            lines.append(f"{'  ' * (level - 1)}L{layer(module):<2} {module}.{name}{mark}")
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        main(argv)
    finally:
        sys.setprofile(None)
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=40, help="deepest call shown (frames of cadenza code)")
    a, rest = p.parse_known_args()
    print("\n".join(trace(rest, a.depth)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
