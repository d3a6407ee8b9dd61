"""`cadenza serve`: the studio, a local web page to generate, hear, see and continue music."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_verb


def register(sub) -> argparse.ArgumentParser:
    s = add_verb(sub, "serve", "the studio: a web page (and JSON API) to generate, hear and continue music",
                 "Serve the studio on http://127.0.0.1:8000/: pick a model and a style, generate, watch the notes "
                 "arrive, listen, read the score, continue a piece. The API is documented at /docs.")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="also take writes from a page served at ORIGIN (scheme://host:port), such as a "
                        "plugin's own page; repeatable. Other pages' requests get a 403")
    s.add_argument("--runs", help="also offer the models trained in the runs under this folder")
    s.add_argument("--data", help="folder for uploads and the history (default: $CADENZA_CACHE/studio)")
    s.add_argument("--device", default="auto")
    s.add_argument("--jobs", type=int, default=2, help="generations running at once (default 2)")
    s.add_argument("--no-compile", action="store_true",
                   help="do not build the compiled decode step in the background (jobs decode eagerly)")
    s.set_defaults(func=run)
    return s


def run(a: argparse.Namespace) -> int:
    from cadenza.studio.server import serve  # lazy: `cadenza --help` and the other verbs need none of it

    serve(a.host, a.port, a.runs, a.data, a.device, a.jobs, compile=not a.no_compile, origins=a.allow_origin)
    return 0
