"""What every verb's parser shares."""

from __future__ import annotations

import argparse


def add_verb(sub, name: str, summary: str, description: str | None = None,
             epilog: str | None = None) -> argparse.ArgumentParser:
    """A subcommand: `summary` in `cadenza --help`, `description` and the `epilog` examples in its own."""
    return sub.add_parser(name, help=summary, description=description or summary, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
