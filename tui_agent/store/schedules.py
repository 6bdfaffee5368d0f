"""Schedule rows. The firing rules live in runtime/schedule.py; this is only their storage."""

from __future__ import annotations

from .base import Connection, Store, decoding, one_row
from .runs import RunNotFound


def add(store: Store, row: dict) -> None:
    with store.write() as conn:
        if conn.execute("SELECT 1 FROM schedules WHERE name = ?", (row["name"],)).fetchone():
            raise RunNotFound(f"a schedule named {row['name']!r} exists; remove it first or pick another name")
        columns = ", ".join(row)
        conn.execute(f"INSERT INTO schedules ({columns}) VALUES ({', '.join('?' for _ in row)})", tuple(row.values()))


def get(conn: Connection, name: str) -> dict:
    with decoding("schedules"):
        row = one_row(conn.execute("SELECT * FROM schedules WHERE name = ?", (name,)))
    if row is None:
        raise _missing(name)
    return row


def _missing(name: str) -> RunNotFound:
    return RunNotFound(f"no schedule named {name!r}; see tui-agent schedule ls")


def update(conn: Connection, name: str, **fields) -> None:
    assignments = ", ".join(f"{column} = ?" for column in fields)
    conn.execute(f"UPDATE schedules SET {assignments} WHERE name = ?", (*fields.values(), name))


def remove(store: Store, name: str) -> None:
    """Remove it, whatever its row holds (one whose input cannot be read is removed as any other)."""
    with store.write() as conn:
        if conn.execute("DELETE FROM schedules WHERE name = ?", (name,)).rowcount != 1:
            raise _missing(name)


def listing(store: Store) -> list[dict]:
    with decoding("schedules"):
        return list(store.query("SELECT * FROM schedules ORDER BY name"))


def due_names(store: Store, now: float) -> list[str]:
    """Enabled schedules with a fire due or a pending fire waiting: one cheap read for an idle worker."""
    return [r[0] for r in store.conn.execute(
        "SELECT name FROM schedules WHERE enabled = 1 AND (next_fire_at <= ? OR pending_fire_at IS NOT NULL)"
        " ORDER BY name", (now,))]


def run_status(conn: Connection, run_id: str | None) -> tuple[str, str | None] | None:
    row = conn.execute("SELECT status, reason FROM runs WHERE id = ?", (run_id,)).fetchone() if run_id else None
    return None if row is None else (row[0], row[1])


def recent_runs(store: Store, name: str, limit: int = 8) -> list[dict]:
    """The runs the schedule's latest fires started, newest first (found through its `fired` events)."""
    return list(store.query(
        "SELECT r.id, r.status, r.reason, r.created_at, r.finished_at FROM events e JOIN runs r ON r.id = e.run_id"
        " WHERE e.schedule = ? AND e.kind = 'fired' ORDER BY e.id DESC LIMIT ?", (name, limit)))


def schedule_events(store: Store, name: str, limit: int = 20) -> list[dict]:
    """The schedule's own events (fired, missed, held back by its overlap policy), newest first."""
    return list(store.query("SELECT at, kind, message, run_id FROM events WHERE schedule = ? ORDER BY id DESC"
                               " LIMIT ?", (name, limit)))
