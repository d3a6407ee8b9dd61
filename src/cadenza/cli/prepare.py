"""`cadenza prepare`: MIDI files/folders or a built-in corpus -> a token store."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_verb


def register(sub) -> argparse.ArgumentParser:
    s = add_verb(sub, "prepare", "tokenize MIDI files (or a built-in corpus) into a token store",
                 "Tokenize MIDI files, folders (searched recursively) or a built-in corpus into a memory-mapped "
                 "token store. Bad files are skipped and listed.")
    s.add_argument("inputs", nargs="*", help="MIDI files or folders")
    s.add_argument("--corpus", help="built-in corpora instead of files, comma-separated (bach,irish,...; see "
                                    "`cadenza corpora`): each corpus's name is its pieces' style")
    s.add_argument("--style", help="label every file given with this style")
    s.add_argument("--styles-from-folders", action="store_true",
                   help="each first-level subfolder of a folder given is a style, named after it")
    s.add_argument("--out", required=True, help="store folder to write")
    s.add_argument("--tokenizer", default="performance",
                   help="performance (default, 388 events), notes (10 ms), metrical (bars and beats), or "
                        "miditok:REMI, miditok:TSD, ...")
    s.add_argument("--valid-fraction", type=float, default=0.1)
    s.add_argument("--test-fraction", type=float, default=0.1)
    s.add_argument("--tokenizer-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of the tokenizer, such as lookahead=true (metrical) or anticipation=1.0 "
                        "(notes); repeatable")
    s.add_argument("--held-out-from", metavar="MODEL_OR_STORE",
                   help="hold out exactly the valid and test pieces of a shipped model or a store (by origin) "
                        "and train on the rest, so a new model is measured on the pieces an older one was")
    s.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=run)
    return s


def run(a: argparse.Namespace) -> int:
    # lazy: it imports numpy and symusic, which `cadenza --help` and the other verbs must not wait for
    from cadenza.data.prepare import prepare

    held_out = None
    if a.held_out_from:
        from cadenza.evaluation.pieces import held_out_of  # lazy: only this flag reads a model's pieces

        held_out = held_out_of(a.held_out_from)
    tokenizer = a.tokenizer
    if a.tokenizer_option:
        from cadenza.data.tokenizers import get_tokenizer  # lazy: as prepare's

        options = dict(_option(o) for o in a.tokenizer_option)
        try:
            tokenizer = get_tokenizer(a.tokenizer, **options)
        except TypeError as e:  # an option the tokenizer does not take
            raise ValueError(f"--tokenizer-option: {a.tokenizer} takes no {', '.join(options)} ({e})") from None
    res = prepare(a.inputs, a.out, corpus=a.corpus, style=a.style, styles_from_folders=a.styles_from_folders,
                  tokenizer=tokenizer, valid_fraction=a.valid_fraction, test_fraction=a.test_fraction,
                  workers=a.workers, progress=not a.quiet, held_out=held_out)
    print(res.summary())
    return 0


def _option(text: str) -> tuple[str, object]:
    """KEY=VALUE with VALUE read as JSON where it is (true, 1.0), else as a string."""
    import json

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--tokenizer-option {text!r}: write KEY=VALUE, such as lookahead=true")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value
