"""The duet engine: a player plays, pauses, and the model answers, in real time.

Played notes are timestamped on the monotonic clock as they arrive (`feed`, from a port's thread).
When nothing sounds and `wait` seconds have passed since the last note ended, the model answers,
continuing the music so far. It starts writing the moment nothing sounds, speculatively: a note
played within the pause drops that answer unheard, and otherwise its first note is ready when the
pause ends, so the wait is the player's, not the model's. The recent past (the last `context`
seconds, the player's notes and its own earlier answers, as a sliding window, so an hour of play
costs what a minute does) is its primer, and it writes `reply` seconds. Notes are scheduled as
they are decoded, so the answer sounds while the rest is still being written, on the model's timing
from its first note. A note played during an answer cuts it: what is still to come is dropped, what
sounds is ended, and the engine listens again.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from cadenza.data.midi import Notes
from cadenza.generation import compiled
from cadenza.generation.generate import sample, sampling_config
from cadenza.generation.prompt import Continue, Prompt
from cadenza.generation.sampler import warm_window_slide
from cadenza.live import ports as midi
from cadenza.live.config import DuetConfig
from cadenza.live.scheduler import Scheduler
from cadenza.settings import validate

LEAD = 0.005  # seconds between a first note being decoded and its moment: the message's own way out


@dataclass
class Stats:
    """What a duet measured: each answer's latency (from the end of the pause to its first note,
    seconds), the answers cut in on, the notes played and answered."""

    latency: list[float] = field(default_factory=list)
    answers: int = 0
    cut: int = 0
    played: int = 0
    answered_notes: int = 0
    generation_seconds: list[float] = field(default_factory=list)


class _CutIn(Exception):
    """Raised inside the sampler's callback: the player played on, the answer stops."""


class Duet:
    """One duet: a loaded checkpoint, an output port, the settings. `feed` takes what the player
    plays; `run` listens and answers until `stop` is set; `close` silences everything."""

    def __init__(self, checkpoint, output, cfg: DuetConfig | None = None):
        self.cfg = validate(cfg or DuetConfig())
        if self.cfg.mode == "accompany":
            raise ValueError(f"accompany mode answers each played note where it sounds, which needs a model on the "
                             f"metrical vocabulary trained to write voices under a melody as it is played; this "
                             f"model is on {checkpoint.tokenizer.name}: use --mode answer")
        self.checkpoint, self.output = checkpoint, output
        self._warm_up()
        self.scheduler = Scheduler(output, self.cfg.channel)
        self.stats = Stats()
        self._lock = threading.Lock()
        self._open: dict[int, tuple[float, int]] = {}  # pitch -> (onset, velocity) of notes sounding
        self._past: collections.deque = collections.deque()  # (start, end, pitch, velocity) played or answered
        self._last = 0.0  # monotonic time of the last note event played
        self._unanswered = False
        self._pause = 0.0  # when the pause the current answer waits for ends
        self._cut_at = 0.0
        self._cancel = threading.Event()
        self._worker: threading.Thread | None = None
        self.stop = threading.Event()
        if self.cfg.program is not None:
            import mido  # lazy: the live stage's own dependency

            output.send(mido.Message("program_change", channel=self.cfg.channel, program=self.cfg.program))

    def _settings(self, seed: int, seconds: float):
        """How an answer is sampled: one sample of `seconds`, never ended early by the model."""
        c = self.cfg
        return sampling_config(num_samples=1, seconds=seconds, style=c.style, temperature=c.temperature,
                               guidance=c.guidance, seed=seed, compile=c.compile, stop_at_eos=False)

    def _warm_up(self) -> None:
        """Before the first note: the compiled decode step built (or loaded), the eager model's
        first window slide made and a short answer written, so no answer waits for any of them."""
        model, rows = self.checkpoint.model, 2 if self.cfg.guidance != 1.0 else 1
        if self.cfg.compile:
            compiled.decoder(model, rows, build_missing=True)
        warm_window_slide(model, rows, keep=len(self.checkpoint.tokenizer.window_prefix(None)))
        scale = Notes.from_arrays(np.arange(8) * 0.25, np.arange(1, 9) * 0.25, 60 + np.arange(8), np.full(8, 80))
        sample(self.checkpoint, self._settings(0, 1.0), Continue(scale))

    # ---- what the player plays ---------------------------------------------------------------
    def feed(self, message, at: float | None = None) -> None:
        """Take one message the player played (at monotonic time `at`, default now)."""
        at = time.monotonic() if at is None else at
        if message.type not in ("note_on", "note_off"):
            return
        with self._lock:
            if message.type == "note_on" and message.velocity > 0:
                if self._replying():
                    self._cut(at, heard=at >= self._pause)
                self._open[message.note] = (at, message.velocity)
                self.stats.played += 1
            elif message.note in self._open:
                start, velocity = self._open.pop(message.note)
                self._remember(start, at, message.note, velocity)
            self._last, self._unanswered = at, True

    def _remember(self, start: float, end: float, pitch: int, velocity: int) -> None:
        self._past.append((start, max(end, start + 1e-3), pitch, velocity))
        while self._past and self._past[0][1] < end - self.cfg.context:  # the window slides
            self._past.popleft()

    # ---- listening and answering ---------------------------------------------------------------
    def run(self) -> None:
        """Listen, and answer each phrase once the player pauses, until `stop` is set."""
        try:
            while not self.stop.wait(0.002):
                with self._lock:  # started under the lock: a note played now cancels this answer
                    if self._unanswered and not self._open and not self._replying():
                        self._unanswered = False
                        self._pause = self._last + self.cfg.wait
                        self._cancel.clear()
                        self._worker = threading.Thread(target=self._answer, args=(self._pause, list(self._past)),
                                                        name="duet-answer", daemon=True)
                        self._worker.start()
        finally:
            self.close()

    def _replying(self) -> bool:
        return (self._worker is not None and self._worker.is_alive()) or self.scheduler.pending() > 0

    def _cut(self, at: float, heard: bool = True) -> None:
        """The player plays on: the answer stops (its notes so far stay in the past, ended now). An
        answer not yet `heard` (the pause had not ended) is dropped without a trace."""
        self._cancel.set()
        self.scheduler.silence()
        self.stats.cut += heard
        self._cut_at = at
        self._past = collections.deque((s, min(e, at), p, v) for s, e, p, v in self._past if s < at)

    def _answer(self, pause: float, past: list) -> None:
        origin = pause - self.cfg.context
        rows = np.array([(s - origin, e - origin, p, v) for s, e, p, v in past if e > origin]).reshape(-1, 4)
        primer = Notes.from_arrays(np.maximum(rows[:, 0], 0), rows[:, 1], rows[:, 2], rows[:, 3]) if len(rows) \
            else None
        k = self.stats.answers
        cfg = self._settings(self.cfg.seed + k, self.cfg.reply)
        prompt = Prompt.encode(self.checkpoint.tokenizer, Continue(primer), cfg.style, cfg)
        timing = _Timing(self, prompt, pause)
        t0 = time.monotonic()
        try:
            sample(self.checkpoint, cfg, prompt, on_tokens=timing, build_compiled=False)
        except _CutIn:
            pass
        seconds = time.monotonic() - t0
        self._cancel.wait(max(0.0, pause - time.monotonic()))  # written within the pause: heard once it ends
        timing.heard()
        if timing.counted:
            self.stats.generation_seconds.append(seconds)

    def close(self) -> None:
        """Every note ended, all-notes-off sent, the answer stopped."""
        self.stop.set()
        self._cancel.set()
        if self._worker is not None:
            self._worker.join(timeout=10)
        self.scheduler.close()


