"""Deadlines: a step, model call, tool call or effect's `do` that runs too long hands its run on.

Python cannot stop a thread, so `Deadlines`, one watcher thread per worker process, gives the run away in one
fenced write that grows the fence (`hand_on`), and the worker gives up on the thread (`RunControl.gave_up`).
A call whose entry is recorded before the watcher's write is not given up.
Why: docs/architecture.md, section 7 (Workers), "Deadlines"."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from ..errors import StepTimedOut
from ..format import span
from ..states import EffectState, EventKind, Reason, RunStatus
from ..store import Claim, EnvironmentStop, FenceRefused, Store, open_store
from ..store.effects import effect_at, set_state
from ..store.events import add_event
from ..store.journal import recorded
from ..store.runs import check_fence, settle
from .clock import now
from .control import InFlight, RunControl
from .outcomes import StepFailed, Suspend
from .retry import record_retry

WATCH_S = 0.25   # how often the watcher looks: a deadline is kept to within this


def seconds(value: float) -> str:
    return f"{value:g}s" if value < 60 else span(value)


class Deadlines:
    """The watcher thread: hands on the runs whose call in flight passed its deadline (see the module). `held`
    lists the controls of the runs the process holds; `let_go(claim)` stops the heartbeat renewing one handed on.
    Its own connection is opened the first time a deadline passes."""

    def __init__(self, db_path: Path | str, durability: str, held: Callable[[], list[RunControl]],
                 let_go: Callable[[Claim], None]) -> None:
        self._db_path, self._durability = db_path, durability
        self._held, self._let_go = held, let_go
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="deadlines", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        store: Store | None = None
        try:
            while not self._stop.wait(WATCH_S):
                at = now()
                for control in self._held():
                    flight = control.inside()
                    if flight is None or control.given_up is not None or at < min(flight.deadline,
                                                                                   flight.wall_end):
                        continue
                    if store is None:
                        store = open_store(self._db_path, self._durability)
                    self._expire(store, control, flight, at)
        finally:
            if store is not None:
                store.close()

    def _expire(self, store: Store, control: RunControl, flight: InFlight, at: float) -> None:
        claim = control.claim
        assert claim is not None   # the heartbeat holds each run's control with its claim
        try:
            handed = hand_on(store, claim, flight, at)
        except FenceRefused:
            return   # taken meanwhile (a person, another lease): the heartbeat says so to the run's control
        except EnvironmentStop:
            return   # the database held up, or unusable: the next look tries again (the worker's loop stops the
            # process for what does not pass)
        if handed is None:
            return   # the call returned in time after all
        self._let_go(claim)
        control.gave_up(*handed)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def hand_on(store: Store, claim: Claim, flight: InFlight, at: float) -> tuple[str, str, str] | None:
    """Hand on the run of `flight`, a call past its deadline at `at`, in one fenced write that grows the fence.

    Returns what happened, in one sentence, with the run's status and reason now; None when the call's entry
    was recorded first (it returned in time). Raises FenceRefused when the run was taken meanwhile."""
    run = claim.run_id
    with store.write() as conn:
        check_fence(conn, run, claim.fence, at, None)
        if _made_it(conn, claim, flight):
            return None
        ended = dict(conn=conn, claim=claim, now=at, wall_s=at - flight.last_at, handed_on=True)
        if at >= flight.wall_end:
            stop = _wall_exhausted(flight, at)
            settle(status=stop.status, reason=stop.reason, message=stop.message, **ended)
            return (f"{flight.what} of {run} was still running when the run's wall_s budget ran out: "
                    f"{stop.status} ({stop.reason}): {stop.message}"), stop.status, stop.reason
        assert flight.timeout_s is not None   # past its own deadline, so the call has one
        waited = seconds(flight.timeout_s)
        if flight.effect is not None:
            set_state(conn, flight.effect, EffectState.UNKNOWN, at)
            add_event(conn, run, at=at, kind=EventKind.EFFECT,
                      message=f"{flight.name}: outcome unknown: do was still running after {waited}, its deadline;"
                      " reconciled as after a crash", worker=claim.worker, fence=claim.fence)
            settle(status=RunStatus.QUEUED, reason=Reason.RESUMED,
                   message=f"handed back: effect {flight.name!r} passed its deadline; the next claim reconciles it",
                   **ended)
            return (f"effect {flight.name!r} of {run}: do was still running after {waited}, its deadline: its "
                    "outcome is unknown, and the run is queued to reconcile it"), RunStatus.QUEUED, Reason.RESUMED
        error = StepTimedOut(f"still running after {waited}, its deadline")
        attempts = flight.attempts + 1
        retry = flight.after_failure(error, attempts)
        if not retry.again:
            failed = StepFailed(flight.position, flight.name, error, attempts)
            settle(status=RunStatus.FAILED, reason=Reason.ERROR, message=f"failed: {failed}", error=str(failed),
                   **ended)
            return (f"{flight.what} of {run} was still running after {waited}, its deadline, at attempt {attempts}, "
                    "the last the retry policy allows: the run failed"), RunStatus.FAILED, Reason.ERROR
        delay = retry.delay_s
        record_retry(conn, run, name=flight.name, attempts=attempts, error=error, delay_s=delay, at=at,
                     worker=claim.worker, fence=claim.fence)
        settle(status=RunStatus.WAITING, reason=Reason.RETRY, wake_at=at + delay,
               message=f"{flight.name}: attempt {attempts + 1} after a {delay:.1f}s back-off, by a worker process "
                       "with no thread left inside this run", error=f"{flight.what} raised StepTimedOut: {error}",
               **ended)
        return (f"{flight.what} of {run} was still running after {waited}, its deadline: attempt {attempts} counts "
                f"as failed (StepTimedOut) and the run waits {delay:.1f}s to retry, in a worker process with no thread "
                "inside it"), RunStatus.WAITING, Reason.RETRY


def _made_it(conn, claim: Claim, flight: InFlight) -> bool:
    """Whether the call's outcome was recorded before the watcher's write got the lock."""
    if flight.effect is not None:
        row = effect_at(conn, claim.run_id, claim.generation, flight.position)
        assert row is not None   # the effect's row was committed before its `do` was called
        return row["state"] != EffectState.ATTEMPTED
    return recorded(conn, claim.run_id, claim.generation, flight.position)


def _wall_exhausted(flight: InFlight, at: float) -> Suspend:
    """The run's wall_s budget ended inside the call: the budget's own refusal, as the next call would meet it."""
    budget = flight.budget
    of = "the default " if "wall_s" in budget.defaults else ""
    return budget.refusal("wall_s", f"{at - flight.last_at + flight.used:.0f}s used of "
                                    f"{of}{budget.limits['wall_s']:g}s, reached inside {flight.what}")
