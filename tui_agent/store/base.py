"""What every store offers the layers above it, whichever database serves it: a connection whose `execute`
takes SQL with `?` placeholders (the dialect both SQLite and our PostgreSQL adapter speak), `write()` for a
writer's transaction, and one-line reasons when the environment stops a command. Nothing above `store/` asks
which database it is talking to."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeGuard, TypeVar

from ..errors import EnvironmentStop, Unreadable, UserError
from .environment import BUSY, ConnectionLost

# The error every store raises: sqlite3's own, and for PostgreSQL a subclass of it (postgres.PostgresError), so a
# caller above the store catches one class.
DatabaseError = sqlite3.Error
URL_SCHEMES = ("postgresql://", "postgres://")


def reopening(where: str | os.PathLike) -> str:
    """The text that opens the same database from another process: a file's path, or a URL with its password."""
    return getattr(where, "secret", None) or os.fspath(where)


class StoreError(UserError):
    """A database the user pointed at cannot be used; the message says what to do."""


def on_server(conn: Connection) -> bool:
    """Whether the connection is to a database server rather than to a SQLite file. On a server (PostgreSQL) its
    clock judges leases; on a SQLite file the host's clock does. This is the one place the store's queries ask."""
    return not isinstance(conn, sqlite3.Connection)


def is_url(where: str | os.PathLike) -> TypeGuard[str]:
    return isinstance(where, str) and where.startswith(URL_SCHEMES)


_UNDECODABLE = re.compile(r"Could not decode to UTF-8 column '([^']*)'")


@contextmanager
def decoding(table: str) -> Iterator[None]:
    """Inside: a TEXT value that is not UTF-8 raises Unreadable naming `table.column`. SQLite keeps whatever
    bytes another program gives it; Python's sqlite3 cannot read them back and says so in an OperationalError.
    A PostgreSQL server refuses such bytes when they are written."""
    try:
        yield
    except sqlite3.OperationalError as e:
        found = _UNDECODABLE.match(str(e))
        if found is None:
            raise
        raise Unreadable(f"{table}.{found.group(1)}", "it holds bytes that are not UTF-8 text") from None


class FenceRefused(Exception):
    """A write carried a fence older than the run's: another lease (or a person) took the run."""


def refuse_stale(cursor: Cursor, run_id: str, fence: int) -> None:
    """FenceRefused unless the fenced statement behind `cursor` changed its one row."""
    if cursor.rowcount != 1:
        raise FenceRefused(f"run {run_id}: fence {fence} is stale; another lease or a person took the run")


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...
    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...   # as sqlite3's: a tuple, or None; an aggregate's one row is indexed at once
    def fetchall(self) -> list[tuple]: ...
    def __iter__(self) -> Iterator[tuple]: ...


class Connection(Protocol):
    """What the store's functions need of a connection: sqlite3's, or the PostgreSQL wrapper (postgres.py)."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, params: Any = (), /) -> Cursor: ...
    def close(self) -> None: ...


def positioned_page(store: Store, table: str, *, run_id: str, after: tuple[int, int] | None, limit: int,
                    newest_first: bool = False) -> list[dict]:
    """A page of a run's rows of `table`, in (generation, position) order, after a keyset cursor.

    `table` is unique on run_id, generation, position. The page is the rest of the cursor's generation, then
    the generations beyond it: two ranges of the index, so a page costs the same anywhere in a run of any
    length."""
    op, order = ("<", "DESC") if newest_first else (">", "ASC")
    rows: list[dict] = []
    if after is not None:
        rows = list(store.query(f"SELECT * FROM {table} WHERE run_id = ? AND generation = ? AND position {op} ?"
                                   f" ORDER BY position {order} LIMIT ?", (run_id, *after, limit)))
    if len(rows) < limit:
        beyond, params = ("", ()) if after is None else (f" AND generation {op} ?", (after[0],))
        rows += store.query(f"SELECT * FROM {table} WHERE run_id = ?{beyond}"
                               f" ORDER BY generation {order}, position {order} LIMIT ?",
                               (run_id, *params, limit - len(rows)))
    return rows


class ReadWhole:
    """A cursor's rows and rowcount, read before the next statement runs (so the cursor may run another)."""

    __slots__ = ("rows", "rowcount", "description")

    def __init__(self, cursor: Cursor) -> None:
        self.rows = cursor.fetchall()   # first: a RETURNING statement's rowcount counts the rows read
        self.rowcount, self.description = cursor.rowcount, cursor.description

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple]:
        return self.rows

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.rows)


