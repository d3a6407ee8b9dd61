"""`SamplingConfig`: how to sample, every setting with its valid range, in one validated dataclass.

What a generation starts from (a primer, an infill, a melody) is not a setting: it is the task
(`cadenza.generation.prompt`).

The command line builds it from flags (made from these declarations), the Python API from keywords
(or a dict / JSON), the web studio from the JSON a client sends; all three go through `validate`,
and the decoding loop takes the validated object whole. `generation.json` records it, so a sample
can be made again from that file alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cadenza.data.keys import parse_key
from cadenza.data.tokenizers.metrical_grid import METERS
from cadenza.settings import SettingError, from_dict, setting, validate

DEFAULT_MAX_TOKENS = 1024


@dataclass
class SamplingConfig:
    style: str | None = setting(None, doc="play in this style (a model with styles; see `cadenza models`)")
    guidance: float = setting(1.0, ge=0, le=20, doc="classifier-free guidance: > 1 (1.5-3 is typical) follows the "
                                                     "style more strongly, 1 is plain conditioned sampling")
    num_samples: int = setting(1, ge=1, le=10_000, doc="pieces to generate")
    max_tokens: int | None = setting(None, ge=1, le=1_000_000, exclusive="length",
                                     doc="new tokens per sample (default 1024)")
    seconds: float | None = setting(None, gt=0, le=3600, exclusive="length", doc="new music per sample, in seconds")
    bars: int | None = setting(None, ge=1, le=2000, exclusive="length", doc="new music per sample, in bars, ending "
                               "at a bar line (a model on the metrical vocabulary)")
    meter: str | None = setting(None, doc="the time signature of a new piece, such as 3/4 or 6/8 (metrical "
                                "vocabulary; default: the model's choice)")
    tempo: float | None = setting(None, ge=30, le=240, doc="quarter notes a minute of a new piece (metrical "
                                  "vocabulary; default: the model's choice)")
    key: str | None = setting(None, doc="the key to play in, such as 'D minor' or 'Eb major' (metrical vocabulary; "
                              "an accompaniment's default is its melody's, an infill's the given music's)")
    programs: str | None = setting(None, doc="the General MIDI programs new notes may play, a list such as "
                                   "0,40,42 (128: drums), or 'any' (default: those the style's pieces use)")
    temperature: float = setting(1.0, gt=0, le=100, doc="< 1 plays safer, > 1 takes more risks")
    top_k: int | None = setting(None, ge=1, doc="sample among the k likeliest tokens only; 1 is greedy")
    top_p: float | None = setting(None, gt=0, le=1, doc="nucleus: sample among the smallest set of tokens whose "
                                                        "probability reaches p")
    seed: int = setting(0, ge=0, lt=2**32, doc="the same seed gives the same MIDI, bit for bit, on the same machine")
    constrained: bool = setting(True, flag="--unconstrained", doc="grammar-constrained decoding: every note that "
                                "starts, ends (off: no grammar mask; the decoder still repairs)")
    max_polyphony: int | None = setting(None, ge=0, le=128, doc="at most this many notes sounding at once "
                                        "(default: the 99th percentile of the style's training data; 0: no limit)")
    max_note_seconds: float | None = setting(None, ge=0, le=3600, doc="release any note held this long (default: the "
                                             "99.9th percentile of note lengths in the training data; 0: no limit)")
    stop_at_eos: bool = setting(True, flag="--no-eos", doc="a piece may end before its length (off: every sample "
                                "runs to its full length)")
    batch_size: int = setting(8, ge=1, le=1024, doc="samples generated together")
    use_cache: bool = setting(True, doc="KV cache (off: every step recomputes its window; the tests' reference)")
    compile: bool = setting(True, flag="--no-compile", doc="decode with the compiled decode step where it applies "
                            "(a float32 transformer on the CPU): built once per model and batch size, tens of "
                            "seconds, then loaded from a disk cache")

    def validate(self) -> SamplingConfig:
        """Check every setting once, before sampling: the decoding loop and its filters trust them."""
        validate(self)
        if sum(x is not None for x in (self.max_tokens, self.seconds, self.bars)) > 1:
            raise SettingError("seconds", "max_tokens and bars are exclusive: give one length")
        if self.meter is not None:
            self.meter_fraction()
        self.program_list()
        if self.key is not None:
            try:
                parse_key(self.key)
            except ValueError as e:
                raise SettingError("key", str(e)) from None
        if self.guidance != 1.0 and self.style is None:
            raise SettingError("guidance", "needs a style to guide towards (--style)")
        return self

    def token_budget(self) -> int:
        """New tokens per sample: max_tokens, or enough for `seconds` of dense music (then it stops
        on time), or the default."""
        if self.max_tokens is not None:
            return self.max_tokens
        if self.seconds is not None:
            return int(self.seconds * 60) + 64
        if self.bars is not None:
            return self.bars * 96 + 64  # a dense chorale bar takes about 50 tokens
        return DEFAULT_MAX_TOKENS

    def meter_fraction(self) -> tuple[int, int] | None:
        """The `meter` setting as (numerator, denominator), checked against the signatures the
        metrical vocabulary has."""
        if self.meter is None:
            return None
        num, _, den = self.meter.partition("/")
        if not (num.isdigit() and den.isdigit()) or (int(num), int(den)) not in METERS:
            raise SettingError("meter", f"must be a time signature such as 4/4, 3/4 or 6/8 (numerator 1-16, "
                               f"denominator 1, 2, 4, 8 or 16), got {self.meter!r}")
        return int(num), int(den)

    def program_list(self) -> list[int] | None:
        """The `programs` setting as a list (None: any program, or not set)."""
        if self.programs is None or self.programs.strip() == "any":
            return None
        try:
            out = sorted({int(x) for x in self.programs.split(",")})
        except ValueError:
            out = []
        if not out or out[0] < 0 or out[-1] > 128:
            raise SettingError("programs", f"must be 'any' or General MIDI programs 0-128, comma-separated, such as "
                               f"0,40, got {self.programs!r}")
        return out

    def key_index(self) -> int | None:
        return None if self.key is None else parse_key(self.key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingConfig:
        return from_dict(cls, d, "sampling").validate()
