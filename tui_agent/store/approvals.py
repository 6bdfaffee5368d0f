"""Questions a run waits on until a person answers; the answer is journaled when the run resumes."""

from __future__ import annotations

from typing import cast

from .base import Connection, Store, one_row, positioned_page
from .runs import StateChanged


def approval_at(conn: Connection, run_id: str, generation: int, position: int) -> dict | None:
    return one_row(conn.execute("SELECT * FROM approvals WHERE run_id = ? AND generation = ? AND position = ?",
                             (run_id, generation, position)))


def ask(conn: Connection, run_id: str, *, generation: int, position: int, name: str, question: str,
        now: float) -> dict:
    conn.execute("INSERT INTO approvals (run_id, generation, position, name, question, asked_at)"
                 " VALUES (?, ?, ?, ?, ?, ?)", (run_id, generation, position, name, question, now))
    return cast(dict, approval_at(conn, run_id, generation, position))   # the row just inserted


def pending(store: Store, run_id: str, generation: int) -> dict | None:
    return one_row(store.conn.execute("SELECT * FROM approvals WHERE run_id = ? AND generation = ?"
                                   " AND decision IS NULL ORDER BY position LIMIT 1", (run_id, generation)))


def decide(conn: Connection, approval_id: int, *, decision: str, note: str | None, who: str,
           now: float) -> None:
    """Answer a question once: a second answer (a race between two people) is refused, not recorded."""
    cur = conn.execute("UPDATE approvals SET decision = ?, note = ?, decided_by = ?, decided_at = ?"
                       " WHERE id = ? AND decision IS NULL", (decision, note, who, now, approval_id))
    if cur.rowcount != 1:
        raise StateChanged(f"approval {approval_id} was answered already; nothing changed")


def approvals_for(store: Store, run_id: str) -> list[dict]:
    return list(store.query("SELECT * FROM approvals WHERE run_id = ? ORDER BY generation, position",
                               (run_id,)))


def approvals_at(store: Store, run_id: str, generation: int, first: int, last: int | None = None) -> list[dict]:
    """One generation's questions at positions first..last (to its end when `last` is None)."""
    upto, params = ("", ()) if last is None else (" AND position <= ?", (last,))
    return list(store.query(f"SELECT * FROM approvals WHERE run_id = ? AND generation = ? AND position >= ?{upto}"
                               " ORDER BY position", (run_id, generation, first, *params)))


def next_asked(store: Store, run_id: str, generation: int, after: int) -> int | None:
    """The position of the first question after `after` (answered or not: each is a person's decision)."""
    row = store.conn.execute("SELECT position FROM approvals WHERE run_id = ? AND generation = ? AND position > ?"
                             " ORDER BY position LIMIT 1", (run_id, generation, after)).fetchone()
    return row[0] if row else None


def approvals_page(store: Store, run_id: str, after: tuple[int, int] | None, limit: int) -> list[dict]:
    """The run's questions a page at a time, by (generation, position)."""
    return positioned_page(store, "approvals", run_id=run_id, after=after, limit=limit)
