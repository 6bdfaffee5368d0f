"""Worker rows and heartbeats. A heartbeat renews each lease the worker holds, carrying that
run's fence, and touches the worker's row; it writes no event."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..errors import EnvironmentStop
from ..states import Reason, RunStatus
from .base import Connection, Store, StoreError, dict_rows, on_server, one_row
from .environment import BUSY
from .events import add_event
from .host import host_id, on_this_host, process_alive, process_start
from .runs import SERVER_NOW, db_clock, lease_now
from .schema import SCHEMA_VERSION, STOPS_OLDER

STOPPED_KEPT_S = 86400.0  # a worker that said goodbye is listed for a day, then its row goes
REMOTE_SILENT_LEASES = 3  # a sender on another host counts as alive until its heartbeat is silent this many leases
_SKEW = "clock_skew:"     # meta key prefix: a worker's clock minus the server's, measured at its last heartbeat


def register(store: Store, name: str, *, pid: int, host: str, concurrency: int, lease_s: float, now: float,
             agents: list[str] | None = None, log: str | None = None) -> None:
    """Write the worker's row, with what tells later whether its process is gone.

    The row holds its process's start time (so a later process given the same pid is not taken for this
    worker), its host's id and its process group (store/holders.py: what tells that it is verifiably gone), the
    names of the agents whose runs it claims (`agents`; None, as an older worker's row, counts as every agent)
    and the absolute path of its log file (`log`; None: it keeps none). Rows of workers stopped more than a day
    ago go: every `tui-agent run` leaves one.
    `started_at` and the stop time are the worker's own clock (an effect's `attempted_at` is compared with the
    first; the second only ages a row out, a day later); the heartbeat is the lease clock's (the server's, on
    PostgreSQL)."""
    with store.write() as conn:
        at = lease_now(conn, now)
        gone = [row[0] for row in conn.execute("SELECT name FROM workers WHERE stopped_at < ?",
                                               (now - STOPPED_KEPT_S,))]
        conn.execute("DELETE FROM workers WHERE stopped_at < ?", (now - STOPPED_KEPT_S,))
        for old in gone:
            conn.execute("DELETE FROM meta WHERE key = ?", (_SKEW + old,))
        for skew in _skew(conn, name, now):
            conn.execute(*skew)
        conn.execute("INSERT INTO workers (name, pid, host, concurrency, lease_s, started_at, heartbeat_at,"
                     " stopped_at, pid_started, host_id, pgid, agents, log)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?)"
                     " ON CONFLICT (name) DO UPDATE"
                     " SET pid = excluded.pid, host = excluded.host, concurrency = excluded.concurrency,"
                     " lease_s = excluded.lease_s, started_at = excluded.started_at,"
                     " heartbeat_at = excluded.heartbeat_at, stopped_at = NULL, pid_started = excluded.pid_started,"
                     " host_id = excluded.host_id, pgid = excluded.pgid, agents = excluded.agents, log = excluded.log",
                     (name, pid, host, concurrency, lease_s, now, at, process_start(pid), host_id(host), _group(pid),
                      None if agents is None else json.dumps(sorted(agents), ensure_ascii=False), log))


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:   # the process is gone already
        return None


def _skew(conn: Connection, name: str, own: float) -> list[tuple[str, tuple]]:
    """The statement that records how far this worker's clock (`own`) is from the server's, or none on SQLite.

    It writes meta, so no column is needed: a row per worker, rewritten at each heartbeat. A SQLite file's
    workers share its host's clock, so there is no statement."""
    if not on_server(conn):
        return []
    return [("INSERT INTO meta (key, value) VALUES (?, round((? - " + SERVER_NOW + ")::numeric, 3)::text)"
             " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (_SKEW + name, own))]


def beat(store: Store, name: str, held: list[tuple[str, int]], lease_s: float, now: float) -> list[str]:
    """Renew every held lease; returns the runs whose fence was refused (another lease or a person took them).
    One batch (store.write_batch: one round trip on a server) of a shared writer: it writes only this worker's
    own rows, and each renewal is refused by its own WHERE (fence, status) on the run's row as last committed
    (an UPDATE that waited for the row checks it again); the runs are renewed in id order, so two heartbeats
    that name the same runs never deadlock. On a server each statement reads the server's clock itself, as a
    lease is judged by another machine."""
    server = on_server(store.conn)
    at, clock = (SERVER_NOW, ()) if server else ("?", (now,))
    renew = ("UPDATE runs SET lease_expires_at = extract(epoch from clock_timestamp())::float8 + ?" if server
             else "UPDATE runs SET lease_expires_at = ? + ?")   # SERVER_NOW spelled out: no status written here
    runs = sorted(held)
    statements = [*_skew(store.conn, name, now),
                  (f"UPDATE workers SET heartbeat_at = {at} WHERE name = ?", (*clock, name)),
                  *((renew + " WHERE id = ? AND fence = ? AND status = ?",
                     (*clock, lease_s, run_id, fence, RunStatus.RUNNING)) for run_id, fence in runs)]
    renewed = store.write_batch(statements)[len(statements) - len(runs):]
    return [run_id for (run_id, _), cur in zip(runs, renewed) if cur.rowcount != 1]


def stopped(store: Store, name: str, now: float) -> None:
    with store.write() as conn:
        at = lease_now(conn, now)
        conn.execute("UPDATE workers SET stopped_at = ?, heartbeat_at = ? WHERE name = ?", (now, at, name))


def release(store: Store, run_id: str, *, fence: int, worker: str, why: str, now: float, ended: bool = False) -> bool:
    """Hand a run back at once if this claim still holds it running. The run is queued and its fence bumped, so a
    late write from this worker is refused; a settle whose commit went unanswered may have ended it already. `ended`:
    the claim's thread has returned, so it calls nothing more: recorded as `let_go` records it, in the same write."""
    with store.write() as conn:
        if ended:
            _let_go(conn, run_id, fence, worker, now)
        cur = conn.execute("UPDATE runs SET status = ?, reason = ?, fence = fence + 1, worker = NULL,"
                           " lease_expires_at = NULL, updated_at = ? WHERE id = ? AND fence = ? AND status = ?",
                           (RunStatus.QUEUED, Reason.RESUMED, now, run_id, fence, RunStatus.RUNNING))
        if cur.rowcount == 1:
            add_event(conn, run_id, at=now, kind=RunStatus.QUEUED,
                      message=f"released by {worker} ({why}); claimable now", worker=worker, fence=fence)
        return cur.rowcount == 1


def workers_listing(store: Store) -> list[dict]:
    """Every worker with the runs it holds now (lease and fence of each). On a server, each row also has
    `judged_at`, the server's clock at this read (heartbeats and leases are its instants, so a reader on
    another machine judges them by it), and `clock_skew_s`, how far the worker's own clock was from the
    server's at its last heartbeat (None on SQLite, whose workers share one host's clock). There `heartbeat_at`
    is shown by the worker's own clock (a clock a day ahead reads "clock ahead 23h", as on SQLite), and the
    server's instant, which liveness judges, is `server_heartbeat_at`."""
    workers = list(store.query("SELECT * FROM workers ORDER BY started_at DESC"))
    held = list(store.query("SELECT id, agent, worker, lease_expires_at, fence FROM runs"
                               " WHERE status = ? AND worker IS NOT NULL ORDER BY id", (RunStatus.RUNNING,)))
    judged_at = db_clock(store.conn)
    skews = {} if judged_at is None else {
        row["key"][len(_SKEW):]: float(row["value"])
        for row in store.query("SELECT key, value FROM meta WHERE key LIKE ?", (_SKEW + "%",))}
    for worker in workers:
        worker["runs"] = [r for r in held if r["worker"] == worker["name"]]
        worker["agents"] = _agents(worker["agents"])
        skew = worker["clock_skew_s"] = skews.get(worker["name"])
        if judged_at is not None:
            worker["judged_at"], worker["server_heartbeat_at"] = judged_at, worker["heartbeat_at"]
            if skew is not None:   # shown as the worker's own clock stamped it, as a SQLite file stores it
                worker["heartbeat_at"] += skew
    return workers


def _agents(stored: str | None) -> list[str] | None:
    """A row's `agents` as a list; None (every agent) for an older worker's row, or one another program spoiled."""
    try:
        found = json.loads(stored) if stored else None
    except ValueError:
        return None
    return found if isinstance(found, list) and all(isinstance(a, str) for a in found) else None


def knows(worker: dict, agent: str) -> bool:
    """Whether a worker (a `workers_listing` row) claims runs of `agent`: an older worker's row says nothing, and
    counts as knowing every agent."""
    return worker["agents"] is None or agent in worker["agents"]


def let_go(store: Store, run_id: str, fence: int, worker: str, now: float) -> None:
    """Record, for a worker whose write the fence refused, that its claim calls nothing more. A run held back because
    its attempt might still go out can then go on (store.effects.requeue_released)."""
    with store.write() as conn:
        _let_go(conn, run_id, fence, worker, now)


def _let_go(conn: Connection, run_id: str, fence: int, worker: str, now: float) -> None:
    conn.execute("INSERT INTO let_go (run_id, fence, worker, at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                 (run_id, fence, worker, now))


def still_sending(conn: Connection, effect: Mapping[str, Any], now: float) -> tuple[dict | None, str]:
    """The worker row of the claim that made the effect's latest attempt, if that attempt may still go out, else None
    and why not. It may still go out while its process lives: running, paused or hung. A process on another host
    cannot be seen: it counts as alive until its heartbeat has been silent for REMOTE_SILENT_LEASES leases (by the
    lease clock: `now`, the process's, on SQLite; the server's on PostgreSQL). A worker that never registered (an
    in-process caller) cannot be checked."""
    name = effect["attempted_by"]
    if name is None:
        return None, "nobody attempted it"
    if conn.execute("SELECT 1 FROM let_go WHERE run_id = ? AND fence = ?",
                    (effect["run_id"], effect["fence"])).fetchone():
        return None, f"{name} let go of the run"
    row = one_row(conn.execute("SELECT name, pid, host, host_id, pid_started, started_at, heartbeat_at, lease_s,"
                               " stopped_at FROM workers WHERE name = ?", (name,)))
    if row is None:
        return None, f"{name} is not a registered worker process"
    if effect["attempted_at"] is not None and row["started_at"] > effect["attempted_at"]:
        return None, f"{name} was started again since (pid {row['pid']}), so the process that attempted it has ended"
    if on_this_host(row):
        if not process_alive(row["pid"], row["pid_started"]):
            return None, f"{name}'s process {row['pid']} has ended"
        return row, ""
    if row["stopped_at"] is not None:
        return None, f"{name} on {row['host']} has stopped"
    silent_for = REMOTE_SILENT_LEASES * (row["lease_s"] or 0)
    silent = lease_now(conn, now) - row["heartbeat_at"]
    if silent >= silent_for:
        return None, (f"{name} on {row['host']} has been silent for {silent:.0f}s ({REMOTE_SILENT_LEASES} leases"
                      f" of {row['lease_s']:g}s)")
    return row, ""


def still_running(conn: Connection, now: float) -> list[str]:
    """Inside a write: the workers that may still be running on this database (not stopped), each named with how
    to find it. On this host a row with its process's start time is judged by the process (still there); one
    without it (an older tui-agent's row) cannot tell its process from a later one given the same pid (pid 1 is
    always there), so it is judged as a worker on another host is, as still_sending judges a sender: by its
    heartbeat, silent for fewer than REMOTE_SILENT_LEASES leases (by the lease clock), and then its pid too."""
    at = lease_now(conn, now)
    found = []
    for w in dict_rows(conn.execute("SELECT * FROM workers WHERE stopped_at IS NULL ORDER BY name")):   # any version's
        here, started = on_this_host(w), w.get("pid_started")
        if here and started is not None:
            if process_alive(w["pid"], started):
                found.append(f"{w['name']} (pid {w['pid']} on this host)")
            continue
        left = REMOTE_SILENT_LEASES * (w["lease_s"] or 0) - (at - w["heartbeat_at"])
        if left > 0 and (not here or process_alive(w["pid"], None)):
            where = "this host" if here else w["host"]
            found.append(f"{w['name']} (pid {w['pid']} on {where}; if it has stopped, it counts as gone once its "
                         f"heartbeat has been silent for {REMOTE_SILENT_LEASES} leases, in {left:.0f} s)")
    return found


def refuse_migration_while_running(conn: Connection, where: object, found: int, now: float) -> None:
    """Refuse a migration older code does not survive while a worker may still be running that code.

    It runs inside the migrating write, before it, for schema.STOPS_OLDER, so none of the workers' runs fails;
    nothing is changed."""
    versions = [v for v in STOPS_OLDER if found < v <= SCHEMA_VERSION]
    if versions and (workers := still_running(conn, now)):
        raise EnvironmentStop(BUSY, f"{where} must be upgraded to schema version {max(versions)} for this tui-agent, "
                              f"and worker {', '.join(workers[:3])} of an older tui-agent may still be running on it "
                              "(its runs would fail); stop it (Ctrl-C where it runs) and run the command again; "
                              "nothing was changed")


class WorkerNotFound(StoreError):
    pass


def find_worker(store: Store, ref: str) -> dict:
    """The worker row `ref` names: its name, the one name that starts with it, or its pid (as `workers` lists it)."""
    rows = list(store.query("SELECT * FROM workers ORDER BY started_at DESC"))
    for found in ([r for r in rows if r["name"] == ref], [r for r in rows if ref and r["name"].startswith(ref)],
                  [r for r in rows if ref.isdigit() and r["pid"] == int(ref)]):
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise WorkerNotFound(f"worker {ref!r} is ambiguous ({', '.join(r['name'] for r in found[:3])}, ...); "
                                 "type more of its name")
    raise WorkerNotFound(f"no worker is named {ref!r} (nor has that pid); tui-agent workers --all lists them")
