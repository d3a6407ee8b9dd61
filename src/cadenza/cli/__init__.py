"""The `cadenza` command: one small module per verb (parse arguments, call the library, print).

Nothing here decides anything the Python API cannot: each verb's `run` makes one library call.
Errors a user can fix (a bad setting, a missing file, a corrupt input) end as one line,
``cadenza VERB: error: ...``, and exit code 2; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cadenza import __version__
from cadenza.cli.common import VerbParser
from cadenza.settings import SettingError

VERBS = ("prepare", "corpora", "train", "generate", "models", "render", "evaluate", "serve", "duet", "bench",
         "doctor", "demo")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cadenza",
        description="From a folder of MIDI files to a trained music model and new music.",
        epilog="Start with `cadenza demo`, or `cadenza prepare --corpus bach --out data/bach`.",
    )
    p.add_argument("--version", action="version", version=f"cadenza {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=VerbParser)
    for verb in VERBS:
        s = importlib.import_module(f"cadenza.cli.{verb}").register(sub)
        s.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p


def parse_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    parser = parser or build_parser()
    # argparse fills a `key=value ...` positional list at the first positional it meets (`bench
    # polyphonic`), so overrides written after the options come back unparsed; take them here.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all("=" in x and not x.startswith("-") for x in extra):
            args.overrides = [*args.overrides, *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _flag(parser: argparse.ArgumentParser, args: argparse.Namespace, field: str) -> str:
    """The flag the user gave for setting `field` (`top_p` -> `--top-p`), else the setting's own
    name (it came from a key=value override, a config file or a preset)."""
    flag = "--" + field.replace("_", "-")
    for action in parser._subparsers._group_actions[0].choices[args.command]._actions:
        if (action.dest == field or flag in action.option_strings) and action.option_strings \
                and getattr(args, action.dest, None) is not None:
            return action.option_strings[0]
    return field


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(argv, parser)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        if getattr(args, "debug", False):
            raise
        if isinstance(e, SettingError):
            msg = f"{_flag(parser, args, e.field)} {e.reason}"
        else:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if isinstance(e, KeyError):
                msg = str(e.args[0]) if e.args else msg
        print(f"cadenza {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
