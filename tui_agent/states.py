"""The states a run, an effect and a worker can be in, and the rules read from them, each written here once.

So the CLI, the TUI and the store cannot disagree about what "ended", "in doubt", "needs a person" or "alive"
means. The enums are StrEnums: a member equals its string in SQL parameters, JSON and what the database hands
back. This module imports nothing from tui_agent, so every layer may import it.
Why: docs/architecture.md, sections 3.1, 6.4, 7.2 and 11."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    PARKED = "parked"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class EffectState(StrEnum):
    INTENDED = "intended"
    ATTEMPTED = "attempted"
    CONFIRMED = "confirmed"
    UNKNOWN = "unknown"
    NOT_DONE = "not_done"


class Reason(StrEnum):
    """Why a run has its status (`runs.reason`). `budget:<dimension>` is not a member: build it with
    budget_reason and read it with budget_dimension."""

    NEW = "new"
    RESUMED = "resumed"
    SLEEP = "sleep"
    RETRY = "retry"
    APPROVAL = "approval"
    RECONCILE = "reconcile"
    PLATEAU = "plateau"
    PERSON = "person"
    CODE_CHANGED = "code_changed"
    CHECKPOINT_SCHEMA = "checkpoint_schema"
    ENVIRONMENT = "environment"
    TAKEOVER_LOOP = "takeover_loop"
    LIMIT_ITERATIONS = "limit:iterations"          # the harness agent's own ceilings (its blast radius), parked
    LIMIT_FILES_CHANGED = "limit:files_changed"    # like a budget's: a person raises them and resumes
    CHECK_PASSED = "check_passed"
    RETURNED = "returned"
    CHECK_FAILED = "check_failed"
    ERROR = "error"
    DENIED = "denied"


class WorkerState(StrEnum):
    """In the order the Workers screen sorts by: the ones to look at first."""

    ALIVE = "alive"
    CLOCK_AHEAD = "clock_ahead"
    SILENT = "silent"
    DEAD = "dead"
    STOPPED = "stopped"


class EntryKind(StrEnum):
    """What a journal entry records (`journal.kind`), one per journaled call of `Context`."""

    STEP = "step"              # step, run_command, note, spent, and a loop's check
    MODEL = "model"
    TOOL = "tool"              # one tool result of agent_loop
    EFFECT = "effect"
    SLEEP = "sleep"            # sleep and sleep_until: the wake time
    APPROVAL = "approval"      # a person's decision
    PROGRESS = "progress"
    FAILURE = "failure"


class CallState(StrEnum):
    """A model call's attempt (`model_calls.state`); `died` is how a reader shows an `in_flight` row whose worker
    is gone, and is never stored."""

    IN_FLIGHT = "in_flight"
    ANSWERED = "answered"
    FAILED = "failed"
    DIED = "died"


class EventKind(StrEnum):
    """What a line of a run's events says (`events.kind`), besides a status the run entered, whose event is named
    after its RunStatus. Schedules' events have kinds of their own (runtime/schedule.py)."""

    CLAIMED = "claimed"
    WOKE = "woke"
    TAKEOVER = "takeover"
    RETRY = "retry"
    BUDGET = "budget"
    EFFECT = "effect"
    APPROVAL = "approval"
    COMMAND = "command"
    MODEL = "model"
    AGENT = "agent"           # ctx.event
    NOTE = "note"             # ctx.note
    CODE_VERSION = "code_version"
    DECISION = "decision"
    FORKED = "forked"
    EDITED = "edited"
    ADOPTED = "adopted"
    WORKTREE = "worktree"
    RULE = "rule"
    LIMIT = "limit"
    REMINDER = "reminder"


class TurnEnd(StrEnum):
    """How a worker's turn of a run ended for that worker (runtime/worker.Outcome's `kind`)."""

    SETTLED = "settled"   # the worker settled the run, or its deadline watcher did: the outcome's `settled`
    REFUSED = "refused"   # another lease or a person took the run
    DROPPED = "dropped"   # the database stayed busy, or its server away, past the lease: nothing was settled


TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
# An attempt went out (or may have) and nobody recorded what came of it: it must be reconciled, never retried.
# `intended` is not in doubt: nothing was sent yet. Tuples keep the order messages list them in.
IN_DOUBT = (EffectState.UNKNOWN, EffectState.ATTEMPTED)
# What a person may say happened or did not: an effect in doubt, or one intended whose attempt may be under way.
DECIDABLE = (*IN_DOUBT, EffectState.INTENDED)
# Waits that end by themselves at `wake_at`; any other wait is for a person. A tuple: its order is part of
# store.runs.NEEDS_PERSON, whose text must keep matching the partial index a database was made with.
SELF_WAKING = (Reason.SLEEP, Reason.RETRY)

BUDGET_PREFIX = "budget:"


def budget_reason(dimension: str) -> str:
    """The reason a budget ceiling writes: `budget:cost_usd`."""
    return f"{BUDGET_PREFIX}{dimension}"


def budget_dimension(reason: str | None) -> str | None:
    """The dimension a budget reason names, or None when the reason is not a budget's."""
    if reason and reason.startswith(BUDGET_PREFIX):
        return reason.removeprefix(BUDGET_PREFIX)
    return None


def needs_person(status: str, reason: str | None) -> bool:
    """A parked run, or one waiting on anything but time, waits for a person."""
    return status == RunStatus.PARKED or (status == RunStatus.WAITING and reason not in SELF_WAKING)


EXIT_OK, EXIT_NOT_SUCCEEDED, EXIT_USAGE, EXIT_WAITING, EXIT_ENVIRONMENT = 0, 1, 2, 3, 4


def exit_code(status: str) -> int:
    """A run's status as the exit code of the command that worked it, `run` or `worker --once`.

    A run that has not ended (waiting, queued again, or running in another worker) may still succeed, so it is
    not a failure."""
    if status == RunStatus.SUCCEEDED:
        return EXIT_OK
    if status in TERMINAL or status == RunStatus.PARKED:
        return EXIT_NOT_SUCCEEDED
    return EXIT_WAITING


SLACK_S = 1.0  # a wall-clock step smaller than this (an NTP adjustment) reads as now, not as a clock ahead


def ahead_s(then: float | None, at: float) -> float | None:
    """How far `then` lies in the future of `at`, or None when it does not (by more than SLACK_S)."""
    if then is None or then - at <= SLACK_S:
        return None
    return then - at


def worker_state(worker: Mapping[str, Any], at: float, *, gone: bool) -> WorkerState:
    """A `workers` row at instant `at`. `gone` says its process is known to be gone without a goodbye (killed);
    only its own host can tell, by probing the pid, which this module does not do: runtime.liveness.worker_state
    probes and calls this. A heartbeat in the future says nothing about whether it beats now, so such a worker
    is clock_ahead, not alive."""
    if worker["stopped_at"] is not None:
        return WorkerState.STOPPED
    if gone:
        return WorkerState.DEAD
    if ahead_s(worker["heartbeat_at"], at) is not None:
        return WorkerState.CLOCK_AHEAD
    return WorkerState.ALIVE if at - worker["heartbeat_at"] < worker["lease_s"] else WorkerState.SILENT
