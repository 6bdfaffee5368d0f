"""Run rows: creation (with an optional dedupe key), lookup by id prefix, claims
with a lease and a fence, and fenced status transitions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Literal, TypedDict, Unpack, cast, overload

from ..errors import UserError
from ..filters import Filter
from ..states import SELF_WAKING, TERMINAL, EffectState, EventKind, Reason, RunStatus, needs_person
from . import ids
from .base import (
    Connection,
    Store,
    StoreError,
    decoding,
    dict_rows,
    for_update,
    on_server,
    one_row,
    refuse_stale,
)
from .commands import end_left
from .events import add_event
from .holders import HELD_HERE, Holder, clear, holders_of, takeable_rows
from .host import this_host_id
from .imported import NOT_IMPORTED
from .journal import folding, naming
from .model_calls import copy_for_fork
from .notices import record as record_notice
from .rows import RunRow
from .schema import CHECKPOINT_SCHEMA


class RunNotFound(StoreError):
    pass


@dataclass(frozen=True)
class Claim:
    """What a worker holds after claiming a run: every write it makes carries `fence`."""

    run_id: str
    agent: str
    code_version: str | None
    generation: int
    attempt: int
    fence: int
    worker: str
    lease_s: float
    claimed_at: float


def _new_id(conn: Connection) -> str:
    """An id no run has, nor had before prune removed it (a kept key still names that run)."""
    while True:
        run_id = f"r-{ids.token(4)}"
        if conn.execute("SELECT 1 FROM runs WHERE id = ? UNION ALL SELECT 1 FROM kept_keys WHERE run_id = ?",
                        (run_id, run_id)).fetchone() is None:
            return run_id


def request_digest(request: str) -> str:
    """A digest of a run's request (JSON text) that spacing and field order do not change. A kept run key compares a
    new run's request with it, once its run is removed."""
    canonical = json.dumps(json.loads(request), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


class RunFields(TypedDict):
    """The columns of a new run, as `insert_run` takes them (`Registry.run_fields`)."""

    agent: str
    agent_version: str
    code_version: str
    request: str
    budget: str
    model: str
    script: str | None


def create_run(store: Store, *, now: float, run_key: str | None = None,
               **fields: Unpack[RunFields]) -> tuple[str, bool]:
    """Queue a new run; with `run_key`, a second call returns the first run (created False)."""
    with store.write() as conn:
        return insert_run(conn, now=now, run_key=run_key, **fields)


def insert_run(conn: Connection, *, agent: str, agent_version: str, code_version: str, request: str,
               budget: str, model: str, now: float, run_key: str | None = None,
               script: str | None = None) -> tuple[str, bool]:
    """Insert the run row, its checkpoint and its first event, inside a write. When `run_key` already names a run, or
    named one before prune removed it (kept_keys), that run instead. `script`: a `scripted:FILE` model's replies
    (JSON), kept with the run."""
    if run_key is not None:
        row = conn.execute("SELECT id, agent, request FROM runs WHERE run_key = ?", (run_key,)).fetchone()
        if row:
            difference = _difference(row[1], row[2], agent, request)
            if difference:  # a key names one run: handing back a run of another request would hide the mistake
                raise UserError(f"run key {run_key!r} already names run {row[0]}, which {difference}; pass the "
                                f"same agent and input to get {row[0]}, or another key for a new run")
            return row[0], False
        kept = conn.execute("SELECT run_id, name, result FROM kept_keys WHERE kind = 'run' AND key = ?",
                            (run_key,)).fetchone()
        if kept:   # its run was removed by prune: the key still names it, so nothing new is started
            difference = (f"was a run of {kept[1]}, not {agent}" if kept[1] != agent else
                          "had another input" if kept[2] != request_digest(request) else None)
            if difference:
                raise UserError(f"run key {run_key!r} named run {kept[0]} (removed by prune), which {difference}; "
                                "pass another key for a new run")
            return kept[0], False
    run_id = _new_id(conn)
    conn.execute(
        "INSERT INTO runs (id, agent, agent_version, code_version, request, run_key, budget, model, script, status,"
        " reason, attempt, fence, generation, artifact_dir, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, 1, ?, ?, ?)",
        (run_id, agent, agent_version, code_version, request, run_key, budget, model, script, RunStatus.QUEUED,
         Reason.NEW, f"artifacts/{run_id}", now, now),
    )
    conn.execute("INSERT INTO checkpoints (run_id, generation, schema_version, updated_at) VALUES (?, 1, ?, ?)",
                 (run_id, CHECKPOINT_SCHEMA, now))
    add_event(conn, run_id, at=now, kind=RunStatus.QUEUED, message=f"queued ({agent} v{agent_version})")
    return run_id, True


_ABSENT = object()  # a field one request lacks differs from any value, None included


def _difference(had_agent: str, had_request: str, agent: str, request: str) -> str | None:
    """How a run a key names differs from the one asked for, or None. Requests compare as parsed JSON,
    so spacing and field order never count."""
    if had_agent != agent:
        return f"is a run of {had_agent}, not {agent}"
    had, wanted = json.loads(had_request), json.loads(request)
    if had == wanted:
        return None
    if not (isinstance(had, dict) and isinstance(wanted, dict)):
        return "has another input"
    fields = sorted(k for k in had.keys() | wanted.keys() if had.get(k, _ABSENT) != wanted.get(k, _ABSENT))
    return f"has other input field{'s' * (len(fields) != 1)}: {', '.join(fields)}"


def resolve_run(store: Store, prefix: str) -> str:
    """The one run whose id starts with `prefix` (the `r-` may be left out)."""
    prefix = prefix.strip()
    candidates = [prefix] if prefix.startswith("r-") else [prefix, f"r-{prefix}"]
    for candidate in candidates:
        if not candidate:
            continue
        escaped = candidate.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = store.conn.execute("SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY id LIMIT 3",
                                  (escaped + "%",)).fetchall()
        if len(rows) == 1:
            return rows[0][0]
        if len(rows) > 1:
            shown = ", ".join(r[0] for r in rows)
            raise RunNotFound(f"run id {prefix!r} is ambiguous ({shown}, ...); type more of it")
    raise RunNotFound(f"no run has an id starting with {prefix!r}; see tui-agent ls")


def _listed(values: tuple[str, ...]) -> str:
    """Constants as SQL literals, for the WHERE clauses a partial index must match (a parameter cannot)."""
    return ", ".join(f"'{v}'" for v in values)


# A sleep or a back-off wakes by the run's own clock (`:now`: a scenario's, or the process's, which tests move); a
# lease expires by the lease clock (`:lease_now`: the server's on PostgreSQL, where several machines judge it). A
# run imported from another database is never due here (store/imported.py).
_DUE = (
    f"(status = '{RunStatus.QUEUED}'"
    f" OR (status = '{RunStatus.WAITING}' AND reason IN ({_listed(SELF_WAKING)}) AND wake_at <= :now)"
    f" OR (status = '{RunStatus.RUNNING}' AND lease_expires_at <= :lease_now)) AND {NOT_IMPORTED}"
)
_CLAIM_COLUMNS = "id, agent, code_version, generation, attempt, fence, status, worker"


TAKEOVER_LOOP = 5  # takeovers without a new journal entry before a run is parked instead of claimed again


def _takeovers_since_progress(conn: Connection, run_id: str) -> int:
    """Takeovers since the run's checkpoint last moved (a journal entry, a failed attempt): bounded reads."""
    moved = conn.execute("SELECT updated_at FROM checkpoints_now WHERE run_id = ?", (run_id,)).fetchone()[0]
    return conn.execute("SELECT count(*) FROM (SELECT 1 FROM events WHERE run_id = ? AND kind = 'takeover'"
                        " AND at >= ? ORDER BY id DESC LIMIT ?) AS recent",
                        (run_id, moved, TAKEOVER_LOOP)).fetchone()[0]


def _loops(conn: Connection, row: tuple) -> bool:
    """Whether a due run (a claim's row) is in a takeover loop, to be parked rather than claimed."""
    return row[6] == RunStatus.RUNNING and _takeovers_since_progress(conn, row[0]) >= TAKEOVER_LOOP


def db_clock(conn: Connection) -> float | None:
    """The database server's clock as epoch seconds (one round trip), or None on SQLite. Leases and heartbeats
    are written by one machine and judged by another, so on a server they are read from its clock; a SQLite
    file has one host, whose clock (the process's, which tests and the simulator move) is the lease clock."""
    if not on_server(conn):
        return None
    return float(conn.execute(f"SELECT {SERVER_NOW}").fetchone()[0])


SERVER_NOW = "extract(epoch from clock_timestamp())::float8"


def lease_now(conn: Connection, local: float) -> float:
    """The instant lease and heartbeat decisions use: the server's clock, else `local` (the process's)."""
    found = db_clock(conn)
    return local if found is None else found


def _take(conn: Connection, row: tuple, *, worker: str, lease_s: float, now: float,
          lease_at: float | None = None, why: str | None = None) -> Claim | None:
    """Give the picked run `row` to `worker` under a new fence and lease, or park it and return None.

    It is parked instead when it was taken over too often without a new journal entry, or when a program an
    earlier claim started survived SIGKILL.

    `now` is this process's clock (events, the claim's own bookkeeping); `lease_at` is the lease clock's. `why`
    says why a running run whose lease has not ended may be taken (its holder is verifiably gone)."""
    lease_at = now if lease_at is None else lease_at
    run_id, agent, code_version, generation, attempt, fence, status, previous = row
    if _loops(conn, row):
        park(conn, run_id, expected=RunStatus.RUNNING,
             message=f"parked: taken over {TAKEOVER_LOOP} times in a row without a new journal entry; a step may "
                     f"outlast the lease ({lease_s:g}s): run workers with a longer --lease, then resume it",
             now=now, reason=Reason.TAKEOVER_LOOP)
        return None
    fence, attempt = fence + 1, attempt + 1
    # what an earlier claim's programs left (store/commands.py); a run's first claim has no earlier one
    if attempt > 1 and end_left(conn, run_id, now, worker, fence):
        park(conn, run_id, expected=status,
             message="parked: a program an earlier claim started survived SIGKILL (see the events); "
                     f"end its process group, then tui-agent resume {run_id}", now=now, reason=Reason.ENVIRONMENT)
        return None
    conn.execute(
        "UPDATE runs SET status = ?, reason = NULL, worker = ?, lease_expires_at = ?, fence = ?,"
        " attempt = ?, wake_at = NULL, started_at = coalesce(started_at, ?), updated_at = ? WHERE id = ?",
        (RunStatus.RUNNING, worker, lease_at + lease_s, fence, attempt, now, now, run_id),
    )
    claimed = f"claimed by {worker} (attempt {attempt}, fence {fence})"
    if status == RunStatus.RUNNING:
        said = f"{previous}: {why}" if why else f"lease of {previous} expired"
        add_event(conn, run_id, at=now, kind=EventKind.TAKEOVER, message=f"{said}; {claimed}", worker=worker,
                  fence=fence)
        return Claim(run_id, agent, code_version, generation, attempt, fence, worker, lease_s, now)
    if status == RunStatus.WAITING:
        add_event(conn, run_id, at=now, kind=EventKind.WOKE, message="woke: its wait is over")
    add_event(conn, run_id, at=now, kind=EventKind.CLAIMED, message=claimed, worker=worker, fence=fence)
    return Claim(run_id, agent, code_version, generation, attempt, fence, worker, lease_s, now)


Clock = Callable[[], float]


def _at(now: float | Clock) -> float:
    """A claim's time, read once the write lock is held. A claim that waited for the lock must not commit a lease
    that already ran out while it waited: another worker would take the run at once."""
    return now() if callable(now) else now


def claim_next(store: Store, worker: str, *, lease_s: float, agents: list[str], now: float | Clock,
               avoid: Collection[str] = ()) -> Claim | None:
    """Claim the oldest due run of one of `agents`, or else a run whose holder is verifiably gone.

    A worker only takes agents it can run. None of `avoid` is taken: the runs this process still has a thread
    inside a call of, which it gave up on (runtime/deadlines.py). With none due, a run of those agents whose
    holder is verifiably gone from this host is claimed (store/holders.py)."""
    if not agents:
        return None
    pick, params = _among(agents, avoid)
    return _claim(store, pick, params=params, worker=worker, lease_s=lease_s, now=now)


@overload
def _among(agents: list[str], avoid: Collection[str], mark: Literal[":"] = ":") -> tuple[str, dict]: ...
@overload
def _among(agents: list[str], avoid: Collection[str], mark: Literal["?"]) -> tuple[str, tuple]: ...


def _among(agents: list[str], avoid: Collection[str], mark: Literal[":", "?"] = ":") -> tuple[str, dict | tuple]:
    """The condition on a run's columns for runs of `agents`, none of `avoid`, with its parameters.

    The parameters are named (`mark` ':', a dict) or positional (`mark` '?', a tuple)."""
    named = mark == ":"
    agent_marks = ", ".join(f":a{i}" if named else "?" for i in range(len(agents)))
    pick = f"agent IN ({agent_marks})"
    if avoid:
        pick += " AND id NOT IN (" + ", ".join(f":v{i}" if named else "?" for i in range(len(avoid))) + ")"
    if named:
        return pick, {**{f"a{i}": a for i, a in enumerate(agents)}, **{f"v{i}": r for i, r in enumerate(avoid)}}
    return pick, (*agents, *avoid)


def _due_read(store: Store, now: float) -> tuple[str, tuple]:
    """_DUE for a plain read (not a claim) and its parameters: on a server its clock judges leases, read in the
    statement."""
    server = on_server(store.conn)
    return (_DUE.replace(":now", "?").replace(":lease_now", SERVER_NOW if server else "?"),
            (now,) if server else (now, now))


def any_due(store: Store, agents: list[str], now: float, avoid: Collection[str] = ()) -> bool:
    """Whether a claim would find a due run, read cheaply before its write transaction so an idle worker does not
    take the write lock. It is one statement, which also lists this host's workers that hold live leases on runs of
    `agents`, so a run whose holder is verifiably gone counts as due; their processes are probed, nothing is killed.
    `avoid`: as for claim_next."""
    if not agents:
        return False
    pick, picked = _among(agents, avoid, "?")
    sql, params = _due_read(store, now)
    lease_sql = SERVER_NOW if on_server(store.conn) else "?"   # a server's clock judges leases, in the statement
    held = HELD_HERE.format(lease_now=lease_sql, host_id="?")
    lease = () if on_server(store.conn) else (now,)
    rows = dict_rows(store.conn.execute(
        f"SELECT NULL AS name, NULL AS pid, NULL AS host, NULL AS host_id, NULL AS pid_started, NULL AS pgid FROM"
        f" (SELECT 1 FROM runs WHERE {sql} AND {pick} LIMIT 1) AS due"
        f" UNION ALL {held} AND {pick}",
        (*params, *picked, *lease, this_host_id(), *picked)))
    held_rows = []
    for row in rows:
        if row["name"] is None:
            return True
        held_rows.append(row)
    return bool(takeable_rows(held_rows))


def due_of_others(store: Store, agents: list[str], now: float) -> list[tuple[str, int, int]]:
    """The agents not among `agents` that have due runs, by name, each with how many are due and how many of those
    are queued. The others woke, or their lease ran out. This is what a worker that knows only `agents` leaves."""
    sql, params = _due_read(store, now)
    others = f" AND agent NOT IN ({', '.join('?' for _ in agents)})" if agents else ""
    return [(agent, due, queued) for agent, due, queued in store.conn.execute(
        f"SELECT agent, count(*), sum(CASE WHEN status = '{RunStatus.QUEUED}' THEN 1 ELSE 0 END) FROM runs"
        f" WHERE {sql}{others} GROUP BY agent ORDER BY agent", (*params, *agents))]


def claim_run(store: Store, run_id: str, worker: str, lease_s: float, now: float | Clock) -> Claim | None:
    """Claim this run if it is due, or held by a worker verifiably gone from this host; None when it is not
    (another worker holds it, or it ended)."""
    return _claim(store, "id = :id", params={"id": run_id}, worker=worker, lease_s=lease_s, now=now)


def _claim(store: Store, pick: str, *, params: dict, worker: str, lease_s: float, now: float | Clock) -> Claim | None:
    """Claim a run that `pick` selects, in a shared write (store.write_shared).

    `pick` is a condition on the run's columns. On a server the SELECT locks the run's row and passes over rows
    another transaction holds (SKIP LOCKED: another claim's, or a step commit's), so claimers never wait for
    each other nor take one run twice, and the row it returns was found due on its newest committed version.
    Parking a run instead records a notice, whose id displays read as a cursor, so it must commit in id order:
    that one is done again in an exclusive write."""
    exclusive = False
    while True:
        with store.write() if exclusive else store.write_shared() as conn:
            at = _at(now)
            lease_at = lease_now(conn, at)
            values = {**params, "now": at, "lease_now": lease_at}
            row = conn.execute(f"SELECT {_CLAIM_COLUMNS} FROM runs WHERE {_DUE} AND {pick} ORDER BY created_at"
                               f" LIMIT 1{for_update(conn, skip_locked=True)}", values).fetchone()
            why = None
            if row is None:
                row, why = _from_gone(conn, pick, values)
            if row is None or exclusive or not _loops(conn, row):
                return row and _take(conn, row, worker=worker, lease_s=lease_s, now=at, lease_at=lease_at, why=why)
        exclusive = True


def _from_gone(conn: Connection, pick: str, values: dict) -> tuple[tuple | None, str | None]:
    """The oldest picked run whose holder is verifiably gone, and why it may be taken, inside a claim's write.

    Such a run is held, with a live lease, by a worker of this host whose process is verifiably gone; it is
    returned once what was left of its process group is killed (store/holders.py). Returns (None, None) when
    there is none."""
    held = HELD_HERE.format(lease_now=":lease_now", host_id=":host_id")
    rows = dict_rows(conn.execute(f"{held} AND {pick}",
                                  {**values, "host_id": this_host_id()}))
    for holder_row, holder in takeable_rows(rows):
        why = clear(holder_row, holder)
        if why is None:
            continue
        row = conn.execute(f"SELECT {_CLAIM_COLUMNS} FROM runs WHERE status = '{RunStatus.RUNNING}' AND worker ="
                           f" :holder AND lease_expires_at > :lease_now AND {pick} AND {NOT_IMPORTED}"
                           " ORDER BY created_at LIMIT 1"
                           f"{for_update(conn, skip_locked=True)}", {**values, "holder": holder_row["name"]}).fetchone()
        if row is not None:
            return row, why
    return None, None


def takeover_why(conn: Connection, run: dict, now: float) -> str | None:
    """Why a claim may take a running run now, or None when it may not; read inside a write.

    It may when its holder is verifiably gone from this host (what was left of its process group killed first),
    or when its lease is over."""
    row, holder = holders_of(conn, [run["worker"]]).get(run["worker"], (None, Holder(run["worker"] or "")))
    if holder.takeable:
        assert row is not None   # judge finds takeable only a holder whose worker row it read
        why = clear(row, holder)
        return why and f"{run['worker']}: {why}"
    if (run["lease_expires_at"] or 0) <= lease_now(conn, now):
        return f"the lease of {run['worker']} expired"
    return None


def check_fence(conn: Connection, run_id: str, fence: int, now: float, lease_until: float | None) -> None:
    """Inside a write: refuse unless `fence` is still the run's; renews the lease as it checks. `lease_until`
    is in this process's clock, as `now`; on a server the lease is the same length from the server's clock."""
    refuse_stale(conn.execute(*renewal(conn, run_id, fence, now, lease_until)), run_id, fence)


def renewal(conn: Connection, run_id: str, fence: int, now: float,
            lease_until: float | None) -> tuple[str, tuple]:
    """check_fence's statement, for a batch (store.write_batch) whose first statement it is. It locks the run's row,
    and its rowcount says whether the fence is still the run's (`refuse_stale`)."""
    if lease_until is None or not on_server(conn):
        return ("UPDATE runs SET updated_at = ?, lease_expires_at = coalesce(?, lease_expires_at)"
                " WHERE id = ? AND fence = ?", (now, lease_until, run_id, fence))
    return ("UPDATE runs SET updated_at = ?,"   # SERVER_NOW spelled out: no status written here
            " lease_expires_at = extract(epoch from clock_timestamp())::float8 + ?"
            " WHERE id = ? AND fence = ?", (now, lease_until - now, run_id, fence))


def record_model(conn: Connection, run_id: str, fence: int, spec: str) -> None:
    """Record what `--model default` resolved to, inside a fenced write. It is kept so every later call and worker of
    the run uses the same provider: a replay must not switch from Claude to a script."""
    conn.execute("UPDATE runs SET model = ? WHERE id = ? AND fence = ?", (spec, run_id, fence))


def settle_run(store: Store, claim: Claim, *, status: str, reason: str, message: str, now: float,
               result: str | None = None, result_artifact: str | None = None, error: str | None = None,
               wake_at: float | None = None, wall_s: float = 0.0, traceback: str | None = None) -> None:
    """The worker's last write for a run: its new status and reason, fenced, with an event.

    It also adds the running time since the last entry, since budgets count time running, not waiting.
    `traceback` is the failed agent code's frames (JSON). It is one batch of a shared writer (store.write_batch:
    one round trip on a server), whose first statement, the fence check, locks the run's row (checked again on
    the row as committed, if it waited), and each of whose statements checks the fence itself. A settle that
    records a notice is the exception: notice ids are displays' cursors, so those commit one at a time, in id
    order."""
    person = needs_person(status, reason)
    statements = _settling(store.conn, claim, status=status, reason=reason, message=message, now=now, result=result,
                           result_artifact=result_artifact, error=error, wake_at=wake_at, wall_s=wall_s,
                           traceback=traceback, fence=None if person else claim.fence)
    if person:
        with store.write() as conn:
            _settle_in(conn, claim, statements=statements, status=status, reason=reason, message=message, now=now)
        return
    done = store.write_batch([renewal(store.conn, claim.run_id, claim.fence, now, None), *statements])
    refuse_stale(done[0], claim.run_id, claim.fence)


def settle(conn: Connection, claim: Claim, *, status: str, reason: str, message: str, now: float,
           result: str | None = None, result_artifact: str | None = None, error: str | None = None,
           wake_at: float | None = None, wall_s: float = 0.0, traceback: str | None = None,
           handed_on: bool = False) -> None:
    """`settle_run` inside a write of the caller's. `handed_on`: the run's own thread may still write (it is
    inside a call the worker gave up on, runtime/deadlines.py), so the fence grows and refuses it."""
    statements = _settling(conn, claim, status=status, reason=reason, message=message, now=now, result=result,
                           result_artifact=result_artifact, error=error, wake_at=wake_at, wall_s=wall_s,
                           traceback=traceback, handed_on=handed_on)
    _settle_in(conn, claim, statements=statements, status=status, reason=reason, message=message, now=now)


def _settle_in(conn: Connection, claim: Claim, *, statements: list[tuple[str, tuple]], status: str, reason: str,
               message: str, now: float) -> None:
    """Inside a write: the fence checked, then a settle's statements, then its notice when it needs a person."""
    check_fence(conn, claim.run_id, claim.fence, now, None)
    for sql, params in statements:
        conn.execute(sql, params)
    record_notice(conn, claim.run_id, status=status, reason=reason, message=message, at=now)


_ADD_WALL = "UPDATE checkpoints SET used_wall_s = used_wall_s + ? WHERE run_id = {run}"
_SETTLED_EVENT = ("INSERT INTO events (run_id, at, kind, message, worker, fence) SELECT id, ?, ?, ?, ?, ? FROM runs"
                  " WHERE id = {run}")


def _settling(conn: Connection, claim: Claim, *, status: str, reason: str, message: str, now: float,
              result: str | None, result_artifact: str | None, error: str | None, wake_at: float | None,
              wall_s: float, traceback: str | None, handed_on: bool = False,
              fence: int | None = None) -> list[tuple[str, tuple]]:
    """A settle's statements after its fence check. Given `fence`, each checks it too (journal.naming). The event
    comes before the run's row, whose fence a hand-on grows."""
    run_id = claim.run_id
    ended = ("UPDATE runs SET status = ?, reason = ?, result = ?, result_artifact = ?, error = ?, traceback = ?,"
             " worker = NULL, lease_expires_at = NULL, wake_at = ?, finished_at = ?, fence = fence + ?"
             " WHERE id = {run}")
    (wall, of_wall), (event, of_event), (row, of_row) = naming([_ADD_WALL, _SETTLED_EVENT, ended], run_id, fence)
    return [(wall, (wall_s, *of_wall)), *folding(conn, run_id, fence),
            (event, (now, status, message, claim.worker, claim.fence, *of_event)),
            (row, (status, reason, result, result_artifact, error, traceback, wake_at,
                   now if status in TERMINAL else None, int(handed_on), *of_row))]


def get_run(store: Store, run_id: str) -> RunRow:
    with decoding("runs"):
        found = one_row(store.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)))
    if found is None:
        raise RunNotFound(f"no run {run_id}")
    return cast(RunRow, found)


