"""Notes sent on time: a thread that sends each MIDI message at its moment on the monotonic clock,
and never leaves a note hanging.

Generation runs ahead of playback and hands notes over as they are decoded (`play`); this thread
sleeps until the next one is due, then sends it. Every note-on it sends is remembered until its
note-off is sent, so `silence` (a player cutting in, Ctrl-C, an error, the end) drops what is
still to come and ends exactly the notes that sound, then sends all-notes-off as a last resort.
How late each message went out is kept (`lateness`): the jitter a benchmark reports.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

SPIN = 0.002  # seconds before a message is due when the thread stops sleeping and waits actively


class Scheduler:
    def __init__(self, port, channel: int = 0):
        self.port, self.channel = port, channel
        self._heap: list = []
        self._order = itertools.count()
        self._sounding: dict[int, int] = {}  # pitch -> how many of its note-ons are not yet ended
        self._cv = threading.Condition()
        self._stopped = False
        self.lateness: list[float] = []  # seconds each message went out after its moment
        self.sent_on = 0
        self.sent_off = 0
        self._thread = threading.Thread(target=self._run, name="duet-scheduler", daemon=True)
        self._thread.start()

    def play(self, start: float, end: float, pitch: int, velocity: int) -> None:
        """Send a note-on at monotonic time `start` and its note-off at `end`."""
        with self._cv:
            heapq.heappush(self._heap, (start, next(self._order), "on", pitch, velocity))
            heapq.heappush(self._heap, (max(end, start + 1e-3), next(self._order), "off", pitch, 0))
            self._cv.notify()

    def pending(self) -> int:
        with self._cv:
            return len(self._heap)

    def sounding(self) -> int:
        with self._cv:
            return sum(self._sounding.values())

    def silence(self) -> None:
        """Drop every message still to come and end every note that sounds, now."""
        with self._cv:
            self._heap.clear()
            for pitch, n in list(self._sounding.items()):
                for _ in range(n):
                    self._send("off", pitch, 0)
            self._sounding.clear()
            self._cv.notify()

    def close(self) -> None:
        """Silence, all-notes-off on the channel, and stop the thread."""
        self.silence()
        with self._cv:
            self._stopped = True
            self._cv.notify()
        self._thread.join(timeout=5)
        self._send_control(123)  # all notes off: a last resort for a synthesizer that missed a message

    # ---- the thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and not self._heap:
                    self._cv.wait()
                if self._stopped:
                    return
                due = self._heap[0][0]
                wait = due - time.monotonic()
                if wait > SPIN:
                    self._cv.wait(timeout=wait - SPIN)  # woken early by a new note or a silence
                    continue
            while time.monotonic() < due:  # the last moments: no sleep, whose wake-up comes late
                pass
            with self._cv:
                if not self._heap or self._heap[0][0] != due:
                    continue  # silenced (or an earlier note came) meanwhile
                at, _, kind, pitch, velocity = heapq.heappop(self._heap)
                if kind == "off" and not self._sounding.get(pitch):
                    continue  # its note-on was dropped by a silence
                self._send(kind, pitch, velocity)
                self.lateness.append(time.monotonic() - at)

    def _send(self, kind: str, pitch: int, velocity: int) -> None:
        import mido  # lazy: a dependency of cadenza, imported by the live stage only

        if kind == "on":
            self._sounding[pitch] = self._sounding.get(pitch, 0) + 1
            self.sent_on += 1
            self.port.send(mido.Message("note_on", channel=self.channel, note=pitch, velocity=max(1, velocity)))
        else:
            self._sounding[pitch] = self._sounding.get(pitch, 0) - 1
            if not self._sounding[pitch]:
                del self._sounding[pitch]
            self.sent_off += 1
            self.port.send(mido.Message("note_off", channel=self.channel, note=pitch, velocity=0))

    def _send_control(self, control: int) -> None:
        import mido  # lazy: as in _send

        self.port.send(mido.Message("control_change", channel=self.channel, control=control, value=0))
