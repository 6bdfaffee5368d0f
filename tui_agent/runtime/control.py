"""How a worker tells one run's code to stop at its next journaled call: the heartbeat found the
lease taken (another worker or a person), or the worker is shutting down."""

from __future__ import annotations

import threading

from ..store import FenceRefused
from .outcomes import Suspend


class RunControl:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._error: BaseException | None = None

    def lost(self, run_id: str) -> None:
        self._error = FenceRefused(f"run {run_id}: the heartbeat was refused; another lease or a person took it")
        self._event.set()

    def release(self, message: str) -> None:
        self._error = Suspend("queued", "resumed", message)
        self._event.set()

    def check(self) -> None:
        """Raise at a journaled call if the run must stop."""
        if self._error is not None:
            raise self._error

    def pause(self, seconds: float) -> None:
        """A back-off that a stop cuts short."""
        self._event.wait(seconds)
        self.check()
