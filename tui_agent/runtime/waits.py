"""Durable waits: a sleeping run or one waiting for a person is a row with a wake time or a
question, and no process stays alive. The wait is journaled, so a resumed run keeps its place."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ..states import EntryKind, EventKind, Reason, RunStatus
from ..store.approvals import approval_at, ask
from .clock import iso, parse_instant
from .journal import Recorder
from .outcomes import Suspend


def _instant(when: float | str | datetime) -> float:
    if isinstance(when, datetime):
        return when.timestamp() if when.tzinfo else parse_instant(when.isoformat())
    if isinstance(when, str):
        return parse_instant(when)
    return float(when)


def _wait(journal: Recorder, name: str, wake_at: Callable[[], float]) -> None:
    """Journal the wake time on the first pass; until it comes, every pass hands the run back."""
    position, recorded, value = journal.next(name)
    if not recorded:
        value = journal.record(position, name, kind=EntryKind.SLEEP, value={"wake_at": wake_at()},
                               started_at=journal.clock.now(), duration_s=0.0)
    if journal.clock.now() < value["wake_at"]:
        raise Suspend(RunStatus.WAITING, Reason.SLEEP, f"sleeping at {name} until {iso(value['wake_at'])}",
                      wake_at=value["wake_at"])


def sleep(journal: Recorder, name: str, seconds: float) -> None:
    _wait(journal, name, lambda: journal.clock.now() + seconds)


def sleep_until(journal: Recorder, name: str, when: float | str | datetime) -> None:
    _wait(journal, name, lambda: _instant(when))


ON_DENY = ("cancel", "return")


def approval(journal: Recorder, name: str, question: str, on_deny: str = "cancel") -> dict:
    """A person's decision, journaled. A denial ends the run `cancelled: denied` (`on_deny="cancel"`),
    or is handed back to the agent as `{"approved": False, ...}` (`on_deny="return"`)."""
    if on_deny not in ON_DENY:
        raise ValueError(f"on_deny must be 'cancel' or 'return', not {on_deny!r}")
    position, recorded, value = journal.next(name)
    if recorded:
        return _denied(name, value) if on_deny == "cancel" else value
    with journal.write() as conn:
        row = approval_at(conn, journal.run_id, journal.generation, position)
        if row is None:
            row = ask(conn, journal.run_id, generation=journal.generation, position=position, name=name,
                      question=question, now=journal.clock.now())
            journal.event(conn, EventKind.APPROVAL, f"{name}: asks {question!r}")
    if row["decision"] is None:
        raise Suspend(RunStatus.WAITING, Reason.APPROVAL,
                      f"needs a person: {question} (tui-agent approve {journal.run_id} [--deny] [--note TEXT])")
    decision = {"approved": row["decision"] == "approved", "note": row["note"], "by": row["decided_by"],
                "at": iso(row["decided_at"])}
    decision = journal.record(position, name, kind=EntryKind.APPROVAL, value=decision,
                              started_at=journal.clock.now(), duration_s=0.0)
    return _denied(name, decision) if on_deny == "cancel" else decision


def _denied(name: str, decision: dict) -> dict:
    """The decision when it approves; a denial ends the run, with the person's note in its last event."""
    if decision["approved"]:
        return decision
    note = f": {decision['note']}" if decision.get("note") else ""
    raise Suspend(RunStatus.CANCELLED, Reason.DENIED,
                  f"cancelled: {name} denied by {decision.get('by') or 'a person'}{note}")
