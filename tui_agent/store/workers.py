"""Worker rows and heartbeats. A heartbeat renews each lease the worker holds, carrying that
run's fence, and touches the worker's row; it writes no event."""

from __future__ import annotations

import os
import socket
import sqlite3
from pathlib import Path

from ..states import Reason, RunStatus
from .base import Store, one_row
from .events import add_event

_PROC = Path("/proc")
STOPPED_KEPT_S = 86400.0  # a worker that said goodbye is listed for a day, then its row goes


def register(store: Store, name: str, pid: int, host: str, concurrency: int, lease_s: float, now: float) -> None:
    """The worker's row, with its process's start time, so a later process given the same pid is not taken
    for this worker. Rows of workers stopped more than a day ago go: every `tui-agent run` leaves one."""
    with store.write() as conn:
        conn.execute("DELETE FROM workers WHERE stopped_at < ?", (now - STOPPED_KEPT_S,))
        conn.execute("INSERT INTO workers (name, pid, host, concurrency, lease_s, started_at, heartbeat_at,"
                     " stopped_at, pid_started) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?) ON CONFLICT (name) DO UPDATE"
                     " SET pid = excluded.pid, host = excluded.host, concurrency = excluded.concurrency,"
                     " lease_s = excluded.lease_s, started_at = excluded.started_at,"
                     " heartbeat_at = excluded.heartbeat_at, stopped_at = NULL, pid_started = excluded.pid_started",
                     (name, pid, host, concurrency, lease_s, now, now, process_start(pid)))


def beat(store: Store, name: str, held: list[tuple[str, int]], lease_s: float, now: float) -> list[str]:
    """Renew every held lease; returns the runs whose fence was refused (another lease or a person took them)."""
    lost = []
    with store.write() as conn:
        conn.execute("UPDATE workers SET heartbeat_at = ? WHERE name = ?", (now, name))
        for run_id, fence in held:
            cur = conn.execute("UPDATE runs SET lease_expires_at = ? WHERE id = ? AND fence = ? AND status = ?",
                               (now + lease_s, run_id, fence, RunStatus.RUNNING))
            if cur.rowcount != 1:
                lost.append(run_id)
    return lost


def stopped(store: Store, name: str, now: float) -> None:
    with store.write() as conn:
        conn.execute("UPDATE workers SET stopped_at = ?, heartbeat_at = ? WHERE name = ?", (now, now, name))


def release(store: Store, run_id: str, fence: int, worker: str, why: str, now: float) -> bool:
    """Hand a run back at once (queued, fence bumped so a late write from this worker is refused)."""
    with store.write() as conn:
        cur = conn.execute("UPDATE runs SET status = ?, reason = ?, fence = fence + 1, worker = NULL,"
                           " lease_expires_at = NULL, updated_at = ? WHERE id = ? AND fence = ?",
                           (RunStatus.QUEUED, Reason.RESUMED, now, run_id, fence))
        if cur.rowcount == 1:
            add_event(conn, run_id, now, RunStatus.QUEUED, f"released by {worker} ({why}); claimable now", worker,
                      fence)
        return cur.rowcount == 1


def workers_listing(store: Store) -> list[dict]:
    """Every worker with the runs it holds now (lease and fence of each)."""
    workers = list(store.query("SELECT * FROM workers ORDER BY started_at DESC"))
    held = list(store.query("SELECT id, agent, worker, lease_expires_at, fence FROM runs"
                               " WHERE status = ? AND worker IS NOT NULL ORDER BY id", (RunStatus.RUNNING,)))
    for worker in workers:
        worker["runs"] = [r for r in held if r["worker"] == worker["name"]]
    return workers


def let_go(store: Store, run_id: str, fence: int, worker: str, now: float) -> None:
    """A worker whose write the fence refused says so: that claim calls nothing more, so a run held back
    because its attempt might still go out can go on (store.effects.requeue_released)."""
    with store.write() as conn:
        conn.execute("INSERT INTO let_go (run_id, fence, worker, at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                     (run_id, fence, worker, now))


def still_sending(conn: sqlite3.Connection, effect: dict) -> tuple[dict | None, str]:
    """The worker row of the claim that made the effect's latest attempt while that attempt may still go out
    (its process lives: running, paused or hung; a process on another host cannot be seen, so it counts as
    alive), else None and why not. A worker that never registered (an in-process caller) cannot be checked."""
    name = effect["attempted_by"]
    if name is None:
        return None, "nobody attempted it"
    if conn.execute("SELECT 1 FROM let_go WHERE run_id = ? AND fence = ?",
                    (effect["run_id"], effect["fence"])).fetchone():
        return None, f"{name} let go of the run"
    row = one_row(conn.execute("SELECT name, pid, host, pid_started, started_at FROM workers WHERE name = ?",
                               (name,)))
    if row is None:
        return None, f"{name} is not a registered worker process"
    if effect["attempted_at"] is not None and row["started_at"] > effect["attempted_at"]:
        return None, f"{name} was started again since (pid {row['pid']}), so the process that attempted it has ended"
    if row["host"] == socket.gethostname() and not process_alive(row["pid"], row["pid_started"]):
        return None, f"{name}'s process {row['pid']} has ended"
    return row, ""


def process_start(pid: int) -> int | None:
    """When the process started (clock ticks after boot, /proc/<pid>/stat field 22); None without /proc."""
    try:
        return int(_stat(pid)[19])
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, started: int | None) -> bool:
    """Whether the process that registered still exists: a stopped (SIGSTOP) or hung one does; a zombie, a
    missing pid, or a pid now held by a process that started at another time does not."""
    if not (_PROC / "self" / "stat").exists():  # no /proc (not Linux): the kernel can still say whether the pid is used
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        fields = _stat(pid)
    except OSError:
        return False
    return fields[0] not in ("Z", "X") and (started is None or int(fields[19]) == started)


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (the state) on; field 2, the command name, may hold spaces and ')'."""
    return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
