"""Free samples asked for a length: do they last it, how do they end, which instruments do they use?

For each style, `samples` pieces asked for `bars` (a vocabulary with bars) or `seconds`, with EOS
on (the model may end a piece, the grammar no earlier than the length asked for), are measured:

* **lasted**: the music written (the token clock, to its last bar line) is the length asked for,
  within one bar (4 beats at 120 qpm, 2 s, for a vocabulary without bars);
* **ends on the tonic**: the lowest note starting at the last onset is the tonic of the sample's
  Krumhansl-Kessler key (a cadence's usual last chord, a folk tune's usual last note); the real
  held-out pieces of the style give the share to compare with;
* **instruments**: the share of samples, and of notes, on a program none of the style's pieces use;
* **long notes**: the share of notes longer than the style's real 99.9th percentile.

What `benchmarks/bench_lengths.py` runs for the model card.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cadenza.data.midi import DRUMS, Notes
from cadenza.evaluation.harmony import key_of
from cadenza.generation.generate import sample, sampling_config

NO_BAR_SECONDS = 2.0  # one bar of 4/4 at 120 qpm: the tolerance of a vocabulary without bars


@dataclass
class LengthsConfig:
    samples: int = 32
    bars: int | None = 8
    seconds: float | None = 20.0
    guidance: float = 1.0
    seed: int = 0
    compile: bool = True


def final_bass(notes: Notes) -> int | None:
    """The lowest pitch starting at the last onset of `notes` (drums aside), or None for none."""
    pitched = notes.take(notes.programs != DRUMS)
    if not len(pitched):
        return None
    last = pitched.start.max()
    return int(pitched.pitch[np.abs(pitched.start - last) < 1e-6].min())


def ends_on_tonic(notes: Notes) -> bool | None:
    """Whether the last onset's lowest note is the tonic of the piece's key (None: no key)."""
    key, bass = key_of(notes), final_bass(notes)
    return None if key is None or bass is None else bass % 12 == key % 12


def _share(flags) -> float:
    kept = [bool(f) for f in flags if f is not None]
    return float(np.mean(kept)) if kept else float("nan")


def real_report(store, style: str, split: str = "valid", programs: list[int] | None = None) -> dict[str, Any]:
    """The style's pieces in the store: of the held-out split the share ending on the tonic and the
    99.9th percentile of note durations (seconds); their programs, `programs` where given (a
    checkpoint records its training pieces', `meta["programs"]`), else read from every split."""
    tok = store.tokenizer
    mine = [p for p in store.pieces if p.style == style]
    held = [tok.to_notes(store[p.index]) for p in mine if p.split == split]
    if programs is None:
        programs = sorted({int(x) for p in mine for x in np.unique(tok.to_notes(store[p.index]).programs)})
    durations = np.concatenate([n.end - n.start for n in held]) if held else np.zeros(0)
    return {"pieces": len(held), "programs": programs, "ends_on_tonic": _share(ends_on_tonic(n) for n in held),
            "p999_seconds": float(np.percentile(durations, 99.9)) if durations.size else float("nan")}


def sample_rows(checkpoint, style: str | None, cfg: LengthsConfig, unit: str) -> list[dict[str, Any]]:
    """`cfg.samples` pieces of `style` asked for `cfg.bars` (`unit` "bars") or `cfg.seconds`, each
    described: length written, asked, whether it lasted, its ending, its programs and durations."""
    tok = checkpoint.tokenizer
    asked = {"bars": cfg.bars} if unit == "bars" else {"seconds": cfg.seconds}
    settings = sampling_config(style=style, num_samples=cfg.samples, batch_size=min(cfg.samples, 16), seed=cfg.seed,
                               guidance=cfg.guidance if style else 1.0, compile=cfg.compile, **asked)
    g = sample(checkpoint, settings)
    rows = []
    for ids, stats, notes in zip(g.ids, g.stats, g.notes):
        bar = _bar_seconds(notes)
        if unit == "bars":
            written = ids.count(tok.bar_id) - 1  # each bar opens with BAR; the last line closes the last
            lasted = abs(written - cfg.bars) <= 1
        else:
            written = float(stats["seconds"])
            lasted = abs(written - cfg.seconds) <= bar + 1e-6
        programs, counts = np.unique(notes.programs, return_counts=True)
        rows.append({"written": written, "lasted": lasted, "ends_on_tonic": ends_on_tonic(notes),
                     "notes_by_program": {int(p): int(c) for p, c in zip(programs, counts)},
                     "durations": (notes.end - notes.start).tolist()})
    return rows


def _bar_seconds(notes: Notes) -> float:
    """The length of the last bar of `notes` in seconds (NO_BAR_SECONDS without a meter)."""
    m = notes.meter
    if m is None or not len(notes):
        return NO_BAR_SECONDS
    starts = m.bar_starts(float(m.quarters(notes.end.max())) + 1e-6)
    q = starts[-1] - starts[-2] if starts.size >= 2 else 4.0
    return float(m.seconds(starts[-1]) - m.seconds(starts[-1] - q))


def style_report(rows: list[dict], real: dict[str, Any]) -> dict[str, Any]:
    """The measures of one style's samples (`sample_rows`) beside its real pieces (`real_report`)."""
    allowed = set(real["programs"])
    durations = np.concatenate([np.asarray(r["durations"]) for r in rows]) if rows else np.zeros(0)
    foreign = sum(c for r in rows for p, c in r["notes_by_program"].items() if p not in allowed)
    written = [r["written"] for r in rows]
    return {"samples": len(rows), "lasted": _share(r["lasted"] for r in rows),
            "written_min": min(written, default=float("nan")), "written_max": max(written, default=float("nan")),
            "ends_on_tonic": _share(r["ends_on_tonic"] for r in rows), "real_ends_on_tonic": real["ends_on_tonic"],
            "foreign_program_samples": _share(not set(r["notes_by_program"]) <= allowed for r in rows),
            "foreign_program_notes": foreign / max(durations.size, 1),
            "programs_used": sorted({p for r in rows for p in r["notes_by_program"]}),
            "programs_real": real["programs"], "notes": int(durations.size),
            "longer_than_real_p999": float(np.mean(durations > real["p999_seconds"])) if durations.size else 0.0}