def run_exists(store: Store, run_id: str) -> bool:
    return store.conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None


def lineage(store: Store, run_id: str) -> tuple[str, ...]:
    """`run_id`, the run it was forked from, that run's parent and so on to the first. These are the runs whose
    recorded work a fork carries on, found with one indexed read per generation of forks."""
    found = [run_id]
    while True:
        row = store.conn.execute("SELECT parent_id FROM runs WHERE id = ?", (found[-1],)).fetchone()
        if row is None or row[0] is None or row[0] in found:
            return tuple(found)
        found.append(row[0])


def last_finished(store: Store, agent: str, count: int) -> list[str]:
    """The ids of an agent's `count` most recently finished runs (succeeded or failed), newest first."""
    return [row[0] for row in store.conn.execute(
        "SELECT id FROM runs WHERE agent = ? AND status IN (?, ?) ORDER BY finished_at DESC, id LIMIT ?",
        (agent, RunStatus.SUCCEEDED, RunStatus.FAILED, count))]


def list_runs(store: Store, status: str | None = None) -> list[dict]:
    """Runs newest first, with their checkpoint's step counts, failed attempts of the step at hand and their lease
    (a running run's)."""
    where = "WHERE r.status = ?" if status else ""
    return list(store.query(
        "SELECT r.id, r.agent, r.agent_version, r.status, r.reason, r.attempt, r.worker, r.lease_expires_at,"
        " r.created_at, r.updated_at, r.finished_at, r.wake_at, r.error, c.current_step, c.total_steps,"
        " c.step_attempts"
        f" FROM runs r LEFT JOIN checkpoints_now c ON c.run_id = r.id {where} ORDER BY r.created_at DESC",
        (status,) if status else (),
    ))


