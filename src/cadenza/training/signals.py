"""SIGINT / SIGTERM ask the training loop to save and stop at the end of the current step."""

from __future__ import annotations

import signal
import sys


class StopRequest:
    """A context that turns the first Ctrl-C (or SIGTERM) into a request; a second one means now."""

    def __init__(self):
        self.requested = False
        self.signum: int | None = None
        self._old = {}

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. a notebook worker): no handler
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum
        print(f"\n{signal.Signals(signum).name}: saving a checkpoint and stopping", file=sys.stderr)

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
