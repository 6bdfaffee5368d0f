"""The journal recorder: one claim's writes to its run's journal, for `Context` and the runtime modules beside it.

It takes the next position, answers a recorded one, makes a call's attempts under the retry policy, backs off
between them and commits each entry fenced. `Context` (runtime/context.py) owns one per claim and so do
`effects`, `waits`, `loop` and `commands`, which are handed the recorder instead of reaching into the Context.
A replay substitutes its own (replay.py). Package-internal: agents call `Context`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from types import MappingProxyType
from typing import Any, Final

from ..errors import ParkRun, Unreadable
from ..states import EventKind, Reason, RunStatus
from ..store import Claim, Store
from ..store.base import Connection
from ..store.events import add_event
from ..store.journal import (
    FOLD_EVERY,
    NO_USAGE,
    Checkpoint,
    Entry,
    Usage,
    add_entry,
    add_step,
    fold_step,
    record_soft,
    write_entry,
)
from ..store.runs import check_fence
from .agent import RetryPolicy
from .budget import BudgetMeter
from .clock import Clock, clock_time
from .control import OWN_CODE, InFlight, RunControl
from .outcomes import CodeChanged, StepFailed, Suspend
from .results import ARTIFACT_THRESHOLD, decode, encode, parse, place
from .retry import Retry, after_failure, failing_since, patience_ran_out, record_retry
from .traces import Turn


class Unset(Enum):
    """The type of `UNSET`: a parameter left out, where None means something else."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET   # a call's `timeout_s` left out: the agent's `step_timeout_s` holds
NO_KWARGS: Mapping[str, Any] = MappingProxyType({})
_NEVER = float("inf")
_PLAIN = (str, int, float, bool, type(None))

Observer = Callable[[int, str, bool], None]   # (position, name, replayed): after each journaled call


