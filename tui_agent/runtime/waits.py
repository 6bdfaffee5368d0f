"""Durable waits: a sleeping run or one waiting for a person is a row with a wake time or a
question, and no process stays alive. The wait is journaled, so a resumed run keeps its place."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from ..states import Reason, RunStatus
from ..store.approvals import approval_at, ask
from ..store.events import add_event
from .clock import iso, parse_instant
from .outcomes import Suspend

if TYPE_CHECKING:
    from .context import Context


def _instant(when: float | str | datetime) -> float:
    if isinstance(when, datetime):
        return when.timestamp() if when.tzinfo else parse_instant(when.isoformat())
    if isinstance(when, str):
        return parse_instant(when)
    return float(when)


def _wait(ctx: Context, name: str, wake_at: Callable[[], float]) -> None:
    """Journal the wake time on the first pass; until it comes, every pass hands the run back."""
    position, recorded, value = ctx._next(name)
    if not recorded:
        value = ctx._record(position, name, "sleep", {"wake_at": wake_at()}, ctx.clock.now(), 0.0)
    if ctx.clock.now() < value["wake_at"]:
        raise Suspend(RunStatus.WAITING, Reason.SLEEP, f"sleeping at {name} until {iso(value['wake_at'])}",
                      wake_at=value["wake_at"])


def sleep(ctx: Context, name: str, seconds: float) -> None:
    _wait(ctx, name, lambda: ctx.clock.now() + seconds)


def sleep_until(ctx: Context, name: str, when: float | str | datetime) -> None:
    _wait(ctx, name, lambda: _instant(when))


ON_DENY = ("cancel", "return")


def approval(ctx: Context, name: str, question: str, on_deny: str = "cancel") -> dict:
    """A person's decision, journaled. A denial ends the run `cancelled: denied` (`on_deny="cancel"`),
    or is handed back to the agent as `{"approved": False, ...}` (`on_deny="return"`)."""
    if on_deny not in ON_DENY:
        raise ValueError(f"on_deny must be 'cancel' or 'return', not {on_deny!r}")
    position, recorded, value = ctx._next(name)
    if recorded:
        return _denied(name, value) if on_deny == "cancel" else value
    with ctx._write() as conn:
        row = approval_at(conn, ctx.run_id, ctx.generation, position)
        if row is None:
            row = ask(conn, ctx.run_id, ctx.generation, position, name, question, ctx.clock.now())
            add_event(conn, ctx.run_id, ctx.clock.now(), "approval", f"{name}: asks {question!r}", ctx.worker, ctx.fence)
    if row["decision"] is None:
        raise Suspend(RunStatus.WAITING, Reason.APPROVAL,
                      f"needs a person: {question} (tui-agent approve {ctx.run_id} [--deny] [--note TEXT])")
    decision = {"approved": row["decision"] == "approved", "note": row["note"], "by": row["decided_by"],
                "at": iso(row["decided_at"])}
    decision = ctx._record(position, name, "approval", decision, ctx.clock.now(), 0.0)
    return _denied(name, decision) if on_deny == "cancel" else decision


def _denied(name: str, decision: dict) -> dict:
    """The decision when it approves; a denial ends the run, with the person's note in its last event."""
    if decision["approved"]:
        return decision
    note = f": {decision['note']}" if decision.get("note") else ""
    raise Suspend(RunStatus.CANCELLED, Reason.DENIED, f"cancelled: {name} denied by {decision.get('by') or 'a person'}{note}")