def events_for(store: Store, run_id: str) -> list[dict]:
    return list(store.query("SELECT at, kind, message, worker, fence FROM events WHERE run_id = ? ORDER BY id",
                               (run_id,)))


class StateChanged(StoreError):
    """A guarded UPDATE found the run no longer in the status its caller checked: nothing was written."""


def _transition(conn: Connection, run_id: str, expected: str, assignments: str, params: tuple) -> None:
    """Inside a write: change the run only if it is still `expected`, so a decision made on a state
    that another actor has since changed can never land."""
    cur = conn.execute(f"UPDATE runs SET {assignments} WHERE id = ? AND status = ?", (*params, run_id, expected))
    if cur.rowcount != 1:
        raise StateChanged(f"run {run_id} is no longer {expected}; nothing changed")


_LET_GO = "fence = fence + 1, worker = NULL, lease_expires_at = NULL, wake_at = NULL"


def requeue(conn: Connection, run_id: str, *, expected: str, reason: str, message: str, now: float) -> None:
    """Inside a write: hand a run back to the workers (a person decided what it was waiting for).
    The fence grows, so a worker that still thinks it holds the run cannot write again."""
    _transition(conn, run_id, expected, f"status = ?, reason = ?, {_LET_GO}, updated_at = ?",
                (RunStatus.QUEUED, reason, now))
    add_event(conn, run_id, at=now, kind=RunStatus.QUEUED, message=message)


