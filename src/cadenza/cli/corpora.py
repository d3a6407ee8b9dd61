"""`cadenza corpora`: the built-in corpora (music21's bundled scores, no download)."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_verb


def register(sub) -> argparse.ArgumentParser:
    s = add_verb(sub, "corpora", "list the built-in corpora (no download needed)")
    s.set_defaults(func=run)
    return s


def run(a: argparse.Namespace) -> int:
    # lazy: it imports numpy, which `cadenza --help` and the other verbs must not wait for
    from cadenza.data.corpora import list_corpora

    for c in list_corpora():
        print(f"{c.name:<12} {c.description}")
    return 0
