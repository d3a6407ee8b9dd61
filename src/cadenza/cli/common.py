"""What every verb's parser shares, and the flags made from a settings dataclass.

A settings field (`cadenza.settings.setting`) declares its default, range or choices and doc once;
`add_settings` turns each field into its flag from that declaration, so no default or help text is
written twice. A flag's dest is its field's name: the verb hands the values given on to the
dataclass, which validates them, and a `SettingError` names the flag the user typed.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from cadenza.settings import describe_range


class VerbParser(argparse.ArgumentParser):
    """A verb's parser that adds the flags of `settings(parser)` when it is first used (to parse or
    to print help): some settings modules import torch, which `cadenza --help` must not wait for."""

    def __init__(self, *args: Any, settings: Callable[[argparse.ArgumentParser], None] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._pending = settings

    def _add_pending(self) -> None:
        if self._pending is not None:
            add, self._pending = self._pending, None
            add(self)

    def parse_known_args(self, args=None, namespace=None):
        self._add_pending()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._add_pending()
        return super().format_help()


def add_verb(sub, name: str, summary: str, description: str | None = None, epilog: str | None = None,
             settings: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.ArgumentParser:
    """A subcommand: `summary` in `cadenza --help`, `description` and the `epilog` examples in its own;
    `settings(parser)` adds the flags made from settings dataclasses, on first use."""
    return sub.add_parser(name, help=summary, description=description or summary, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter, settings=settings)


def flag_of(f: dataclasses.Field) -> str:
    """The flag of a settings field: its declared `flag`, else ``--field-name``."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_settings(parser: argparse.ArgumentParser, cls, title: str, description: str | None = None) -> None:
    """One flag per field of settings dataclass `cls`, in a group of the help titled `title`: type,
    choices and help (the doc, the range, the default) from the field's declaration. A flag left
    out is None, so the dataclass's (or a preset's) value stands. A bool field is ``--name`` /
    ``--no-name``, or its declared flag alone, which sets the opposite of the default."""
    group = parser.add_argument_group(title, description)
    exclusive: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if meta.get("exclusive") and meta["exclusive"] not in exclusive:
            exclusive[meta["exclusive"]] = group.add_mutually_exclusive_group()
        target = exclusive[meta["exclusive"]] if meta.get("exclusive") else group
        target.add_argument(flag_of(f), dest=f.name, default=None, **_argument(f))


def settings_of(args: argparse.Namespace, cls) -> dict[str, Any]:
    """The fields of `cls` given on the command line (`add_settings` flags that were not left out)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if getattr(args, f.name) is not None}


def _argument(f: dataclasses.Field) -> dict[str, Any]:
    """add_argument's keywords for field `f` (all but its flag, dest and default)."""
    meta, kind = f.metadata, _kind(f)
    doc = meta.get("doc", "")
    if kind is bool:
        if meta.get("flag"):  # a flag that turns the default around: --no-eos, --unconstrained
            turns = f"turns {'off' if f.default else 'on'} ({'on' if f.default else 'off'} by default): "
            return {"action": "store_const", "const": not f.default, "help": _escape(turns + doc)}
        return {"action": argparse.BooleanOptionalAction,
                "help": _help(doc, [f"{'on' if f.default else 'off'} by default"])}
    notes = [] if meta.get("choices") else [describe_range(meta)]
    if f.default is not None and f.default is not dataclasses.MISSING:
        notes.append(f"default {f.default}")
    return {"type": kind, "choices": meta.get("choices"), "metavar": {int: "N", float: "X"}.get(kind),
            "help": _help(doc, notes)}


def _help(doc: str, notes: list[str]) -> str:
    """The doc, then the notes (range, default) in its closing parenthesis or a new one."""
    notes = [n for n in notes if n]
    if not notes:
        return _escape(doc)
    if doc.endswith(")"):
        return _escape(f"{doc[:-1]}; {'; '.join(notes)})")
    return _escape(f"{doc} ({'; '.join(notes)})" if doc else "; ".join(notes))


def _kind(f: dataclasses.Field) -> type:
    """bool, int, float or str, from the field's annotation (a string under `from __future__ import annotations`)."""
    annotation = f.type.__name__ if isinstance(f.type, type) else str(f.type)
    names = {t.strip() for t in annotation.split("|")}
    for kind in (bool, int, float):
        if kind.__name__ in names:
            return kind
    return str


def _escape(text: str) -> str:
    return text.replace("%", "%%")  # argparse formats help with %
