"""How a worker tells one run's code to stop at its next journaled call: the heartbeat found the
lease taken (another worker or a person) or could not renew it in time, or the worker is shutting
down. It also knows how long the lease runs, so a write may wait out a held lock (or a server that
is away) that long."""

from __future__ import annotations

import threading

from ..states import Reason, RunStatus
from ..store import EnvironmentStop, FenceRefused
from .outcomes import Suspend


class RunControl:
    def __init__(self, lease_until: float = float("inf")) -> None:
        self._event = threading.Event()
        self._error: BaseException | None = None
        self.lease_until = lease_until  # the latest renewal this process knows of (its heartbeat's or a commit's)

    def renewed(self, until: float) -> None:
        self.lease_until = max(self.lease_until, until)

    def lost(self, run_id: str, why: str = "the heartbeat was refused; another lease or a person took it") -> None:
        self._error = FenceRefused(f"run {run_id}: {why}")
        self._event.set()

    def lapsed(self, run_id: str, why: str, kind: str) -> None:
        """The lease could not be renewed before it ends (the database busy, or its server away: `kind`): the
        run stops as one the environment held up (the worker drops it; the next claim repeats its step)."""
        self._error = EnvironmentStop(kind, f"run {run_id}: {why}")
        self._event.set()

    @property
    def holding(self) -> bool:
        """Whether the run goes on: no stop was asked for (a write stops waiting out the environment then)."""
        return self._error is None

    def release(self, message: str) -> None:
        self._error = Suspend(RunStatus.QUEUED, Reason.RESUMED, message)
        self._event.set()

    def check(self) -> None:
        """Raise at a journaled call if the run must stop."""
        if self._error is not None:
            raise self._error

    def pause(self, seconds: float) -> None:
        """A back-off that a stop cuts short."""
        self._event.wait(seconds)
        self.check()
