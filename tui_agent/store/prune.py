"""Removing ended runs (`tui-agent prune`), in batches that each hold the write lock for about `BATCH_S`.

A run is kept when it is among its agent's newest `keep_last`, a kept fork needs it, or it holds an effect in
doubt. A pruned run is first marked (`runs.pruned_at`) and its keys copied to `kept_keys`; then its rows go,
children first, then its files, then its `runs` row, so an interrupted prune is finished by the next one.
Why: docs/architecture.md, section 4 (Module map, store/prune.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ..errors import EnvironmentStop, UserError
from ..states import IN_DOUBT, TERMINAL, EffectState, RunStatus
from . import artifacts
from .base import DatabaseError, Store, on_server
from .environment import FULL
from .runs import request_digest

BATCH_S = 0.05        # a batch takes chunks until it has held the write lock this long, then commits
PAUSE_MOST_S = 0.11   # the pause after a batch: as long as it held the lock, up to SQLite's longest busy sleep (0.1 s)
CHUNK = 250           # rows one statement deletes
GROUP = 50            # runs whose rows one statement names
VACUUM_PAGES = 500    # pages one incremental vacuum gives back (2 MiB of 4 KiB pages)

PRUNABLE = (RunStatus.SUCCEEDED, RunStatus.CANCELLED, RunStatus.FAILED)   # the ended statuses

# A run's rows, table by table, each with the columns that name one row: everything that refers to the run first.
_ROWS = [("journal_tail", "run_id, generation, position"), ("journal_rows", "run_id, generation, position"),
         ("model_calls", "run_id, generation, position, call"), ("request_parts", "run_id, digest"),
         ("let_go", "run_id, fence"), ("effects", "id"), ("approvals", "id"), ("notices", "id"), ("events", "id"),
         ("checkpoints", "run_id")]


@dataclass
class Plan:
    """The runs a prune removes (children before their parents) and why the others it looked at stay."""

    chosen: tuple[str, ...]                              # the statuses asked for
    cutoff: float                                        # the runs that ended before this
    remove: list[str] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)   # of the runs to remove
    kept: Counter = field(default_factory=Counter)       # why a run that matched stays: fork, doubt, newest


@dataclass
class Pruned:
    """What a prune did. It holds the runs removed (by status), the runs that changed before their turn and stayed
    (why), the keys kept, the artifact bytes deleted, and the longest any batch held the write lock."""

    removed: Counter = field(default_factory=Counter)
    stayed: Counter = field(default_factory=Counter)
    keys: int = 0
    artifact_bytes: int = 0
    batches: int = 0
    longest_hold_s: float = 0.0
    vacuum: dict | None = None


def chosen_statuses(text: str, what: str = "--status") -> tuple[str, ...]:
    """`succeeded,cancelled`: ended statuses only; a run in any other can still go on. `what` names where the text
    came from in the refusal."""
    chosen = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    wrong = [status for status in chosen if status not in PRUNABLE]
    if wrong or not chosen:
        named = f"{', '.join(wrong)} is not an ended status; " if wrong else ""
        raise UserError(f"{what} {text!r}: {named}prune removes only ended runs: name one or more of "
                        f"{', '.join(PRUNABLE)}, comma-separated")
    return chosen


def plan(store: Store, statuses: Collection[str], cutoff: float, keep_last: int | None = None) -> Plan:
    """Which runs a prune removes, read and not written. A dry run shows it; the removal checks each run again."""
    marks = ", ".join("?" for _ in statuses)
    ended = f"r.status IN ({marks}) AND coalesce(r.finished_at, r.updated_at) < ?"
    rows = store.conn.execute(f"SELECT r.id, r.status, r.pruned_at FROM runs r WHERE ({ended}) OR r.pruned_at IS NOT"
                              " NULL ORDER BY r.created_at DESC, r.id DESC", (*statuses, cutoff)).fetchall()
    newest: set[str] = set()
    if keep_last:
        newest = {run_id for (run_id,) in store.conn.execute(
            f"SELECT id FROM (SELECT r.id, row_number() OVER (PARTITION BY r.agent ORDER BY coalesce(r.finished_at,"
            f" r.updated_at) DESC, r.id DESC) AS n FROM runs r WHERE r.status IN ({marks})) AS ranked WHERE n <= ?",
            (*statuses, keep_last))}
    doubt = {run_id for (run_id,) in store.conn.execute(
        f"SELECT DISTINCT e.run_id FROM effects e JOIN runs r ON r.id = e.run_id WHERE {ended}"
        f" AND e.state IN ({', '.join('?' for _ in IN_DOUBT)})", (*statuses, cutoff, *IN_DOUBT))}
    forks: dict[str, list[str]] = {}
    for child, parent in store.conn.execute("SELECT id, parent_id FROM runs WHERE parent_id IS NOT NULL"):
        forks.setdefault(parent, []).append(child)
    found = Plan(tuple(statuses), cutoff)
    going: set[str] = set()
    for run_id, status, pruned_at in rows:   # newest first: a fork is decided before the run it was forked from
        why = None if pruned_at is not None else ("newest" if run_id in newest else "doubt" if run_id in doubt else
                                                  "fork" if any(c not in going for c in forks.get(run_id, ())) else
                                                  None)
        if why:
            found.kept[why] += 1
            continue
        going.add(run_id)
        found.remove.append(run_id)
        found.statuses[status] += 1
    return found


def _marks(values: Collection) -> str:
    return ", ".join("?" for _ in values)


class _Removal:
    """The state of a prune between batches.

    It holds the runs still to begin, the group of up to GROUP runs whose rows are going, the groups whose rows
    are gone (their files next, outside the lock) and those whose files are gone (their `runs` rows next). A
    group's statements name all its runs at once: a few round trips per group, not per run (a server's round
    trip costs more than the deletes)."""

    def __init__(self, store: Store, run_ids: list[str], statuses: Collection[str], cutoff: float, at: float):
        self.store, self.statuses, self.cutoff, self.at = store, tuple(statuses), cutoff, at
        self.pending = deque(run_ids)
        self.current: list[dict] = []
        self.tables: deque = deque()
        self.cleared: list[list[dict]] = []
        self.emptied: list[list[dict]] = []
        self.done = Pruned()

    def busy(self) -> bool:
        return bool(self.pending or self.current or self.cleared or self.emptied)

    def step(self, conn) -> bool:
        """One bounded piece of work inside the batch's write. False when nothing more can be done before the batch
        commits; what is left waits for files to be deleted after it."""
        if self.emptied:
            group = self.emptied.pop()
            conn.execute(f"DELETE FROM runs WHERE id IN ({_marks(group)})", [run["id"] for run in group])
            self.done.removed.update(run["status"] for run in group)
            return True
        if self.current:
            self._chunk(conn)
            return True
        if self.pending:
            self._begin(conn, [self.pending.popleft() for _ in range(min(GROUP, len(self.pending)))])
            return True
        return False

    def _begin(self, conn, run_ids: list[str]) -> None:
        """Check each run as it is now, then keep its keys and set its mark. A run must still be ended before the
        cutoff, with no fork left that needs it and no effect in doubt; a run that changed since the plan is left as
        it is."""
        names = ("id", "status", "run_key", "agent", "request", "created_at", "artifact_dir", "pruned_at", "ended_at")
        found = {row[0]: dict(zip(names, row)) for row in conn.execute(
            "SELECT id, status, run_key, agent, request, created_at, artifact_dir, pruned_at,"
            f" coalesce(finished_at, updated_at) FROM runs WHERE id IN ({_marks(run_ids)})", run_ids)}
        forks: dict[str, list[str]] = {}
        for child, parent in conn.execute(f"SELECT id, parent_id FROM runs WHERE parent_id IN ({_marks(run_ids)})"
                                          " AND pruned_at IS NULL", run_ids):
            forks.setdefault(parent, []).append(child)
        doubt = {run_id for (run_id,) in conn.execute(
            f"SELECT DISTINCT run_id FROM effects WHERE run_id IN ({_marks(run_ids)}) AND state IN"
            f" ({_marks(IN_DOUBT)})", (*run_ids, *IN_DOUBT))}
        group: list[dict] = []
        for run_id in run_ids:   # newest first, as the plan is: a fork is decided before the run it was forked from
            run = found.get(run_id)
            if run is None:
                continue   # removed meanwhile (another prune)
            if run["pruned_at"] is None:
                why = ("changed" if run["status"] not in self.statuses or run["status"] not in TERMINAL
                       or run["ended_at"] >= self.cutoff else
                       "fork" if any(child not in {r["id"] for r in group} for child in forks.get(run_id, ())) else
                       "doubt" if run_id in doubt else None)
                if why:
                    self.done.stayed[why] += 1
                    continue
            group.append(run)
        fresh = [run for run in group if run["pruned_at"] is None]
        if fresh:
            self._keep_keys(conn, fresh)
            conn.execute(f"UPDATE runs SET pruned_at = ? WHERE id IN ({_marks(fresh)})",
                         (self.at, *(run["id"] for run in fresh)))
        self.current = group
        self.tables = deque(_ROWS if group else ())
        if group and artifacts.folder(self.store) is None:    # kept as rows: they go with the others
            self.tables.appendleft(("artifacts", "path"))

    def _keep_keys(self, conn, group: list[dict]) -> None:
        """Keep every confirmed effect's key and each run's own key, unless one of the same kind is kept already. An
        effect's key is kept with the run that really did it: `done_by` when the run reused it. The first
        confirmation stands."""
        ids = [run["id"] for run in group]
        kept = conn.execute(
            "INSERT INTO kept_keys (kind, key, run_id, name, result, at, kept_at) SELECT 'effect', key,"
            f" coalesce(done_by, run_id), name, result, updated_at, ? FROM effects WHERE run_id IN ({_marks(ids)})"
            " AND state = ? ON CONFLICT (kind, key) DO NOTHING", (self.at, *ids, EffectState.CONFIRMED)).rowcount
        keyed = [run for run in group if run["run_key"] is not None]
        if keyed:
            kept += conn.execute(
                "INSERT INTO kept_keys (kind, key, run_id, name, result, at, kept_at) VALUES "
                + ", ".join("('run', ?, ?, ?, ?, ?, ?)" for _ in keyed) + " ON CONFLICT (kind, key) DO NOTHING",
                [value for run in keyed for value in (run["run_key"], run["id"], run["agent"],
                                                       request_digest(run["request"]), run["created_at"], self.at)]
            ).rowcount
        self.done.keys += max(kept, 0)

    def _chunk(self, conn) -> None:
        """Up to CHUNK rows of the group's next table; once every table is empty, the group waits for its files to
        go."""
        ids = [run["id"] for run in self.current]
        table, key = self.tables[0]
        if table == "events":   # a schedule's own lines that name one of the runs stay, naming none
            conn.execute(f"UPDATE events SET run_id = NULL WHERE run_id IN ({_marks(ids)}) AND schedule IS NOT NULL",
                         ids)
        if table == "artifacts":   # each run's, by the range of paths under its folder
            homes = [f"{run['artifact_dir']}/" for run in self.current]
            picked = " OR ".join("(path >= ? AND path < ?)" for _ in homes)
            params = [bound for home in homes for bound in (home, home[:-1] + chr(ord("/") + 1))]
        else:
            picked, params = f"run_id IN ({_marks(ids)})", ids
        gone = conn.execute(f"DELETE FROM {table} WHERE ({key}) IN (SELECT {key} FROM {table} WHERE {picked}"
                            f" LIMIT {CHUNK})", params).rowcount
        if gone < CHUNK:
            self.tables.popleft()
            if not self.tables:
                self.cleared.append(self.current)
                self.current = []

    def after_commit(self) -> None:
        """Outside the lock, once the batch committed: the files of the runs whose rows are all gone."""
        for group in self.cleared:
            for run in group:
                self.done.artifact_bytes += artifacts.remove_folder(self.store, run["artifact_dir"])
            self.emptied.append(group)
        self.cleared = []


def remove(store: Store, chosen: Plan, at: float, progress: Callable[[Pruned], None] | None = None) -> Pruned:
    """Remove the runs a `plan` chose, children first, in batches; each run is checked again as its turn comes. On
    a SQLite file made with incremental auto-vacuum, the pages freed are then given back in batches the same way
    (`vacuum` in the result: the pages given back, and the free pages left in a file without it)."""
    work = _Removal(store, chosen.remove, chosen.chosen, chosen.cutoff, at)
    while work.busy():
        _batch(store, work.done, work.step)
        work.after_commit()
        if progress:
            progress(work.done)
    if not on_server(store.conn):
        work.done.vacuum = give_back(store, work.done)
    return work.done


def _batch(store: Store, done: Pruned, step: Callable[[object], bool]) -> None:
    """One write that does `step`s until it has held the lock BATCH_S (or nothing is left), then the pause."""
    with store.write() as conn:
        started = time.perf_counter()
        while step(conn) and time.perf_counter() - started < BATCH_S:
            pass
    held = time.perf_counter() - started
    done.batches += 1
    done.longest_hold_s = max(done.longest_hold_s, held)
    time.sleep(min(PAUSE_MOST_S, held))


def free_space(store: Store) -> dict:
    """A SQLite file's free pages (what a prune freed and gave nothing back of) and whether it has incremental
    auto-vacuum: {incremental, free_bytes, file_bytes}."""
    page = store.conn.execute("PRAGMA page_size").fetchone()[0]
    return {"incremental": store.conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2,
            "free_bytes": page * store.conn.execute("PRAGMA freelist_count").fetchone()[0],
            "file_bytes": page * store.conn.execute("PRAGMA page_count").fetchone()[0]}


def room_to_rewrite(store: Store) -> None:
    """Refuse a rewrite the disks cannot hold, with the environment's FULL stop. VACUUM builds the new file in the
    temporary folder, then writes it through the WAL beside the database, each the file's size."""
    size = os.stat(store.path).st_size
    places: dict[int, list] = {}   # by device: a folder on it, and what the rewrite writes there
    for where in (str(store.path.parent), tempfile.gettempdir()):
        places.setdefault(os.stat(where).st_dev, [where, 0])[1] += size
    for where, wanted in places.values():
        free = shutil.disk_usage(where).free
        if free < wanted:
            raise EnvironmentStop(FULL, f"the rewrite needs {wanted / 2**20:.1f} MiB free in {where} and there are "
                                  f"{free / 2**20:.1f} MiB: free space there (or point TMPDIR at another disk), then "
                                  "run tui-agent db vacuum again; nothing was changed")


