"""Retries for temporary errors only: exponential back-off with full jitter, the attempt count in the checkpoint.

A crash between attempts does not reset the count, and a long back-off becomes a durable wait instead of a
held worker. A service that is not reachable is retried for the policy's patience rather than a number of
attempts; how long the step has been failing is read back from the run's `retry` events (`record_retry`), so
it survives crashes and waits."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import NotReachable, PermanentError, TemporaryError
from ..format import span
from ..states import EventKind
from ..store.base import Connection
from ..store.events import add_event, nth_newest_at
from ..store.journal import record_failed_attempt
from .agent import RetryPolicy

LOGGER = "tui_agent.worker"   # what a worker says of its runs besides claims and ends: each retried failure

TEMPORARY = (TemporaryError, TimeoutError, ConnectionError)
UNREACHABLE = (NotReachable, TimeoutError, ConnectionError)
RETRY_EVENT = EventKind.RETRY


def is_temporary(error: BaseException) -> bool:
    """Timeouts, dropped connections and what a provider calls temporary; anything else fails at once."""
    return isinstance(error, TEMPORARY) and not isinstance(error, PermanentError)


def is_unreachable(error: BaseException) -> bool:
    """The service could not be reached or did not answer: what the policy's patience is for."""
    return isinstance(error, UNREACHABLE) and not isinstance(error, PermanentError)


def backoff_s(policy: RetryPolicy, attempt: int, rng: Callable[[], float] | None = None) -> float:
    """The wait after failed attempt `attempt`, counted from 1. It is uniform in [0, min(cap, base * 2^(attempt-1))]."""
    return (rng or random.random)() * min(policy.cap_s, policy.base_s * 2 ** (attempt - 1))


@dataclass(frozen=True)
class Retry:
    """What follows a failed attempt: another after `delay_s` (`again`), or none. `out_of_patience`: none because
    the service stayed unreachable for longer than the policy's patience (`failing_s` of it), so the run parks
    with reason `environment` instead of failing."""

    again: bool
    delay_s: float = 0.0
    out_of_patience: bool = False
    failing_s: float = 0.0


def after_failure(policy: RetryPolicy, error: BaseException, attempts: int, failing_s: Callable[[], float]) -> Retry:
    """What follows failed attempt `attempts` (1-based) of a step that raised `error`. A temporary error within
    `policy.attempts` is tried again after the back-off (the service's `retry_after_s` when it gave one). Past them,
    an unreachable service is tried again while the step has been failing for less than `policy.patience_s`
    (`failing_s()`, asked only then: it reads the run's events); the last wait ends when the patience does, so a
    last attempt is made then. Anything else: no more attempts (the step fails)."""
    if not is_temporary(error):
        return Retry(False)
    asked = getattr(error, "retry_after_s", None)  # the service's own retry-after wins over our back-off
    delay = asked if asked is not None else backoff_s(policy, attempts)
    if attempts < policy.attempts:
        return Retry(True, delay)
    if policy.patience_s is None or not is_unreachable(error):
        return Retry(False)
    failing = failing_s()
    left = policy.patience_s - failing
    if left <= 0:
        return Retry(False, out_of_patience=True, failing_s=failing)
    return Retry(True, min(delay, left), failing_s=failing)


def patience_ran_out(policy: RetryPolicy, retry: Retry, *, what: str, attempts: int, error: BaseException,
                     run_id: str) -> str:
    """The message of a run parked because `what` (`step 1 'summarize'`) stayed unreachable past the patience."""
    assert policy.patience_s is not None   # `after_failure` runs out of patience only when the policy has one
    return (f"parked: {what} has not reached its service for {span(retry.failing_s)} ({attempts} attempts, the last "
            f"raised {type(error).__name__}: {error}), past its retry policy's patience of {span(policy.patience_s)}; "
            f"once the service is reachable, tui-agent resume {run_id}")


def record_retry(conn: Connection, run_id: str, *, name: str, attempts: int, error: BaseException,
                 delay_s: float, at: float, worker: str, fence: int) -> None:
    """Inside the fenced write of failed attempt `attempts`, which will be retried: the step's count in the checkpoint
    and one `retry` event. Every retried attempt is recorded here, which is what `failing_since` counts back on."""
    record_failed_attempt(conn, run_id, attempts, at)
    said = f"{name}: attempt {attempts} failed ({type(error).__name__}: {error}); next in {delay_s:.1f}s"
    add_event(conn, run_id, at=at, kind=RETRY_EVENT, message=said, worker=worker, fence=fence)
    import logging  # here, on a failure, not on every command's start: a worker's log (worker_log.say_retries)
    logging.getLogger(LOGGER).info("%s: %s %s", worker, run_id, said)


def failing_since(conn: Connection, run_id: str, recorded: int) -> float | None:
    """When the step's first failed attempt was, given the `recorded` failed attempts its checkpoint counts. Each wrote
    one `retry` event (`record_retry`), so the first is the `recorded`-th newest. None when there is none."""
    return nth_newest_at(conn, run_id, RETRY_EVENT, recorded) if recorded else None
