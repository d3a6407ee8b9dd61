"""The `cadenza` command: one thin subcommand per verb (parse arguments, call the library, print)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cadenza import __version__


def _cmd_prepare(a: argparse.Namespace) -> int:
    from cadenza.ingest import prepare
    from cadenza.tokenizers import get_tokenizer

    if bool(a.corpus) == bool(a.inputs):
        raise SystemExit("cadenza prepare: give MIDI files/folders or --corpus NAME (not both)")
    tok = get_tokenizer(a.tokenizer)
    pre_skipped, extra, inputs = [], {}, a.inputs
    if a.corpus:
        from cadenza.corpus import materialize

        cf = materialize(a.corpus, workers=a.workers, progress=not a.quiet)
        inputs, pre_skipped = [str(cf.folder)], cf.failures
        extra = {"corpus": a.corpus}
    res = prepare(inputs, a.out, tokenizer=tok, valid_fraction=a.valid_fraction, test_fraction=a.test_fraction,
                  workers=a.workers, progress=not a.quiet, pre_skipped=pre_skipped, extra_manifest=extra)
    print(res.summary())
    return 0


def _cmd_corpora(a: argparse.Namespace) -> int:
    from cadenza.corpus import CORPORA

    for c in CORPORA.values():
        print(f"{c.name:<12} {c.description}")
    return 0


def _cmd_demo(a: argparse.Namespace) -> int:
    from cadenza.demo import run_demo

    return run_demo(out=Path(a.out), minutes=a.minutes)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cadenza",
        description="From a folder of MIDI files to a trained music model and new music.",
        epilog="Start with `cadenza demo`, or `cadenza prepare --corpus bach --out data/bach`.",
    )
    p.add_argument("--version", action="version", version=f"cadenza {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("prepare", help="tokenize MIDI files (or a built-in corpus) into a token store",
                       description="Tokenize MIDI files, folders (searched recursively) or a built-in corpus "
                                   "into a memory-mapped token store. Bad files are skipped and listed.")
    s.add_argument("inputs", nargs="*", help="MIDI files or folders")
    s.add_argument("--corpus", help="a built-in corpus instead of files (see `cadenza corpora`)")
    s.add_argument("--out", required=True, help="store folder to write")
    s.add_argument("--tokenizer", default="performance",
                   help="performance (default, 388 events) or miditok:REMI, miditok:TSD, ...")
    s.add_argument("--valid-fraction", type=float, default=0.1)
    s.add_argument("--test-fraction", type=float, default=0.1)
    s.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_prepare)

    s = sub.add_parser("corpora", help="list the built-in corpora (no download needed)")
    s.set_defaults(func=_cmd_corpora)

    s = sub.add_parser("demo", help="the whole pipeline on the Bach chorales, offline")
    s.add_argument("--out", default="runs/demo", help="folder for everything the demo writes")
    s.add_argument("--minutes", type=float, default=4.0, help="training time budget")
    s.set_defaults(func=_cmd_demo)

    for register in _extra_commands():
        register(sub)
    return p


def _extra_commands():
    """Subcommands that live beside their library module (train, generate, ...)."""
    from cadenza import doctor, evaluate_cli, generate_cli, render, train_cli
    from cadenza.bench import cli as bench_cli

    return [train_cli.register, generate_cli.register, render.register, evaluate_cli.register,
            bench_cli.register, doctor.register]


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
        print(f"cadenza {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