def rewrite(store: Store) -> None:
    """Rewrite a SQLite file with incremental auto-vacuum, leaving no free page, then empty the WAL the rewrite went
    through. VACUUM holds the write lock for the whole rewrite, so every writer waits."""
    try:
        store.conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        store.conn.execute("VACUUM")
    except DatabaseError as e:
        store.raise_stop(e)
        raise
    store.checkpoint()


def give_back(store: Store, done: Pruned | None = None) -> dict:
    """Give a SQLite file's free pages back to the file system in batches, or else count them. They are given back
    when the file has incremental auto-vacuum, as every new database has; otherwise they are counted, for
    `tui-agent db vacuum`."""
    space = free_space(store)
    if not space["incremental"]:
        return {**space, "returned_bytes": 0}

    def vacuum(conn) -> bool:   # one step: a few pages moved and given back
        conn.execute(f"PRAGMA incremental_vacuum({VACUUM_PAGES})").fetchall()
        return conn.execute("PRAGMA freelist_count").fetchone()[0] > 0

    done = done or Pruned()
    while store.conn.execute("PRAGMA freelist_count").fetchone()[0]:
        _batch(store, done, vacuum)
    store.checkpoint()   # the file shrinks as the WAL is copied back
    return {**free_space(store), "returned_bytes": space["free_bytes"]}
