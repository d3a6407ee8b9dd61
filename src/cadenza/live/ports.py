"""MIDI ports for a duet: real ones through mido's rtmidi backend (the optional `live` extra), and an
in-memory pair that tests, benchmarks and the studio use in their place.

A port is named as `mido` lists it, or by its number in that list (`cadenza duet --list-ports`).
Every failure is one `PortError` line that says what to do: the backend missing, no MIDI system,
an unknown name.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

BACKEND = "mido.backends.rtmidi"


class PortError(RuntimeError):
    """A MIDI port that cannot be listed or opened; the message says why and what to do."""


def _mido():
    try:
        import mido
        import rtmidi  # noqa: F401  (the backend mido needs for real ports)
    except ImportError:
        raise PortError("real MIDI ports need python-rtmidi: pip install 'cadenza[live]' (the in-memory ports "
                        "need nothing)") from None
    mido.set_backend(BACKEND, load=True)
    return mido


def list_ports() -> dict[str, list[str]]:
    """{"inputs": [...], "outputs": [...]}: the MIDI ports this machine has."""
    mido = _mido()
    try:
        return {"inputs": list(mido.get_input_names()), "outputs": list(mido.get_output_names())}
    except Exception as e:  # rtmidi raises SystemError when there is no MIDI system (no ALSA sequencer)
        raise PortError(f"no MIDI system to list ports from ({str(e).splitlines()[0][:120]}); on Linux the ALSA "
                        "sequencer (/dev/snd/seq) must exist: load snd-seq, or run where a keyboard is attached") \
            from None


def _pick(names: list[str], wanted: str, kind: str) -> str:
    if wanted.isdigit() and int(wanted) < len(names):
        return names[int(wanted)]
    if wanted in names:
        return wanted
    close = [n for n in names if wanted.lower() in n.lower()]
    if len(close) == 1:
        return close[0]
    listed = "; ".join(f"{i}: {n}" for i, n in enumerate(names)) or "none"
    raise PortError(f"no MIDI {kind} port named {wanted!r} (this machine has: {listed}); see cadenza duet --list-ports")


def open_input(name: str, callback: Callable) -> object:
    """The input port `name` (a name, part of one, or a number), calling `callback(message)` for
    each message as it arrives."""
    mido = _mido()
    return mido.open_input(_pick(list_ports()["inputs"], name, "input"), callback=callback)


def open_output(name: str) -> object:
    mido = _mido()
    return mido.open_output(_pick(list_ports()["outputs"], name, "output"))


class MemoryOutput:
    """An output port that keeps what it is sent, with the monotonic time it was sent at, and hands
    it to a listener (the other end of a loopback) when one is set."""

    def __init__(self, listener: Callable | None = None):
        self.sent: list[tuple[float, object]] = []
        self.listener = listener
        self.closed = False
        self._lock = threading.Lock()

    def send(self, message) -> None:
        now = time.monotonic()
        with self._lock:
            self.sent.append((now, message))
        if self.listener is not None:
            self.listener(message)

    def close(self) -> None:
        self.closed = True

    def take(self) -> list[tuple[float, object]]:
        """What was sent since the last take."""
        with self._lock:
            out, self.sent = self.sent, []
        return out


class MemoryInput:
    """An input port a test or the studio plays into (`play`): each message reaches the callback on
    a thread of its own, as a real port's do."""

    def __init__(self, callback: Callable):
        self.callback = callback
        self.closed = False
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="memory-midi-in", daemon=True)
        self._thread.start()

    def play(self, message) -> None:
        self._queue.put(message)

    def _run(self) -> None:
        while True:
            message = self._queue.get()
            if message is None:
                return
            self.callback(message)

    def close(self) -> None:
        self.closed = True
        self._queue.put(None)
        self._thread.join(timeout=5)