class Recorder:
    """One claim's journal: the next position, the recorded entries, and the fenced writes that add to them.

    Its attributes are read by the runtime modules that journal (`effects`, `waits`, `loop`, `commands`), and by
    the deadline watcher through the `InFlight` it sets. `on_step` and `degrade` are the Context's: what an
    observer sees after each call, and the agent's hook at the first soft budget crossing.
    """

    def __init__(self, store: Store, claim: Claim, *, artifact_dir: str, checkpoint: Checkpoint, entries: list[tuple],
                 clock: Clock, budget: BudgetMeter, retry: RetryPolicy, step_timeout: float | None,
                 control: RunControl | None, soft_position: int | None, trace: Turn | None) -> None:
        self.store = store
        self.claim = claim
        self.clock = clock
        self.run_id, self.generation, self.fence, self.worker = (claim.run_id, claim.generation, claim.fence,
                                                                 claim.worker)
        self.artifact_dir = artifact_dir   # the run's, relative to the store's artifact folder
        self.checkpoint = checkpoint
        self.folded_at = checkpoint.current_step   # the checkpoint row counts the positions before this
        self.plan_unsaved = False                  # plan() changed a field only the checkpoint row holds
        self.entries = entries
        self.position = 0
        self.inside: str | None = None   # the step whose function is running: it may not journal
        self.budget = budget
        self.retry = retry
        self.step_timeout = step_timeout
        self.control = control
        self.soft_position = soft_position
        self.trace = trace   # this turn's span (runtime/traces.py), None while tracing is off
        self.on_step: Observer | None = None
        self.degrade: Callable[[], None] | None = None
        self.programs = 0   # programs run_command started in this claim (names their output files)
        self.last_at = claim.claimed_at
        self.renew_at = claim.claimed_at + claim.lease_s / 2
        if control is not None:
            control.between = self._between_calls

    def _between_calls(self) -> InFlight:
        """The agent's own code since its last call, as the deadline watcher's thread sees it: bounded by the run's
        wall_s budget alone. A commit sets `last_at` before it charges the budget, and this reads them the other
        way round, so a read across a commit errs late, never early."""
        used = self.budget.used["wall_s"]
        return InFlight._make((_NEVER, self.budget, self.last_at, self.after_failure,
                               max(self.position, len(self.entries)), OWN_CODE, 0, None, None, used))

    @property
    def replaying(self) -> bool:
        """True while the next journaled call is answered from the journal instead of being made."""
        return self.position < len(self.entries)

    def plan(self, total_steps: int | None, revision: int | None, next_input: Any) -> None:
        """Keep what `Context.plan` declares for the next committed entry; `UNSET` or None keeps a field."""
        self.plan_unsaved = True
        if total_steps is not None:
            self.checkpoint.total_steps = total_steps
        if revision is not None:
            self.checkpoint.plan_revision = revision
        if next_input is not UNSET:
            self.checkpoint.next_input = encode(next_input, "next_input")

    def next(self, name: str, **needs: float) -> tuple[int, bool, Any]:
        """Take the next position: (position, recorded?, the recorded value).

        A new call must fit the budget: one more step, the running time so far, and any `needs`, such as a
        model call's reservation. A recorded position under another name raises `CodeChanged`.
        """
        if self.control is not None:
            self.control.check()
        if self.inside is not None:
            raise RuntimeError(f"{name!r} was called inside step {self.inside!r}: a step's function (or a loop's "
                               "check) must not make journaled calls, since a replay does not run it")
        position = self.position
        self.position = position + 1
        if position >= len(self.entries):
            self.budget.admit_step(self.clock.now() - self.last_at)
            if needs:
                self.budget.admit(**needs)
            return position, False, None
        _, recorded, result, artifact = self.entries[position]
        if recorded != name:
            raise CodeChanged(position, recorded, name)
        try:
            value = decode(self.store, result, artifact)
        except Unreadable as e:   # recorded by an older version, or changed by another program
            where = f" (the artifact {artifact})" if artifact else ""
            raise Unreadable(f"journal.result of #{position} {recorded!r}{where}", e.why) from None
        if self.on_step is not None:
            self.on_step(position, name, True)
        if self.trace is not None:
            self.trace.replayed(position, name)
        if position == self.soft_position:
            self.degrade_now()
        return position, True, value

    def degrade_now(self) -> None:
        """The first soft crossing, live or replayed at the same position: the agent's hook, once."""
        if not self.budget.soft_exceeded:
            self.budget.soft_exceeded = True
            if self.degrade is not None:
                self.degrade()

    def _cross_soft(self, position: int, crossed: list[str]) -> None:
        at = self.clock.now()
        dimensions = self.budget.soft_dimensions + crossed
        with self.write(at) as conn:
            record_soft(conn, self.run_id, position, dimensions, at)
            for dimension in crossed:
                self.event(conn, EventKind.BUDGET, self.budget.describe(dimension), at)
        self.budget.soft_dimensions = dimensions
        if self.soft_position is None:
            self.soft_position = position
        self.degrade_now()

    def attempt(self, position: int, name: str, *, call: Callable[..., Any],
                failed: Callable[[Connection, Exception], None] | None = None, args: tuple = (),
                kwargs: Mapping[str, Any] = NO_KWARGS, timeout_s: float | None | Unset = UNSET,
                ) -> tuple[Any, int, float, float]:
        """Call `call(*args, **kwargs)` until it succeeds and return its value with how the attempts went. The tuple is
        (value, attempts, started_at, duration).

        Temporary errors are retried by the agent's policy (runtime/retry.py `after_failure`). Failed attempts
        are committed, so a crash does not reset the count, and `failed(conn, error)` adds to that commit. A
        service still unreachable when the policy's patience runs out parks the run with reason `environment`,
        and resuming it tries the call again. Each attempt has `timeout_s` to return, by default the agent's
        `step_timeout_s`, before the deadline watcher hands the run on (runtime/deadlines.py).
        """
        attempts = self.checkpoint.step_attempts
        self.checkpoint.step_attempts = 0
        control = self.control
        timeout = self.step_timeout if timeout_s is UNSET else timeout_s
        allowed = _NEVER if timeout is None else timeout
        while True:
            started_at = self.clock.now()
            t0 = self.clock.perf()
            if control is not None:   # what the deadline watcher reads: one assignment, no hand-off
                control.in_flight = InFlight._make((started_at + allowed, self.budget, self.last_at,
                                                    self.after_failure, position, name, attempts, timeout, None,
                                                    None))
            try:
                try:
                    value = call(*args, **kwargs)
                finally:
                    if control is not None:
                        control.in_flight = None
                return value, attempts + 1, started_at, self.clock.perf() - t0
            except ParkRun:
                raise   # a person looks first: not a failed attempt
            except Exception as e:
                attempts += 1
                retry = self.after_failure(e, attempts)
                if retry.again or failed is not None:
                    at = self.clock.now()
                    with self.write(at) as conn:
                        if failed is not None:
                            failed(conn, e)
                        if retry.again:
                            record_retry(conn, self.run_id, name=name, attempts=attempts, error=e,
                                         delay_s=retry.delay_s, at=at, worker=self.worker, fence=self.fence)
                said = f"step {position} {name!r} raised {type(e).__name__}: {e}"
                if retry.out_of_patience:
                    raise Suspend(RunStatus.PARKED, Reason.ENVIRONMENT, patience_ran_out(
                        self.retry, retry, what=f"step {position} {name!r}", attempts=attempts, error=e,
                        run_id=self.run_id), error=said) from e
                if not retry.again:
                    raise StepFailed(position, name, e, attempts) from e
                self.back_off(name, attempts, retry.delay_s, said)

    def after_failure(self, error: Exception, attempts: int) -> Retry:
        """What the retry policy says follows failed attempt `attempts` (runtime/retry.py `after_failure`).

        A call that passed its deadline comes here too, from the deadline watcher, as `StepTimedOut`.
        """
        return after_failure(self.retry, error, attempts, lambda: self._failing_s(attempts))

    def _failing_s(self, attempts: int) -> float:
        """How long the call of failed attempt `attempts`, the newest and not recorded yet, has been failing."""
        at = self.clock.now()
        since = failing_since(self.store.conn, self.run_id, attempts - 1)
        return at - (at if since is None else since)

    def back_off(self, name: str, attempts: int, delay: float, error: str | None = None) -> None:
        """Wait before attempt `attempts + 1`: here when short, as a durable wait that holds no worker when long.

        `error` says how the attempt failed, and is kept with the waiting run for the screens.
        """
        if delay > self.retry.wait_over_s:
            wake_at = self.clock.now() + delay
            raise Suspend(RunStatus.WAITING, Reason.RETRY, f"{name}: attempt {attempts + 1} at {clock_time(wake_at)}, "
                          f"after a {delay:.0f}s back-off" + (f"; the last: {error}" if error else ""),
                          wake_at=wake_at, error=error) from None
        if self.control is not None:
            self.control.pause(delay)
        else:
            time.sleep(delay)

    def record(self, position: int, name: str, *, kind: str, value: Any, started_at: float, duration_s: float,
               usage: Usage = NO_USAGE, cost: float | None = None, also: Callable | None = None,
               attempts: int = 1, inputs: str | None = None, detail: Mapping[str, Any] | None = None) -> Any:
        """Commit one journal entry, with `also(conn)` in the same fenced transaction.

        It returns the value as a replay will see it, after the JSON round trip. `detail` is what the entry's
        trace span says beside the entry itself (runtime/traces.py `Turn.recorded`).
        """
        encoded = encode(value, kind, name)
        result: str | None = encoded
        artifact: str | None = None
        if len(encoded) > ARTIFACT_THRESHOLD:
            result, artifact = place(self.store, self.artifact_dir,
                                     f"g{self.generation}-{position:05d}-f{self.fence}-{name}", encoded)
        at = self.clock.now()
        wall, self.last_at = at - self.last_at, at
        # A plain step commits its row alone, one statement; the checkpoint row moves every FOLD_EVERY steps, and
        # with any entry that changes more than the step count and running time (usage, a reset attempt count, a
        # new plan), or that commits more (`also`, a lease renewal).
        plain = usage is NO_USAGE and attempts == 1 and not self.plan_unsaved and also is None and at <= self.renew_at
        entry = Entry(position=position, name=name, kind=kind, result=result, artifact=artifact,
                      started_at=started_at, duration_s=duration_s, wall_s=wall, attempts=attempts, inputs=inputs,
                      usage=usage, cost_usd=cost)
        if plain and position + 1 - self.folded_at < FOLD_EVERY:
            add_step(self.store, self.claim, entry)
        elif plain:   # its turn to fold: a transaction of its own (on a server one statement, as add_step's)
            fold_step(self.store, self.claim, entry, self.checkpoint, at)
            self.folded_at = position + 1
        else:
            renew = at > self.renew_at   # less than half the lease is left: renew it in this commit

            def commit() -> None:   # shared: its first statement (the renewal, or add_entry's fence check) locks
                with self.store.write_shared() as conn:   # the run's row; `also` writes only rows of this run
                    if renew:   # from the moment the lock is held (the write may have waited)
                        self._renew(conn, self.clock.now())
                    add_entry(conn, self.claim, entry, self.checkpoint, at)
                    if also is not None:
                        also(conn)

            write_entry(self.store, self.claim, position, commit)
            self.folded_at, self.plan_unsaved = position + 1, False
        crossed = self.budget.charge(usage, wall)
        if crossed:
            self._cross_soft(position, crossed)
        if self.on_step is not None:
            self.on_step(position, name, False)
        if self.trace is not None:
            self.trace.recorded(position, name, kind=kind, value=value, started_at=started_at, duration_s=duration_s,
                                attempts=attempts, cost=cost, detail=detail)
        return value if type(value) in _PLAIN else parse(encoded)

    def _renew(self, conn: Connection, at: float) -> None:
        check_fence(conn, self.run_id, self.fence, at, at + self.claim.lease_s)
        self.renewed(at)

    def renewed(self, at: float) -> None:
        """The lease was renewed at `at`, in a commit of the caller's."""
        self.renew_at = at + self.claim.lease_s / 2
        if self.control is not None:
            self.control.renewed(at + self.claim.lease_s)

    @contextmanager
    def write(self, at: float | None = None) -> Iterator[Connection]:
        """A fenced write that also renews the lease; the store refuses it if another lease took the run."""
        with self.store.write() as conn:
            self._renew(conn, self.clock.now() if at is None else at)
            yield conn

    def event(self, conn: Connection, kind: str, message: str, at: float | None = None) -> None:
        """Add one of the run's events, at `at` or now, in the caller's fenced write."""
        add_event(conn, self.run_id, at=self.clock.now() if at is None else at, kind=kind, message=message,
                  worker=self.worker, fence=self.fence)

