"""Does a model write *to* a melody? Held-out melodies harmonised, measured against the real voices.

For each held-out piece of a style (the valid split's first, then the test split's), its melody
(`anticipation.melody`) is accompanied by the model, as it is and in `variations` (transposed by
some semitones, played some factor slower or faster), and each result is measured (`harmony.fit`:
consonance of the bass under the melody, synchrony, the key of the voices against the melody's)
beside the real piece, and whether the whole result is in the real piece's key (moved with the
melody): a melody alone often sounds in its dominant, so real chorales' voices agree with their
melody's own key only about half the time, while the piece's key is what they are in. Teacher-forced,
`harmony.melody_gain` says how much likelier the real lower voices are with the melody given.
What `benchmarks/bench_accompany.py` runs for the pilots and the model card.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cadenza.data.anticipation import melody
from cadenza.data.keys import transposed
from cadenza.data.meter import Meter
from cadenza.data.midi import Notes
from cadenza.evaluation.features import excerpt, style_features
from cadenza.evaluation.harmony import fit, key_of, melody_gain
from cadenza.generation.generate import sample, sampling_config
from cadenza.generation.prompt import Accompany

CLASSIFIED = 30.0  # seconds of a result the style classifier reads, as it reads the real pieces
MEASURES = ("consonant", "voices_under", "above", "synchrony", "same_key", "piece_key")


@dataclass
class Variation:
    """A melody moved `semitones` and played `factor` times as long (1.2: 20% slower)."""

    semitones: int = 0
    factor: float = 1.0

    @property
    def name(self) -> str:
        return f"{self.semitones:+d} st, x{self.factor:g}"

    def apply(self, notes: Notes) -> Notes:
        m = notes.meter
        meter = None if m is None else Meter(m.tempo_at, tuple(q / self.factor for q in m.qpm), m.signature_at,
                                             m.numerator, m.denominator)
        return Notes.from_arrays(notes.start * self.factor, notes.end * self.factor, notes.pitch + self.semitones,
                                 notes.velocity, notes.programs, meter=meter)


@dataclass
class AccompanyConfig:
    style: str = "bach"
    pieces: int = 32
    variations: list[Variation] = field(default_factory=lambda: [Variation()])
    seed: int = 0
    compile: bool = True
    key: bool = True  # give a vocabulary with KEY tokens the melody's key (else NO_KEY)
    temperature: float = 1.0
    live: bool = False  # answer each melody note where it sounds, as when it is played (no lookahead)


def held_out(store, style: str, count: int) -> list:
    """The first `count` held-out pieces of `style`: the valid split's, then the test split's."""
    return [p for split in ("valid", "test") for p in store.split(split) if p.style == style][:count]


def returned(result: Notes, want: Notes) -> bool:
    """Whether `result` holds exactly the notes of `want` (the melody came back note for note)."""
    a, b = result.by_time(), want.by_time()
    return 0 < len(b) == len(a) and all(np.allclose(getattr(a, f), getattr(b, f), rtol=0, atol=1e-9)
                                        for f in ("start", "end", "pitch", "velocity"))


def accompany_report(checkpoint, store, cfg: AccompanyConfig | None = None, progress=None,
                     classifier=None) -> dict[str, Any]:
    """Every held-out melody accompanied in every variation, measured, beside the real pieces; the
    teacher-forced melody gain of each piece. Means over pieces (and variations), and every row.
    With a `classifier` (a `StyleClassifier`), the style it calls each result and each real piece
    (their first CLASSIFIED seconds), and the share called `cfg.style`."""
    cfg = cfg or AccompanyConfig()
    tok, model = checkpoint.tokenizer, checkpoint.model
    pieces = held_out(store, cfg.style, cfg.pieces)
    rows, real, gains = [], [], []
    for i, p in enumerate(pieces):
        g = store.tokenizer.decode_grid(store[p.index])[0]
        tune = melody(g)
        real_melody = tok.to_grid_notes(g.take(tune))
        piece_key = key_of(tok.to_grid_notes(g))  # the real piece's key, all its voices heard
        real.append({**fit(real_melody, tok.to_grid_notes(g.take(~tune))), "piece_key": 1.0})
        gains.append(melody_gain(model, tok, g, tune, cfg.style, model.config.context))
        for v in cfg.variations:
            given = v.apply(real_melody)
            settings = {"style": cfg.style, "seed": cfg.seed + i, "compile": cfg.compile,
                        "temperature": cfg.temperature}
            task = Accompany(given, live=cfg.live)
            prompt = task if cfg.key else _without_key(tok, task, cfg.style)
            gen = sample(checkpoint, sampling_config(**settings), prompt)
            result, mine = gen.notes[0], gen.given[0]
            moved_key = None if piece_key is None else transposed(piece_key, v.semitones)
            rows.append({"piece": store.manifest["pieces"][p.index].get("origin"), "variation": v.name,
                         "melody_returned": returned(result.take(mine), given), "notes": int((~mine).sum()),
                         **fit(result.take(mine), result.take(~mine)),
                         "piece_key": float(moved_key is not None and key_of(result) == moved_key),
                         **({"called": _called(classifier, result)} if classifier is not None else {})})
        if classifier is not None:
            real[-1]["called"] = _called(classifier, tok.to_grid_notes(g))
        if progress is not None:
            progress(i + 1, len(pieces))
    mean = {key: {k: float(np.nanmean([r[k] for r in rs])) for k in MEASURES} for key, rs in (("generated", rows),
                                                                                              ("real", real))}
    by_variation = {v.name: {k: float(np.nanmean([r[k] for r in rows if r["variation"] == v.name])) for k in MEASURES}
                    for v in cfg.variations}
    gain = {k: float(np.mean([x[k] for x in gains])) for k in ("with_melody", "without_melody", "gain")}
    if classifier is not None:
        for key, rs in (("generated", rows), ("real", real)):
            mean[key]["called_style"] = float(np.mean([r["called"] == cfg.style for r in rs])) if rs else float("nan")
    return {"style": cfg.style, "pieces": len(pieces), "accompaniments": len(rows),
            "melody_returned": int(sum(r["melody_returned"] for r in rows)), **mean, "by_variation": by_variation,
            "melody_gain": gain, "per_piece_gain": gains, "rows": rows,
            "settings": {"seed": cfg.seed, "key": cfg.key, "temperature": cfg.temperature, "live": cfg.live,
                         "variations": [v.name for v in cfg.variations]}}


def _called(classifier, notes: Notes) -> str:
    """The style `classifier` calls the first CLASSIFIED seconds of `notes`."""
    return str(classifier.predict(np.array([style_features(excerpt(notes, 0.0, CLASSIFIED))]))[0])


def _without_key(tok, task: Accompany, style: str | None):
    """The prompt of an accompaniment told no key (a vocabulary with KEY tokens gets NO_KEY)."""
    from cadenza.generation.prompt import Prompt  # lazy: only this path builds the prompt by hand

    prompt = Prompt.encode(tok, task, style)
    if getattr(tok, "has_keys", False):
        at = len(tok.style_prefix(None)) + 1  # after the style and task tokens
        prompt.ids[at] = tok.no_key_id
    return prompt
