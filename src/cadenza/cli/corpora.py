"""`cadenza corpora`: the built-in corpora (music21's bundled scores, no download)."""

from __future__ import annotations

import argparse


def register(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("corpora", help="list the built-in corpora (no download needed)")
    s.set_defaults(func=run)
    return s


def run(a: argparse.Namespace) -> int:
    from cadenza.data.corpora import list_corpora

    for c in list_corpora():
        print(f"{c.name:<12} {c.description}")
    return 0
