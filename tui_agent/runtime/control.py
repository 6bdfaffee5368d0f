"""How a worker tells one run's code to stop at its next journaled call, and gives up a run stuck inside one.

The code is told to stop when the heartbeat finds the lease taken or cannot renew it in time, or the worker
shuts down; `RunControl` also knows how long the lease runs, so a write may wait out a held lock that long.
The call in flight (`in_flight`) is set and cleared by the run's own thread and read by runtime/deadlines.py.
Why: docs/architecture.md, section 7 (Workers), "Deadlines"."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import NamedTuple

from ..states import Reason, RunStatus
from ..store import Claim, EnvironmentStop, FenceRefused
from .budget import BudgetMeter
from .outcomes import Suspend
from .retry import Retry


class InFlight(NamedTuple):
    """The call a run's thread is inside: what the deadline watcher needs to hand the run on without that thread.

    Made with `InFlight._make` on the step path, a tuple with no Python-level constructor to run. The budget and
    the time of the run's last entry do not change while the call runs. Between two calls the thread is in the
    agent's own code: then `name` is OWN_CODE, the deadline none, and `wall_used` fixed when the tuple was made.
    """

    deadline: float            # the call's own deadline (inf: none; then only the run's wall_s budget bounds it)
    budget: BudgetMeter
    last_at: float             # when the run's last entry was committed
    after_failure: Callable[[Exception, int], Retry]   # the retry policy's word on a failed attempt
    position: int
    name: str
    attempts: int              # the call's attempts before this one, all committed
    timeout_s: float | None
    effect: int | None         # an effect's row id, when the call is its `do`
    wall_used: float | None = None   # the run's wall_s used before `last_at` (None: the budget's, unchanging)

    @property
    def what(self) -> str:
        if self.name == OWN_CODE:
            return "the agent's own code, between its journaled calls"
        return f"{'effect' if self.effect is not None else 'step'} {self.name!r}"

    @property
    def used(self) -> float:
        """The run's wall_s used before `last_at`."""
        return self.budget.used["wall_s"] if self.wall_used is None else self.wall_used

    @property
    def wall_end(self) -> float:
        """When the run's wall_s budget runs out (inf: no ceiling)."""
        cap = self.budget._wall_cap
        return float("inf") if cap is None else self.last_at + cap - self.used


OWN_CODE = ""   # InFlight.name of the agent's own code between calls (a journaled call's name is never empty)


class RunControl:
    def __init__(self, lease_until: float = float("inf"), claim: Claim | None = None) -> None:
        self._event = threading.Event()
        self._error: BaseException | None = None
        self.lease_until = lease_until  # the latest renewal this process knows of (its heartbeat's or a commit's)
        self.claim = claim
        self.in_flight: InFlight | None = None   # the call the run's thread is inside now, if any
        self.between: Callable[[], InFlight] | None = None   # the journal's: its own code, when in no call
        self.given_up: str | None = None         # why the worker gave up waiting for that call (one sentence)
        self.given_up_as: tuple[str, str | None] | None = None   # the run's status and reason as the watcher left it
        self.on_given_up: Callable[[RunControl], None] | None = None   # the worker's: free the slot, or exit
        self._groups: set[int] = set()
        self._groups_lock = threading.Lock()
        self._killing = False

    def renewed(self, until: float) -> None:
        self.lease_until = max(self.lease_until, until)

    def lost(self, run_id: str, why: str = "the heartbeat was refused; another lease or a person took it") -> None:
        self._taken(FenceRefused(f"run {run_id}: {why}"), f"{run_id} was taken (a person parked or cancelled it, or "
                                                          "another worker's lease)")

    def lapsed(self, run_id: str, why: str, kind: str) -> None:
        """The lease could not be renewed before it ends, so the run stops as one the environment held up.

        `kind` says why: the database busy, or its server away. The worker drops the run; the next claim repeats
        its step."""
        self._error = EnvironmentStop(kind, f"run {run_id}: {why}")
        self._event.set()
        self.kill_commands()   # the next claimer runs the call again: never two copies of its program at once
        # a call that does not return is handed on at its deadline, once the database answers (runtime/deadlines.py)

    def _taken(self, error: BaseException, said: str) -> None:
        """The run is no longer this worker's: its code stops at its next journaled call, the programs its call
        started are killed, and a run inside a call is given up."""
        self._error = error
        self._event.set()
        self.kill_commands()
        flight = self.inside()
        if flight is not None:
            self.gave_up(f"{said} while inside {flight.what}")

    def inside(self) -> InFlight | None:
        """Where the run's thread is: the call in flight, else the agent's own code once its journal exists (an
        InFlight named OWN_CODE); None before that."""
        flight = self.in_flight
        if flight is None and self.between is not None:
            return self.between()
        return flight

    def gave_up(self, why: str, status: str | None = None, reason: str | None = None) -> None:
        """The run was handed on while its thread was inside a call, so the worker stops waiting for it.

        The run was left `status`: `reason`, when this process did it. Whatever the thread does next is refused,
        since the run's fence has moved."""
        if self.given_up is not None:
            return
        self.given_up = why
        self.given_up_as = None if status is None else (status, reason)
        if self._error is None or isinstance(self._error, Suspend):
            self._error = FenceRefused(f"given up: {why}")
        self._event.set()
        self.kill_commands()
        if self.on_given_up is not None:
            self.on_given_up(self)

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

    # -- the programs a call started (ctx.run_command) -------------------------------------------------------

    def adopt(self, group: int) -> None:
        """A program's process group, killed whenever the run is taken from this thread; at once if it was."""
        with self._groups_lock:
            self._groups.add(group)
            killing = self._killing
        if killing:
            kill_group(group)

    def disown(self, group: int) -> None:
        with self._groups_lock:
            self._groups.discard(group)

    def kill_commands(self) -> None:
        """Kill the process group of every program the run's call started and has not seen end."""
        with self._groups_lock:
            self._killing = True
            groups = list(self._groups)
        for group in groups:
            kill_group(group)


def kill_group(group: int) -> None:
    """SIGKILL to every process of a process group (a program run by ctx.run_command and what it started)."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass   # every process of the group has ended
