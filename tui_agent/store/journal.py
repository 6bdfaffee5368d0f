"""Journal rows and the checkpoint: the per-step hot path, one fenced transaction per entry."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..strict_json import read_stored
from .base import FOR_UPDATE, SHARED_LOCK, Connection, Store, decoding, on_server, one_row, refuse_stale, write_once


@dataclass
class Checkpoint:
    """The fixed-size row of where a run is; lists (completed steps, errors) live in the journal and events."""

    schema_version: int
    generation: int
    current_step: int
    total_steps: int | None
    next_input: str | None
    plan_revision: int
    step_attempts: int = 0


@dataclass(frozen=True)
class Usage:
    """What one journal entry adds to the run's budget counters (every entry is one step)."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    effects: int = 0
    tool_calls: int = 0
    cache_read_tokens: int = 0   # part of input_tokens: shown apart, since they cost a tenth
    cache_write_tokens: int = 0


NO_USAGE = Usage()


class Fenced(Protocol):
    """Whose journal an entry goes into: the run, its generation and the fence its writer claimed with (a Claim)."""

    @property
    def run_id(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def fence(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One journal entry to commit: its position, the call's name and kind, what it returned and what it cost.

    `result` is the JSON text, or None with `artifact` naming the file that holds it. `wall_s` is the running
    time since the previous entry, which the checkpoint adds to `used_wall_s`.
    """

    position: int
    name: str
    kind: str
    result: str | None
    artifact: str | None = None
    started_at: float
    duration_s: float
    wall_s: float = 0.0
    attempts: int = 1
    inputs: str | None = None
    usage: Usage = NO_USAGE
    cost_usd: float | None = None

_COLUMNS = ("run_id, generation, position, name, kind, result, artifact, attempts, started_at, duration_s, fence,"
            " cost_usd, inputs, wall_s")
_INSERT = f"INSERT INTO journal_rows ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)"
# The fence check, the first thing a step's commit does (a shared write: store.write_shared). On a server it
# locks the run's row: a worker that lost its run to a takeover waits for the claim that holds the row, then
# (READ COMMITTED checks the WHERE again on the row as committed) finds the new fence and is refused, instead of
# committing an entry at a position the new owner is about to write (a unique violation there). A claim passes
# over a row a commit holds, and takes the run once that commit is visible to it.
_FENCE = "EXISTS (SELECT 1 FROM runs WHERE id = ? AND fence = ?{lock})"


def _dialects(sql: str, lock: str = FOR_UPDATE) -> dict[bool, str]:
    """`sql` as each store runs it, by `on_server`: its fence check locks the run's row (`lock`) on a server only."""
    return {server: sql.format(lock=lock if server else "") for server in (False, True)}


# A plain step: its journal row alone, fenced in the same statement, appended to journal_tail (one page per
# commit: a table of a few pages, where journal_rows, keyed by run among every other run's rows, rebalanced a leaf
# with its neighbours every few rows); its running time rides in the row until the checkpoint is folded
# (schema.checkpoints_now adds the tail for readers, the view `journal` shows both tables).
# On a server a plain step's statement is its whole transaction, committed in one round trip (write_one's
# `whole`): its fence check takes the writers' lock (shared) on reaching the run's row, before it locks that row,
# as every shared writer takes it first (so a person's exclusive write still waits for it, and it for that).
_STEP = _dialects(f"INSERT INTO journal_tail ({_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
                  f" WHERE {_FENCE}", f" AND {SHARED_LOCK} IS NOT NULL{FOR_UPDATE}")
FOLD_EVERY = 64   # plain steps between two checkpoint writes: the most a reader's view adds up
# The checkpoint moves past the entry, counting it and the tail of plain steps before it; the fence is checked
# by this UPDATE's own WHERE.
_FENCED = f" WHERE run_id = ? AND {_FENCE}"
_TAIL_WALL = ("(SELECT coalesce(sum(wall_s), 0.0) FROM journal_tail j WHERE j.run_id = checkpoints.run_id"
              " AND j.generation = checkpoints.generation AND j.position >= checkpoints.current_step)")
_MOVE = ("UPDATE checkpoints SET current_step = ?, total_steps = ?, next_input = ?, plan_revision = ?,"
         " step_attempts = 0, used_steps = used_steps + ? - current_step,"
         f" used_wall_s = used_wall_s + ? + {_TAIL_WALL}, updated_at = ?")
_CHECKPOINT = _dialects(_MOVE + _FENCED)
_CHECKPOINT_USAGE = _dialects(
    _MOVE + ", used_model_calls = used_model_calls + ?, used_input_tokens = used_input_tokens + ?,"
    " used_output_tokens = used_output_tokens + ?, used_cost_usd = used_cost_usd + ?,"
    " unpriced_calls = unpriced_calls + ?, used_effects = used_effects + ?, used_tool_calls = used_tool_calls + ?,"
    " used_cache_read_tokens = used_cache_read_tokens + ?, used_cache_write_tokens = used_cache_write_tokens + ?"
    + _FENCED)


def load_checkpoint(store: Store, run_id: str) -> Checkpoint:
    """The row as last written: its current_step is where it was folded, the tail's start (see add_entry)."""
    row = store.conn.execute("SELECT schema_version, generation, current_step, total_steps, next_input,"
                             " plan_revision, step_attempts FROM checkpoints WHERE run_id = ?", (run_id,)).fetchone()
    return Checkpoint(*row)


def load_entries(store: Store, run_id: str, generation: int) -> list[tuple[int, str, str | None, str | None]]:
    """(position, name, result JSON, artifact path) for one generation, in position order."""
    with decoding("journal"):
        return store.conn.execute("SELECT position, name, result, artifact FROM journal"
                                  " WHERE run_id = ? AND generation = ? ORDER BY position",
                                  (run_id, generation)).fetchall()


def recorded_inputs(store: Store, run_id: str, generation: int, position: int) -> str | None:
    """The digest of the arguments the step at `position` was called with, if its agent journals inputs."""
    row = store.conn.execute("SELECT inputs FROM journal WHERE run_id = ? AND generation = ? AND position = ?",
                             (run_id, generation, position)).fetchone()
    return None if row is None else row[0]


def add_step(store: Store, run: Fenced, entry: Entry) -> None:
    """A plain step committed as a transaction of its own: its journal row alone, fenced in the same statement.

    A plain step has one attempt and no usage, and leaves the checkpoint's other fields unchanged. The
    checkpoint row is folded past it later (add_entry); `checkpoints_now` counts it meanwhile.
    """
    row = (run.run_id, run.generation, entry.position, entry.name, entry.kind, entry.result, entry.artifact, 1,
           entry.started_at, entry.duration_s, run.fence, None, entry.inputs, entry.wall_s, run.run_id, run.fence)
    server = on_server(store.conn)
    write_entry(store, run, entry.position,
                lambda: refuse_stale(store.write_one(_STEP[server], row, whole=server), run.run_id, run.fence))


def fold_step(store: Store, run: Fenced, entry: Entry, checkpoint: Checkpoint, now: float) -> None:
    """A plain step whose turn it is to fold the checkpoint: add_entry as a transaction of its own.

    On a server it is one round trip (one statement, as add_step's). It is refused (FenceRefused, nothing
    written) unless the fence is the run's.
    """
    if on_server(store.conn):
        params = (run.run_id, run.fence, run.run_id, entry.position + 1, checkpoint.total_steps,
                  checkpoint.next_input, checkpoint.plan_revision, entry.position + 1, entry.wall_s, now, run.run_id,
                  run.run_id, run.generation, entry.position, entry.name, entry.kind, entry.result, entry.artifact, 1,
                  entry.started_at, entry.duration_s, run.fence, None, entry.inputs)

        def write() -> None:
            refuse_stale(store.write_one(_FOLD_STEP, params, whole=True), run.run_id, run.fence)
    else:
        def write() -> None:
            with store.write_shared() as conn:
                add_entry(conn, run, entry, checkpoint, now)
    write_entry(store, run, entry.position, write)


def write_entry(store: Store, run: Fenced, position: int, write: Callable[[], object]) -> None:
    """Run `write()`, the transaction that commits the run's journal entry at `position`, exactly once.

    Whatever commits beside the entry goes in the same transaction. However its connection is cut
    (base.write_once), the entry at that position with this fence, if there, says it committed.
    """
    def committed() -> bool | None:
        row = store.conn.execute("SELECT fence FROM journal WHERE run_id = ? AND generation = ? AND position = ?",
                                 (run.run_id, run.generation, position)).fetchone()
        return (row is not None and row[0] == run.fence) or None
    write_once(store, run.run_id, write, committed)


def recorded(conn: Connection, run_id: str, generation: int, position: int) -> bool:
    """Inside a write: whether the journal holds an entry at (run, generation, position), by any fence."""
    return conn.execute("SELECT 1 FROM journal WHERE run_id = ? AND generation = ? AND position = ?",
                        (run_id, generation, position)).fetchone() is not None


def add_entry(conn: Connection, run: Fenced, entry: Entry, checkpoint: Checkpoint, now: float) -> None:
    """Inside a write: the checkpoint moved past the entry and the plain steps before it, then the journal row.

    It is refused (FenceRefused) unless the fence is the run's.
    """
    run_id, fence, usage = run.run_id, run.fence, entry.usage
    moved = (entry.position + 1, checkpoint.total_steps, checkpoint.next_input, checkpoint.plan_revision,
             entry.position + 1, entry.wall_s, now)
    server = on_server(conn)
    if usage is NO_USAGE:
        cur = conn.execute(_CHECKPOINT[server], (*moved, run_id, run_id, fence))
    else:
        cur = conn.execute(_CHECKPOINT_USAGE[server], (
            *moved, usage.model_calls, usage.input_tokens, usage.output_tokens, usage.cost_usd, usage.unpriced_calls,
            usage.effects, usage.tool_calls, usage.cache_read_tokens, usage.cache_write_tokens, run_id, run_id, fence))
    refuse_stale(cur, run_id, fence)
    move_tail(conn, run_id)
    conn.execute(_INSERT, (run_id, run.generation, entry.position, entry.name, entry.kind, entry.result,
                           entry.artifact, entry.attempts, entry.started_at, entry.duration_s, fence, entry.cost_usd,
                           entry.inputs))


_ALL = f"{_COLUMNS}, edited"
# The fold's statements name the run as {run}: `?` inside a write whose fence is checked, or, in a batch whose
# statements go out together (store.write_batch), the run's id only while the fence is still the run's (else null,
# and the statement touches nothing), each statement checking the fence itself.
RUN, FENCED_RUN = "?", "(SELECT id FROM runs WHERE id = ? AND fence = ?)"
_FOLD_ROW = ("UPDATE checkpoints SET (current_step, used_steps, used_wall_s, updated_at) = (SELECT current_step,"
             " used_steps, used_wall_s, updated_at FROM checkpoints_now WHERE run_id = {run}) WHERE run_id = {run}")
_MOVED = f"WITH moved AS (DELETE FROM journal_tail WHERE run_id = {{run}} RETURNING {_ALL})"
_INTO_ROWS = f"INSERT INTO journal_rows ({_ALL}) SELECT {_ALL} FROM moved"
# SQLite runs them one by one, as it pays no round trips; a server gets one statement, whose parts see one snapshot
# (the fold's view still sees the tail the DELETE takes).
_MOVE_TAIL = {False: [f"INSERT INTO journal_rows ({_ALL}) SELECT {_ALL} FROM journal_tail WHERE run_id = {{run}}",
                      "DELETE FROM journal_tail WHERE run_id = {run}"],
              True: [f"{_MOVED} {_INTO_ROWS}"]}
_FOLD = {False: [_FOLD_ROW, *_MOVE_TAIL[False]], True: [f"{_MOVED}, kept AS ({_INTO_ROWS}) {_FOLD_ROW}"]}
# On a server a plain step whose turn it is to fold is one statement, its whole transaction, as every other plain
# step is (fold_step): `fenced` checks the fence once, taking the writers' lock (shared) before it locks the run's
# row; the tail is moved, the checkpoint moved past the entry and the entry written only if it held. Its parts see
# one snapshot, so the checkpoint's sum of the tail's running time sees the rows the DELETE takes, as add_entry's
# statements do one after the other.
_IF_FENCED = " AND EXISTS (SELECT 1 FROM fenced)"
_FOLD_STEP = (f"WITH fenced AS (SELECT 1 FROM runs WHERE id = ? AND fence = ? AND {SHARED_LOCK} IS NOT NULL"
              f"{FOR_UPDATE}), moved AS (DELETE FROM journal_tail WHERE run_id = ?{_IF_FENCED} RETURNING {_ALL}),"
              f" kept AS ({_INTO_ROWS}), folded AS ({_MOVE} WHERE run_id = ?{_IF_FENCED} RETURNING 1)"
              f" INSERT INTO journal_rows ({_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL FROM folded")


def naming(templates: list[str], run_id: str, fence: int | None = None) -> list[tuple[str, tuple]]:
    """Each statement with the run it names as {run}: plainly, or given `fence`, only while that is its fence."""
    run, params = (RUN, (run_id,)) if fence is None else (FENCED_RUN, (run_id, fence))
    return [(sql.replace("{run}", run), params * sql.count("{run}")) for sql in templates]


def move_tail(conn: Connection, run_id: str) -> None:
    """Move the run's tail rows, of any generation, into journal_rows. It runs inside a write whose checkpoint is
    folded past them, so journal_tail holds only rows past a checkpoint, a few pages in all."""
    for sql, params in naming(_MOVE_TAIL[on_server(conn)], run_id):
        conn.execute(sql, params)


def folding(conn: Connection, run_id: str, fence: int | None = None) -> list[tuple[str, tuple]]:
    """The statements that fold a run that is let go: its checkpoint row brought up to what the view says (the
    same numbers, now in the row), and its tail moved. Given `fence`, each checks it (see naming)."""
    return naming(_FOLD[on_server(conn)], run_id, fence)


_USAGE = ("used_steps, used_model_calls, used_input_tokens, used_output_tokens, used_cost_usd, used_tool_calls,"
          " used_effects, used_wall_s, soft_position, soft_dimensions")
_DIMENSIONS = ("steps", "model_calls", "input_tokens", "output_tokens", "cost_usd", "tool_calls", "effects", "wall_s")


def load_usage(store: Store, run_id: str) -> tuple[dict[str, float], int | None, list[str]]:
    """(used per budget dimension, soft position, dimensions past their soft threshold), the tail included."""
    return _usage(store.conn.execute(f"SELECT {_USAGE} FROM checkpoints_now WHERE run_id = ?", (run_id,)).fetchone())


def _usage(row: tuple) -> tuple[dict[str, float], int | None, list[str]]:
    return dict(zip(_DIMENSIONS, row[:8])), row[8], read_stored(row[9] or "[]", "checkpoints.soft_dimensions")


@dataclass(frozen=True)
class Opening:
    """What a worker's turn reads before its agent starts: the run's row, its checkpoint and its journal.

    `usage` reads the budget counters, so a stored value that cannot be decoded is refused where the turn
    reads it (Unreadable), after the checkpoint's schema was checked.
    """

    run: dict
    checkpoint: Checkpoint
    entries: list[tuple[int, str, str | None, str | None]]
    _usage_row: tuple

    def usage(self) -> tuple[dict[str, float], int | None, list[str]]:
        """(used per budget dimension, soft position, dimensions past their soft threshold), as load_usage."""
        return _usage(self._usage_row)


_CHECKPOINT_COLUMNS = ("schema_version", "generation", "current_step", "total_steps", "next_input", "plan_revision",
                       "step_attempts")
_OPENING = ("SELECT r.*, " + ", ".join(f"c.{name} AS c_{name}" for name in _CHECKPOINT_COLUMNS) + ", "
            + ", ".join(f"n.{name} AS n_{name}" for name in _USAGE.split(", "))
            + " FROM runs r JOIN checkpoints c ON c.run_id = r.id JOIN checkpoints_now n ON n.run_id = r.id"
            " WHERE r.id = ?")


def opening(store: Store, run_id: str, generation: int) -> Opening | None:
    """The run's row, its checkpoint, its budget counters and one generation's journal in two statements.

    None when there is no such run. The claim's fence keeps them consistent: only its holder adds to this
    generation's journal.
    """
    with decoding("runs"):
        row = one_row(store.conn.execute(_OPENING, (run_id,)))
    if row is None:
        return None
    checkpoint = Checkpoint(*(row.pop(f"c_{name}") for name in _CHECKPOINT_COLUMNS))
    usage = tuple(row.pop(f"n_{name}") for name in _USAGE.split(", "))
    return Opening(row, checkpoint, load_entries(store, run_id, generation), usage)


def record_soft(conn: Connection, run_id: str, position: int, dimensions: list[str], now: float) -> None:
    """Inside a fenced write: the soft crossing, so a replay degrades at the same point."""
    conn.execute("UPDATE checkpoints SET soft_position = coalesce(soft_position, ?), soft_dimensions = ?,"
                 " updated_at = ? WHERE run_id = ?", (position, json.dumps(dimensions), now, run_id))


def record_failed_attempt(conn: Connection, run_id: str, attempts: int, now: float) -> None:
    """Inside a fenced write: how many attempts the current step has used up."""
    conn.execute("UPDATE checkpoints SET step_attempts = ?, updated_at = ? WHERE run_id = ?", (attempts, now, run_id))


_ENTRY = "generation, position, name, kind, result, artifact, attempts, started_at, duration_s, fence, cost_usd, edited"
PAGE = 500


def journal_for(store: Store, run_id: str) -> list[dict]:
    return list(journal_pages(store, run_id))


def journal_page(store: Store, run_id: str, *, generation: int, after: int | None = None, limit: int = PAGE,
                 newest_first: bool = False) -> list[dict]:
    """One page of one generation's journal: the rows after `after`, or before it with `newest_first`. It is read by
    a keyset cursor on its position, through the primary key, so a page costs the same at the start of a run of any
    length as at its end."""
    where, params = "run_id = ? AND generation = ?", [run_id, generation]
    if after is not None:
        where += " AND position < ?" if newest_first else " AND position > ?"
        params.append(after)
    order = "DESC" if newest_first else "ASC"
    return list(store.query(f"SELECT {_ENTRY} FROM journal WHERE {where} ORDER BY position {order} LIMIT ?",
                               (*params, limit)))


def journal_pages(store: Store, run_id: str, generation: int | None = None) -> Iterator[dict]:
    """Every row of a run's journal (of one generation, or of all in order), read a page at a time: memory does
    not grow with the run."""
    generations = [generation] if generation is not None else [row[0] for row in store.conn.execute(
        "SELECT generation FROM journal_rows WHERE run_id = ? UNION SELECT generation FROM journal_tail"
        " WHERE run_id = ? ORDER BY generation", (run_id, run_id))]
    for current in generations:
        after = None
        while True:
            page = journal_page(store, run_id, generation=current, after=after)
            yield from page
            if len(page) < PAGE:
                break
            after = page[-1]["position"]


def cost_window(store: Store, run_id: str, size: int = 20) -> list[float]:
    """The cost of the current generation's last `size` entries, oldest first. An entry without a cost counts as 0.
    It is one seek on the primary key from the run's end, so it costs the same for a run of any length."""
    generation = store.conn.execute("SELECT generation FROM runs WHERE id = ?", (run_id,)).fetchone()
    # position is selected for the ORDER BY: SQLite merges the view's two tables by key only on a column it returns
    rows = store.conn.execute("SELECT position, coalesce(cost_usd, 0) FROM journal WHERE run_id = ? AND generation = ?"
                              " ORDER BY position DESC LIMIT ?",
                              (run_id, generation and generation[0], size)).fetchall()
    return [row[1] for row in reversed(rows)]


def checkpoint_for(store: Store, run_id: str) -> dict:
    return next(iter(store.query("SELECT * FROM checkpoints_now WHERE run_id = ?", (run_id,))), {})
