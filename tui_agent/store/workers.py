"""Worker rows and heartbeats. A heartbeat renews each lease the worker holds, carrying that
run's fence, and touches the worker's row; it writes no event."""

from __future__ import annotations

from .db import Store
from .events import add_event


def register(store: Store, name: str, pid: int, host: str, concurrency: int, lease_s: float, now: float) -> None:
    with store.write() as conn:
        conn.execute("INSERT OR REPLACE INTO workers (name, pid, host, concurrency, lease_s, started_at,"
                     " heartbeat_at, stopped_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                     (name, pid, host, concurrency, lease_s, now, now))


def beat(store: Store, name: str, held: list[tuple[str, int]], lease_s: float, now: float) -> list[str]:
    """Renew every held lease; returns the runs whose fence was refused (another lease or a person took them)."""
    lost = []
    with store.write() as conn:
        conn.execute("UPDATE workers SET heartbeat_at = ? WHERE name = ?", (now, name))
        for run_id, fence in held:
            cur = conn.execute("UPDATE runs SET lease_expires_at = ? WHERE id = ? AND fence = ? AND status = 'running'",
                               (now + lease_s, run_id, fence))
            if cur.rowcount != 1:
                lost.append(run_id)
    return lost


def stopped(store: Store, name: str, now: float) -> None:
    with store.write() as conn:
        conn.execute("UPDATE workers SET stopped_at = ?, heartbeat_at = ? WHERE name = ?", (now, now, name))


def release(store: Store, run_id: str, fence: int, worker: str, why: str, now: float) -> bool:
    """Hand a run back at once (queued, fence bumped so a late write from this worker is refused)."""
    with store.write() as conn:
        cur = conn.execute("UPDATE runs SET status = 'queued', reason = 'resumed', fence = fence + 1, worker = NULL,"
                           " lease_expires_at = NULL, updated_at = ? WHERE id = ? AND fence = ?",
                           (now, run_id, fence))
        if cur.rowcount == 1:
            add_event(conn, run_id, now, "queued", f"released by {worker} ({why}); claimable now", worker, fence)
        return cur.rowcount == 1


def workers_listing(store: Store) -> list[dict]:
    """Every worker with the runs it holds now (lease and fence of each)."""
    workers = list(store.db.query("SELECT * FROM workers ORDER BY started_at DESC"))
    held = list(store.db.query("SELECT id, agent, worker, lease_expires_at, fence FROM runs"
                               " WHERE status = 'running' AND worker IS NOT NULL ORDER BY id"))
    for worker in workers:
        worker["runs"] = [r for r in held if r["worker"] == worker["name"]]
    return workers
