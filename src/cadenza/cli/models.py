"""`cadenza models`: the models shipped with cadenza, and their styles."""

from __future__ import annotations

import argparse

from cadenza.cli.common import add_verb


def register(sub) -> argparse.ArgumentParser:
    s = add_verb(sub, "models", "list the models shipped with cadenza and their styles (ready to play)",
                 "List the shipped models, or with --rebuild rebuild the validation (or test) pieces a model's "
                 "card was measured on from music21's corpus, to reproduce its figures with `cadenza evaluate`.")
    s.add_argument("name", nargs="?", help="a shipped model (default: the style model)")
    s.add_argument("--rebuild", choices=("valid", "test"), help="rebuild this split of the model's data")
    s.add_argument("--out", help="--rebuild: the store folder to write")
    s.set_defaults(func=run)
    return s


def run(a: argparse.Namespace) -> int:
    # lazy: it imports torch, which `cadenza --help` and the other verbs must not wait for
    from cadenza.evaluation.pieces import rebuild_store
    from cadenza.models.zoo import DEFAULT, list_models

    if a.rebuild:
        if not a.out:
            raise ValueError("--rebuild needs --out, the store folder to write")
        res = rebuild_store(a.name or DEFAULT, a.rebuild, a.out)
        print(res.summary())
        print(f"\nreproduce the card: cadenza evaluate --checkpoint {a.name or DEFAULT} --data {a.out} "
              f"--split {a.rebuild}")
        return 0
    models = list_models()
    if not models:
        print("no models are shipped with this installation")
        return 0
    for m in models:
        default = " (default)" if m["name"] == DEFAULT else ""
        nll = f", valid NLL {m['valid_loss']:.3f}" if m["valid_loss"] is not None else ""
        print(f"{m['name']}{default}: {(m['parameters'] or 0) / 1e6:.1f}M parameters, step {m['step']}{nll}")
        print(f"  styles: {', '.join(m['styles']) or '-'}")
    print("\nplay one: cadenza generate --style NAME --seconds 30 --render")
    return 0