class _Timing:
    """The sampler's callback for one answer: cut when the player plays on, else schedule each note
    as soon as it is decoded, the first when the pause ends (at once if it has), the rest on the
    model's timing after it."""

    def __init__(self, duet: Duet, prompt: Prompt, pause: float):
        self.duet, self.prompt, self.pause = duet, prompt, pause
        self.pad = prompt.tokenizer.pad_id
        self.first: tuple[float, float] | None = None  # (model time, monotonic time) of the first note
        self.done = 0
        self.counted = False

    def heard(self) -> None:
        """Count the answer, and its latency, once its pause has ended with no note played in it."""
        duet = self.duet
        with duet._lock:
            if self.counted or time.monotonic() < self.pause or (duet._cancel.is_set() and duet._cut_at < self.pause):
                return
            self.counted = True
            duet.stats.answers += 1
            if self.first is not None:
                duet.stats.latency.append(self.first[1] - self.pause)

    def __call__(self, first: int, tokens) -> None:
        duet = self.duet
        if duet._cancel.is_set():
            raise _CutIn
        self.heard()
        notes = self.prompt.notes_of([t for t in tokens[0].tolist() if t != self.pad])
        new = notes.take(~self.prompt.given_of(notes)).by_time()
        if len(new) <= self.done:
            return
        with duet._lock:
            if duet._cancel.is_set():
                raise _CutIn
            for i in range(self.done, len(new)):
                if self.first is None:  # at the pause's end, or at once if it is over
                    self.first = (float(new.start[i]), max(self.pause, time.monotonic() + LEAD))
                model, wall = self.first
                start, end = wall + new.start[i] - model, wall + new.end[i] - model
                duet.scheduler.play(start, end, int(new.pitch[i]), int(new.velocity[i]))
                duet._remember(start, end, int(new.pitch[i]), int(new.velocity[i]))
                duet.stats.answered_notes += 1
            self.done = len(new)


def duet(inport: str = "0", outport: str = "0", checkpoint=None, *, device: str = "cpu", **settings) -> Stats:
    """Play with a model through MIDI ports, `inport` and `outport` by name or number
    (`ports.list_ports`), until Ctrl-C. `settings`: `DuetConfig` fields. Returns what the duet
    measured. (Tests and the studio drive a `Duet` with in-memory ports instead.)"""
    from cadenza.generation.generate import open_checkpoint  # lazy: loading a model is the slow part

    cfg = validate(DuetConfig(**settings))
    output = midi.open_output(outport)
    try:
        d = Duet(open_checkpoint(checkpoint, sampling_config(compile=cfg.compile), device), output, cfg)
        source = midi.open_input(inport, callback=d.feed)
        try:
            d.run()
        except KeyboardInterrupt:
            pass
        finally:
            d.close()
            source.close()
    finally:
        output.close()
    return d.stats
