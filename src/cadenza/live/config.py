"""`DuetConfig`: how a model plays with you, every setting with its range (`cadenza duet`'s flags)."""

from __future__ import annotations

from dataclasses import dataclass

from cadenza.settings import setting


@dataclass
class DuetConfig:
    """How the model plays with you (`cadenza duet`'s flags)."""

    mode: str = setting("answer", choices=("answer", "accompany"), doc="answer: the model continues your phrase "
                        "when you pause; accompany: voices under what you play, as you play it")
    wait: float = setting(0.4, gt=0, le=10, doc="seconds of silence that end your phrase")
    reply: float = setting(4.0, gt=0, le=60, doc="seconds of music in each answer")
    context: float = setting(20.0, gt=0, le=120, doc="seconds of the recent past the model hears")
    style: str | None = setting(None, doc="the style the model answers in (see `cadenza models`)")
    temperature: float = setting(1.0, gt=0, le=100, doc="< 1 plays safer, > 1 takes more risks")
    guidance: float = setting(1.0, ge=0, le=20, doc="classifier-free guidance towards the style")
    channel: int = setting(0, ge=0, le=15, doc="the MIDI channel the model plays on")
    program: int | None = setting(None, ge=0, le=127, doc="the General MIDI program the model plays (sent once "
                                  "at the start)")
    seed: int = setting(0, ge=0, lt=2**32, doc="answer k is drawn with seed + k")
    compile: bool = setting(True, doc="decode with the compiled step (built once, at the start)")