def dict_rows(cursor: Cursor) -> Iterator[dict]:
    """The cursor's rows as they are read, each a dict of column names."""
    names = [d[0] for d in cursor.description]
    return (dict(zip(names, row)) for row in cursor)


def one_row(cursor: Cursor) -> dict | None:
    """The cursor's next row as a dict of column names, or None."""
    return next(dict_rows(cursor), None)


FOR_UPDATE = " FOR UPDATE"
# On a server every writer's transaction holds one advisory lock ("tuia"), exclusively (store.write()) or shared
# (write_shared, write_batch).
WRITE_LOCK = 0x7475_6961
SHARED_LOCK = f"pg_advisory_xact_lock_shared({WRITE_LOCK})"


def for_update(conn: Connection, skip_locked: bool = False) -> str:
    """The suffix that makes a SELECT lock the rows it returns, on a server. A transaction that meets a row another
    holds waits, then checks its WHERE again on the row as committed (READ COMMITTED), or with `skip_locked` passes
    over it. On SQLite, whose writers hold the one write lock, nothing."""
    if not on_server(conn):
        return ""
    return f"{FOR_UPDATE} SKIP LOCKED" if skip_locked else FOR_UPDATE


UNIQUE_VIOLATION = "23505"
T = TypeVar("T")


def write_once(store: Store, run_id: str, write: Callable[[], T], committed: Callable[[], T | None]) -> T:
    """Run `write()` as a run's worker's transaction that is never written twice and never reported lost.

    Its rows must be found by `committed()` by their key and fence; it returns what `write()` returns, or None
    when they are not there. When the connection drops under it (a server restart, an administrator, the
    network), whether it committed is unknown: once a connection answers again (a worker's run waits for one
    while its lease allows, `patience`), the run's row is locked, which waits for a cut transaction that still
    holds it (every such write locks that row before it writes), and `committed()` reads. Found, nothing is
    written again; not found, `write()` runs again under its own checks (a run taken meanwhile refuses it).
    Should the cut write's session have lived on and committed beside the second, the rows' unique key refuses
    one of the two, and a refused second is read back."""
    cut = False
    while True:
        try:
            return write()
        except ConnectionLost:
            cut = True
        except DatabaseError as e:
            if not (cut and getattr(e, "sqlstate", "") == UNIQUE_VIOLATION):
                raise
            found = _read_back(store, run_id, committed)
            if found is None:
                raise
            return found
        found = _read_back(store, run_id, committed)
        if found is not None:
            return found


def _read_back(store: Store, run_id: str, committed: Callable[[], T | None]) -> T | None:
    """`committed()` once no cut transaction holds the run's row; the environment's stop if it cannot be read."""
    try:
        store.conn.execute(f"SELECT 1 FROM runs WHERE id = ?{for_update(store.conn)}", (run_id,))
        return committed()
    except DatabaseError as e:
        store.raise_stop(e)
        raise


def no_patience() -> bool:
    return False


def backoff(first_s: float = 0.05, most_s: float = 1.0) -> Iterator[float]:
    """The pauses between tries at something the environment holds up: doubling from `first_s` up to `most_s`."""
    pause = first_s
    while True:
        yield pause
        pause = min(pause * 2, most_s)


class Write:
    """`with store.write() as conn:` commits on success and rolls back on any exception. It is a class, not a
    generator, because it sits on the per-step hot path. An error the environment caused leaves as an
    EnvironmentStop, so no caller can mistake a busy or full disk for its own failure. Each store's subclass begins
    the transaction (`__enter__`) and names how it commits (`COMMIT`)."""

    __slots__ = ("store",)
    COMMIT = "COMMIT"

    def __init__(self, store: Store) -> None:
        self.store = store

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            try:
                self.store.conn.execute(self.COMMIT)
                return
            except DatabaseError as e:
                self.store.abandon()
                self.store.raise_stop(e)
                raise
        self.store.abandon()
        if isinstance(error, DatabaseError):
            self.store.raise_stop(error)


