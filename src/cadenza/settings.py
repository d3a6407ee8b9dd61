"""What every settings dataclass shares: declared ranges, one validator, one kind of error.

A field declares its range where it is defined::

    top_p: float | None = setting(None, gt=0, le=1, doc="nucleus sampling: keep the smallest set ...")

and `validate(obj)` checks every field of a dataclass against its declaration, raising
`SettingError` with the field's name, its valid range and the value given (``top_p must be in
(0, 1], got 1.5``). The command line makes each field's flag from the same declaration (its doc,
default and range; `flag` where the flag is not the field's name) and names that flag in the error;
the web studio answers a 422 on the field. Each default, range and doc is written once, here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any


class SettingError(ValueError):
    """A setting outside its valid range; `field` names it, the message says the range."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.reason = message
        super().__init__(f"{field} {message}")


def setting(default: Any = None, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
            lt: float | None = None, choices: Iterable[Any] | None = None, doc: str = "",
            factory: Any = None, flag: str | None = None, exclusive: str | None = None) -> Any:
    """A dataclass field with its valid range (inclusive `ge`/`le`, exclusive `gt`/`lt`) or choices.

    `doc` is its help everywhere (flags, the studio's settings). `flag` names a command-line flag
    other than ``--field-name`` (for a bool that defaults on: the flag that turns it off, such as
    ``--no-eos``); fields with the same `exclusive` name are mutually exclusive flags.
    """
    meta = {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": tuple(choices) if choices else None, "doc": doc,
            "flag": flag, "exclusive": exclusive}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def describe_range(meta: dict) -> str:
    """'in (0, 1]', '>= 1', 'one of fp32, bf16': the words a message uses for a declared range."""
    if meta.get("choices"):
        return "one of " + ", ".join(map(str, meta["choices"]))
    lo = (f"({_num(meta['gt'])}" if meta.get("gt") is not None else f"[{_num(meta['ge'])}"
          if meta.get("ge") is not None else None)
    hi = (f"{_num(meta['lt'])})" if meta.get("lt") is not None else f"{_num(meta['le'])}]"
          if meta.get("le") is not None else None)
    if lo and hi:
        return f"in {lo}, {hi}"
    if lo:
        return (">= " if lo[0] == "[" else "> ") + lo[1:]
    if hi:
        return ("<= " if hi[-1] == "]" else "< ") + hi[:-1]
    return ""


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def check_value(name: str, value: Any, meta: dict) -> None:
    """Raise `SettingError` if `value` is outside the range `meta` declares (None always passes)."""
    if value is None or not meta:
        return
    choices = meta.get("choices")
    if choices:
        if value not in choices:
            raise SettingError(name, f"must be {describe_range(meta)}, got {value!r}")
        return
    if not any(meta.get(k) is not None for k in ("ge", "gt", "le", "lt")):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SettingError(name, f"must be a number {describe_range(meta)}, got {value!r}")
    bad = (not math.isfinite(value) or (meta.get("ge") is not None and value < meta["ge"])
           or (meta.get("gt") is not None and value <= meta["gt"])
           or (meta.get("le") is not None and value > meta["le"])
           or (meta.get("lt") is not None and value >= meta["lt"]))
    if bad:
        raise SettingError(name, f"must be {describe_range(meta)}, got {value!r}")


def _is_int(f: dataclasses.Field) -> bool:
    return f.type in ("int", int, "int | None")


def validate(obj: Any) -> Any:
    """Check every field of dataclass `obj` against its declared range; returns `obj`."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if _is_int(f) and isinstance(value, float):  # 2.5 samples: not a count
            raise SettingError(f.name, f"must be a whole number {describe_range(dict(f.metadata))}, got {value!r}")
        check_value(f.name, value, dict(f.metadata))
    return obj


def coerce_ints(obj: Any) -> Any:
    """Whole floats in int fields become ints (``max_steps=1e3`` from TOML or JSON is a common slip)."""
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if _is_int(f) and isinstance(v, float) and v.is_integer():
            setattr(obj, f.name, int(v))
    return obj


def from_dict(cls, d: dict[str, Any], what: str | None = None):
    """Build dataclass `cls` from a dict, naming unknown keys (a typo must not pass silently)."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise SettingError(unknown[0], f"is not a {what or cls.__name__} setting (known: {', '.join(sorted(known))})")
    return coerce_ints(cls(**d))
