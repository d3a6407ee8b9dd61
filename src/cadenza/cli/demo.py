"""`cadenza demo`: the whole pipeline on the Bach chorales, offline."""

from __future__ import annotations

import argparse
from pathlib import Path

from cadenza.cli.common import add_verb


def register(sub) -> argparse.ArgumentParser:
    s = add_verb(sub, "demo", "the whole pipeline on the Bach chorales, offline")
    s.add_argument("--out", default="runs/demo", help="folder for everything the demo writes")
    s.add_argument("--minutes", type=float, default=4.0, help="training time budget")
    s.set_defaults(func=run)
    return s


def run(a: argparse.Namespace) -> int:
    # lazy: the demo trains and generates with torch, which `cadenza --help` must not wait for
    from cadenza.demo import run_demo

    return run_demo(out=Path(a.out), minutes=a.minutes)