class Store:
    """One connection to the database, in autocommit mode; writers use `write()`. `path` is what reopens it
    from another thread or process (a file, or a URL whose printed form hides its password), `data_dir` the
    folder for artifacts and agents' data."""

    path: Path | Any
    data_dir: Path
    durability: str
    conn: Connection
    found_version: int | None   # the schema version it had before this open (None: this open created it)
    label: str                  # a short name for headers: the file's name, or database@host
    artifacts_in_table = False  # a SQLite file that keeps its artifacts as rows, as a server does (store/artifacts.py)

    def __init__(self) -> None:
        # a worker's run sets how long its statements may wait out a held lock, or a server that is away
        self.patience = no_patience

    def write(self) -> Any:
        raise NotImplementedError

    def write_shared(self) -> Any:
        """A writer's transaction that may commit beside other such writers, because its checks are row conditions.

        Every check is a row condition in its own statements (a fence, an expected status, with a rowcount
        check; the first statement locks the run's row), so it need not exclude other such writers, only
        `write()`'s, which read and then decide. On a server they commit side by side (workers on several
        machines add throughput), while a `write()` waits for them all and they for it. A SQLite file has one
        write lock: there it is `write()`."""
        return self.write()

    def stopped(self, error: DatabaseError) -> EnvironmentStop | None:
        raise NotImplementedError

    def abandon(self) -> None:
        raise NotImplementedError

    def query(self, sql: str, params: tuple | list = ()) -> Iterator[dict]:
        """Rows as dicts of column names."""
        raise NotImplementedError

    def data_version(self) -> int:
        """A number that changes when something is committed: a refresh check that costs one round trip."""
        raise NotImplementedError

    def read_only(self) -> None:
        """Refuse every write on this connection from now on (a replay or a diff reads only)."""
        raise NotImplementedError

    def wait_at_most(self, ms: int) -> None:
        """How long a statement waits for a held lock before the environment's BUSY stop."""
        raise NotImplementedError

    def refuse_damaged(self) -> None:
        """Raise the environment's DAMAGED stop for a damaged database, reading it only (a server checks its own
        pages); a SQLite store's first write does this itself."""

    def check_intact(self) -> None:
        """A worker's first act, before it writes anything: refuse a damaged database, and tables another program
        changed (a server checks its own pages)."""

    def checkpoint(self) -> bool:
        """Shrink the write-ahead log at an idle moment; True when it was emptied (a server keeps its own)."""
        return False

    def raise_stop(self, error: DatabaseError) -> None:
        """Raise the environment's reason for `error`, if it has one (else the caller re-raises `error`)."""
        stop = self.stopped(error)
        if stop is not None:
            raise stop from error

    def write_one(self, sql: str, params: tuple, whole: bool = False) -> Cursor:
        """Run one statement as its own transaction, waiting out a held lock as `write()` does. It is for a statement
        whose checks are row conditions (see `write_shared`). `whole`: on a server the statement is a shared writer's
        whole transaction by itself, sent as it is: it takes SHARED_LOCK before it locks any row (journal's plain
        step)."""
        try:
            return self.conn.execute(sql, params)
        except DatabaseError as e:
            return self.wait_for_lock(e, sql, params)

    def write_batch(self, statements: list[tuple[str, tuple]]) -> list[Cursor]:
        """`statements` as one shared writer's transaction (see `write_shared`), committed together; each one's
        cursor, read whole. On a server they go in one round trip, so none can depend on what an earlier one
        returned except through SQL: each carries its own checks (the fence in its WHERE), and the caller reads
        the rowcounts afterwards."""
        with self.write_shared() as conn:
            return [ReadWhole(conn.execute(sql, params)) for sql, params in statements]

    def wait_for_lock(self, error: DatabaseError, sql: str = "BEGIN IMMEDIATE", params: tuple = ()) -> Cursor:
        """`sql` (the start of a write, or a statement on its own) failed. A lock held past the busy timeout is
        waited out again, with back-off, while `patience()` says so (a worker whose lease still runs); anything
        else stops here."""
        pauses = backoff()
        while True:
            stop = self.stopped(error)
            if stop is None:
                raise error
            if stop.kind != BUSY or not self.patience():
                raise stop from error
            time.sleep(next(pauses))
            try:
                return self.conn.execute(sql, params)
            except DatabaseError as e:
                error = e

    def close(self) -> None:
        self.conn.close()

    def drop(self) -> None:
        """What a crash does to the connection: roll back whatever was open and let go."""
        self.abandon()
        self.conn.close()
