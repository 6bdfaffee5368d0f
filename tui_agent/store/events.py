"""The run's append-only progress log: one row per transition, written in the
transaction that makes the transition."""

from __future__ import annotations

from .base import Connection, Store, one_row

_INSERT = "INSERT INTO events (run_id, at, kind, message, worker, fence) VALUES (?, ?, ?, ?, ?, ?)"


def add_event(conn: Connection, run_id: str, *, at: float, kind: str, message: str,
              worker: str | None = None, fence: int | None = None) -> None:
    conn.execute(_INSERT, (run_id, at, kind, message, worker, fence))


def add_schedule_event(conn: Connection, schedule: str, *, at: float, kind: str, message: str,
                       run_id: str | None = None) -> None:
    conn.execute("INSERT INTO events (run_id, at, kind, message, schedule) VALUES (?, ?, ?, ?, ?)",
                 (run_id, at, kind, message, schedule))


def last_event_like(conn: Connection, run_id: str, pattern: str) -> str | None:
    """The newest message of the run matching a LIKE pattern, read backwards from its end (the run stopped on
    it, so this stops early however long the run is)."""
    row = conn.execute("SELECT message FROM events WHERE run_id = ? AND message LIKE ? ORDER BY id DESC LIMIT 1",
                       (run_id, pattern)).fetchone()
    return row[0] if row else None


def nth_newest_at(conn: Connection, run_id: str, kind: str, n: int) -> float | None:
    """When the run's `n`-th newest event of `kind` happened, or None when it has fewer. `n` = 1 is the newest; the
    events are read backwards from the run's end."""
    row = conn.execute("SELECT at FROM events WHERE run_id = ? AND kind = ? ORDER BY id DESC LIMIT 1 OFFSET ?",
                       (run_id, kind, n - 1)).fetchone()
    return row[0] if row else None


def last_event(conn: Connection, run_id: str) -> dict | None:
    """What happened to the run most recently: often the reason an action no longer applies."""
    return one_row(conn.execute("SELECT at, kind, message, worker FROM events WHERE run_id = ? ORDER BY id DESC"
                                " LIMIT 1", (run_id,)))


PAGE = 100


def events_page(store: Store, run_id: str, after: int | None = None, limit: int = PAGE,
                newest_first: bool = False) -> list[dict]:
    """A page of the run's events after `after`, or before it with `newest_first`. It is read by a keyset cursor on
    their id, through the (run_id, id) index."""
    where = "run_id = ?"
    params: list[str | int] = [run_id]
    if after is not None:
        where += " AND id < ?" if newest_first else " AND id > ?"
        params.append(after)
    order = "DESC" if newest_first else "ASC"
    return list(store.query(f"SELECT id, at, kind, message, worker, fence FROM events WHERE {where}"
                               f" ORDER BY id {order} LIMIT ?", (*params, limit)))


def event_count(store: Store, run_id: str) -> int:
    return store.conn.execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()[0]