def cancel(conn: Connection, run_id: str, expected: str, message: str, now: float) -> None:
    """Inside a write: end a run for a person; bumping the fence stops any worker at its next write."""
    _transition(conn, run_id, expected,
                f"status = ?, reason = ?, {_LET_GO}, finished_at = ?, updated_at = ?",
                (RunStatus.CANCELLED, Reason.PERSON, now, now))
    add_event(conn, run_id, at=now, kind=RunStatus.CANCELLED, message=message)


def park(conn: Connection, run_id: str, *, expected: str, message: str, now: float,
         reason: str = Reason.PERSON) -> None:
    """Inside a write: stop a run resumably; bumping the fence stops any worker at its next write."""
    _transition(conn, run_id, expected, f"status = ?, reason = ?, {_LET_GO}, updated_at = ?",
                (RunStatus.PARKED, reason, now))
    add_event(conn, run_id, at=now, kind=RunStatus.PARKED, message=message)
    record_notice(conn, run_id, status=RunStatus.PARKED, reason=reason, message=message, at=now)


def restart(conn: Connection, run_id: str, expected: str, message: str, now: float) -> int:
    """Inside a write: queue the run from position 0 in a new journal generation; the old one stays readable."""
    _transition(conn, run_id, expected,
                f"generation = generation + 1, status = ?, reason = ?, {_LET_GO}, result = NULL,"
                " result_artifact = NULL, error = NULL, traceback = NULL, finished_at = NULL, updated_at = ?",
                (RunStatus.QUEUED, Reason.RESUMED, now))
    generation = conn.execute("SELECT generation FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    # the old generation's tail of plain steps is counted before its positions stop being the checkpoint's
    conn.execute("UPDATE checkpoints SET (used_steps, used_wall_s) = (SELECT used_steps, used_wall_s FROM"
                 " checkpoints_now WHERE run_id = ?) WHERE run_id = ?", (run_id, run_id))
    conn.execute("UPDATE checkpoints SET generation = ?, schema_version = ?, current_step = 0, total_steps = NULL,"
                 " next_input = NULL, plan_revision = 0, step_attempts = 0, soft_position = NULL,"
                 " soft_dimensions = NULL, updated_at = ? WHERE run_id = ?",
                 (generation, CHECKPOINT_SCHEMA, now, run_id))
    add_event(conn, run_id, at=now, kind=RunStatus.QUEUED, message=message.format(generation=generation))
    return generation


def set_budget(conn: Connection, run_id: str, budget: dict) -> None:
    """Inside a write: the run's budget is now `budget` (operate.resume's raised ceilings), kept as JSON."""
    conn.execute("UPDATE runs SET budget = ? WHERE id = ?", (json.dumps(budget), run_id))


def set_code_version(conn: Connection, run_id: str, code_version: str, agent_version: str | None) -> None:
    """Inside a write: the agent's code and version the run's next attempt runs with."""
    conn.execute("UPDATE runs SET code_version = ?, agent_version = ? WHERE id = ?",
                 (code_version, agent_version, run_id))


@dataclass(frozen=True)
class EditedEntry:
    """A person's result for a fork's position, in place of the one the parent recorded there.

    It is JSON as runtime/results.encode wrote it. For one over the artifact threshold, `place(artifact_dir,
    label, encoded)` (runtime/results.place bound to the data folder) writes it into the new run's own artifact
    folder (the parent's files are never written). `by` is who edited it, for the events."""

    encoded: str
    place: Callable[[str, str, str], tuple[None, str]] | None = None
    by: str | None = None


def entry_at(conn: Connection, run_id: str, generation: int, position: int) -> dict | None:
    """One journal row of a generation (result still encoded, artifact a path in the data folder), or None."""
    cursor = conn.execute("SELECT position, name, kind, result, artifact, cost_usd, edited FROM journal"
                          " WHERE run_id = ? AND generation = ? AND position = ?", (run_id, generation, position))
    return one_row(cursor)


def fork(conn: Connection, parent: dict, from_step: int, now: float,
         edited: EditedEntry | None = None) -> str:
    """Inside a write: a new run holding the parent's journal entries before `from_step`; the parent is not
    changed. With `edited`, the new run also holds that result at `from_step` (the parent's name and kind
    there, `edited` = 1, attempts 1, no cost: nothing was billed for a reply a person wrote, and the parent's
    cost was for another reply), so its code replays it and goes on from `from_step + 1`. The kept entries and
    the edited one count against the new run's budget as the kept ones always have: not at all (the checkpoint
    starts past them with its counters at zero)."""
    run_id = _new_id(conn)
    name = _edited_name(conn, parent, from_step) if edited else None
    goes_on = from_step + 1 if edited else from_step
    conn.execute(
        "INSERT INTO runs (id, agent, agent_version, code_version, request, budget, model, script, status, reason,"
        " attempt, fence, generation, parent_id, fork_step, artifact_dir, created_at, updated_at)"
        " SELECT ?, agent, agent_version, code_version, request, budget, model, script, ?, ?, 0, 0, 1, id, ?,"
        " ?, ?, ? FROM runs WHERE id = ?",
        (run_id, RunStatus.QUEUED, Reason.NEW, from_step, f"artifacts/{run_id}", now, now, parent["id"]))
    conn.execute("INSERT INTO checkpoints (run_id, generation, schema_version, current_step, total_steps,"
                 " updated_at) SELECT ?, 1, ?, ?, total_steps, ? FROM checkpoints WHERE run_id = ?",
                 (run_id, CHECKPOINT_SCHEMA, goes_on, now, parent["id"]))
    conn.execute("INSERT INTO journal_rows (run_id, generation, position, name, kind, result, artifact, attempts,"
                 " started_at, duration_s, fence, cost_usd, inputs, edited) SELECT ?, 1, position, name, kind, result,"
                 " artifact, attempts, started_at, duration_s, 0, cost_usd, inputs, edited FROM journal"
                 " WHERE run_id = ? AND generation = ? AND position < ?",
                 (run_id, parent["id"], parent["generation"], from_step))
    conn.execute("INSERT INTO effects (run_id, generation, position, name, key, state, attempts, result,"
                 " has_lookup, dedupe_ttl_s, lookup_ttl_s, service, done_by, fence, created_at, updated_at)"
                 " SELECT ?, 1, position, name, key, state, 0, result, has_lookup, dedupe_ttl_s, lookup_ttl_s,"
                 " service, run_id, 0, ?, ? FROM effects"
                 " WHERE run_id = ? AND generation = ? AND position < ? AND state = ?",
                 (run_id, now, now, parent["id"], parent["generation"], from_step, EffectState.CONFIRMED))
    copy_for_fork(conn, parent, run_id, from_step)
    if edited:
        assert name is not None   # read above, before anything was written, as edited was given
        _add_edited(conn, parent, run_id=run_id, position=from_step, name=name, edited=edited, now=now)
        return run_id
    add_event(conn, run_id, at=now, kind=RunStatus.QUEUED,
              message=f"forked from {parent['id']} at position {from_step} (positions 0-{from_step - 1} kept)"
              if from_step else f"forked from {parent['id']} from the start")
    add_event(conn, parent["id"], at=now, kind=EventKind.FORKED,
              message=f"forked into {run_id} at position {from_step}")
    return run_id


def _edited_name(conn: Connection, parent: dict, position: int) -> str:
    row = entry_at(conn, parent["id"], parent["generation"], position)
    if row is None:
        raise UserError(f"{parent['id']} has no entry #{position} to edit")
    return row["name"]


def _add_edited(conn: Connection, parent: dict, *, run_id: str, position: int, name: str,
                edited: EditedEntry, now: float) -> None:
    """Add the edited entry at `position` of the new run, and the events that say what was edited, on both runs. A
    large entry is placed in the new run's artifact folder first."""
    result: str | None = edited.encoded
    artifact: str | None = None
    if edited.place is not None:
        result, artifact = edited.place(f"artifacts/{run_id}", f"g1-{position:05d}-{name}-edited", edited.encoded)
    conn.execute("INSERT INTO journal_rows (run_id, generation, position, name, kind, result, artifact, attempts,"
                 " started_at, duration_s, fence, cost_usd, inputs, edited) SELECT ?, 1, position, name, kind, ?, ?,"
                 " 1, ?, 0, 0, NULL, inputs, 1 FROM journal WHERE run_id = ? AND generation = ? AND position = ?",
                 (run_id, result, artifact, now, parent["id"], parent["generation"], position))
    kept = f"positions 0-{position - 1} kept" if position else "nothing before it kept"
    by = f" by {edited.by}" if edited.by else ""
    add_event(conn, run_id, at=now, kind=RunStatus.QUEUED,
              message=f"forked from {parent['id']} at position {position} with #{position} {name} edited ({kept})")
    add_event(conn, run_id, at=now, kind=EventKind.EDITED,
              message=f"#{position} {name}: result edited{by} in place of the one {parent['id']} recorded; runs on"
              f" from #{position + 1}", worker=edited.by)
    add_event(conn, parent["id"], at=now, kind=EventKind.FORKED,
              message=f"forked into {run_id} at position {position} with #{position} {name} edited{by}")


def recorded_positions(conn: Connection, run_id: str, generation: int) -> int:
    """Positions are contiguous from 0, so the last one (a primary-key seek in each journal table) says how many
    there are."""
    return conn.execute("SELECT coalesce(max(last) + 1, 0) FROM (SELECT max(position) AS last FROM journal_rows"
                        " WHERE run_id = ? AND generation = ? UNION ALL SELECT max(position) FROM journal_tail"
                        " WHERE run_id = ? AND generation = ?) AS found", (run_id, generation) * 2).fetchone()[0]


_PAGE = ("SELECT r.id, r.agent, r.agent_version, r.status, r.reason, r.attempt, r.worker, r.lease_expires_at,"
         " r.created_at, r.updated_at, r.finished_at, r.wake_at, r.error, r.budget, r.parent_id, r.fork_step, r.fence,"
         " r.generation, c.current_step, c.total_steps, c.step_attempts, c.used_steps, c.used_model_calls,"
         " c.used_input_tokens, c.used_output_tokens, c.used_cost_usd, c.used_tool_calls, c.used_effects,"
         " c.used_wall_s, c.unpriced_calls, c.used_cache_read_tokens, c.used_cache_write_tokens,"
         " c.next_input"
         " FROM runs r {index} JOIN checkpoints_now c ON c.run_id = r.id")
# states.needs_person in SQL. The partial index runs_needs_person (schema.py) has this WHERE; SQLite uses the
# index only for a query whose WHERE implies it, and INDEXED BY fails loudly when it does not.
NEEDS_PERSON = (f"(status = '{RunStatus.PARKED}'"
                f" OR (status = '{RunStatus.WAITING}' AND reason NOT IN ({_listed(SELF_WAKING)})))")
# A filter's text word, in any case, in what a person may look a run up by (LIKE's own characters taken literally)
_TEXT = ("(lower(r.id) LIKE ? ESCAPE '\\' OR lower(r.agent) LIKE ? ESCAPE '\\'"
         " OR lower(coalesce(r.reason, '')) LIKE ? ESCAPE '\\' OR lower(r.request) LIKE ? ESCAPE '\\')")


def _chosen(where: Filter, at: float) -> tuple[list[str], list[str | float]]:
    """The conditions (on runs r and their checkpoint c) that select the runs `where` names, with their
    parameters. Status, agent and time each have an index that reads them newest first (schema._v17, and the
    (created_at, id) one); cost and text are checked on the rows those give."""
    conditions: list[str] = []
    params: list[str | float] = []
    if where.statuses:
        conditions.append(f"r.status IN ({', '.join('?' * len(where.statuses))})")
        params += where.statuses
    if where.agent:
        conditions.append("r.agent = ?")
        params.append(where.agent)
    since, until = where.instants(at)
    if since is not None:
        conditions.append("r.created_at >= ?")
        params.append(since)
    if until is not None:
        conditions.append("r.created_at < ?")
        params.append(until)
    if where.cost_above is not None:
        conditions.append("c.used_cost_usd > ?")
        params.append(where.cost_above)
    if where.cost_below is not None:
        conditions.append("c.used_cost_usd < ?")
        params.append(where.cost_below)
    for word in where.words:
        pattern = "%" + word.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        conditions.append(_TEXT)
        params += [pattern] * 4
    return conditions, params


def runs_page(store: Store, *, limit: int = 200, where: Filter = Filter(), at: float = 0.0,
              needs_person: bool | None = None, before: tuple[float, str] | None = None) -> list[dict]:
    """The newest `limit` runs that `where` selects, read through an index so a page costs the same at any depth.

    `where` is a filter (tui_agent/filters.py) and `at` the instant its ages count back from. Runs come in
    (created_at, id) order, through the (created_at, id) index, or the (status, ...) or (agent, ...) one when the
    filter names a status or an agent (its time range then bounds the same index range); so a page costs the
    same with 100,000 runs as with ten. `needs_person` selects runs that wait for a person (or all the others).
    `before`, the (created_at, id) of the last row already held, is a keyset cursor: the `limit` runs after it
    in this order, read from the index range that starts there (no OFFSET, so a deep page costs as much as the
    first). Cost and text words are checked on the rows the index gives, newest first, until the page is full:
    a rare match reads far (bound it with a time word). Several statuses are read through their index and
    sorted, a cost that grows with how many runs have them."""
    conditions, params = _chosen(where, at)
    if needs_person is not None:
        conditions.append(NEEDS_PERSON if needs_person else f"NOT {NEEDS_PERSON}")
    if before is not None:
        # (created_at, id) < (?, ?) spelled out: the index range starts at `created_at <= ?`, and the OR only
        # skips the rows of the cursor's own instant that it did not already pass (ties are ordered by id).
        conditions.append("r.created_at <= ? AND (r.created_at < ? OR r.id < ?)")
        params += [before[0], before[0], before[1]]
    clause = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    # The planner would gather the needs-you rows by status and sort them all; its partial index reads them in
    # order, unless the filter names a status or an agent, whose own index does.
    hinted = needs_person and not (where.statuses or where.agent)
    page = _PAGE.format(index="INDEXED BY runs_needs_person" if hinted else "")
    cursor = store.conn.execute(f"{page}{clause} ORDER BY r.created_at DESC, r.id DESC LIMIT ?", (*params, limit))
    return list(dict_rows(cursor))


def each_run(store: Store, where: Filter, at: float, page: int = 500) -> Iterator[dict]:
    """Every run `where` selects, newest first, with ages counted back from `at`. It is read `page` at a time through
    runs_page's keyset cursor. This is what `--where` and the TUI's mark-all act on."""
    before = None
    while True:
        rows = runs_page(store, limit=page, where=where, at=at, before=before)
        yield from rows
        if len(rows) < page:
            return
        before = (rows[-1]["created_at"], rows[-1]["id"])


def counts(store: Store) -> dict[str, int]:
    """Header figures: runs queued, running, and waiting for a person."""
    count = "SELECT count(*) FROM runs WHERE "
    return {name: store.conn.execute(count + where).fetchone()[0]
            for name, where in (("queued", f"status = '{RunStatus.QUEUED}'"),
                                ("running", f"status = '{RunStatus.RUNNING}'"), ("needs_you", NEEDS_PERSON))}


def data_version(store: Store) -> int:
    """Changes when something is committed: a refresh check that costs one round trip."""
    return store.data_version()
