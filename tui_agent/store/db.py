"""Opening the per-user database: create it atomically, validate before touching, migrate.

A new database is built in a temporary file (mode 0600) and linked into place, so
two processes opening a fresh path cannot race and an empty file is never ours. An
existing file is checked read-only (header, `meta`) before any pragma that writes.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import platformdirs

from . import integrity, wal
from .artifacts import kept_in_table
from .base import Cursor, Store, StoreError, Write, dict_rows, is_url
from .environment import (
    BUSY,
    FULL,
    READ_ONLY,
    EnvironmentStop,
    schema_mismatch,
    stop_for,
    stop_for_os,
)
from .schema import MIGRATIONS, SCHEMA_VERSION, differences
from .workers import refuse_migration_while_running

BUSY_TIMEOUT_MS = 15_000
# The size the WAL file is cut back to whenever it restarts after a complete checkpoint. No checkpoint can pass a
# reader's snapshot, so a long reader lets the WAL grow without bound; without this limit SQLite reuses the file at
# whatever size it reached, forever. 16 MiB is four times what the default auto-checkpoint (1000 pages) lets a
# WAL reach between checkpoints, so normal use never truncates and regrows the file, yet a spike does not stay.
JOURNAL_SIZE_LIMIT = 16 * 1024 * 1024
DURABILITY = {"full": "FULL", "normal": "NORMAL"}


def default_path() -> Path:
    return platformdirs.user_data_path("tui-agent") / "runs.db"


def data_dir_for(path: Path) -> Path:
    """The folder beside the database that holds its artifacts and agents' data."""
    return path.with_name(path.stem + ".data") if path.suffix else path.with_name(path.name + ".data")


def read_only_uri(path: str | os.PathLike) -> str:
    """SQLite's URI that opens the file at `path` read-only (add `&immutable=1` to read it without locks)."""
    return f"file:{quote(os.fsencode(Path(path).resolve()))}?mode=ro"   # the file system's bytes, any of them


def read_only(path: str | os.PathLike, timeout_s: float = 5.0) -> sqlite3.Connection:
    """A connection that can only read the file at `path`, through SQLite's read-only URI.

    It never uses Python's open(), whose closing would drop this process's POSIX locks on the file (see
    `_read_version`). Where SQLite cannot make the WAL's index beside the file (`as_it_is`), the file is read as
    it is."""
    conn, _ = as_it_is(sqlite3.connect(read_only_uri(path), uri=True, timeout=timeout_s), Path(path))
    return conn


def as_it_is(conn: sqlite3.Connection, path: Path, any_thread: bool = False,
             ) -> tuple[sqlite3.Connection, EnvironmentStop | None]:
    """`conn` after its first read, and None. Every reader of a WAL file makes the WAL's index (`-shm`, `-wal`)
    beside it; in a read-only folder or on a full disk it cannot. When that is why the read failed and no `-wal`
    with frames is there (so the file alone holds every commit), a connection that reads the file as it is
    (SQLite's `immutable`: no index, no locks) instead, and the stop (read-only, full) a write would meet: reads
    keep working, writes stop with the environment's line. Any other error is raised, `conn` closed."""
    try:
        conn.execute("PRAGMA schema_version").fetchone()
        return conn, None
    except sqlite3.Error as e:
        conn.close()
        stop = stop_for(e, path)
        if stop is None or stop.kind not in (READ_ONLY, FULL) or _wal_has_frames(path):
            raise
        return sqlite3.connect(read_only_uri(path) + "&immutable=1", uri=True, isolation_level=None,
                               check_same_thread=not any_thread), stop


def _wal_has_frames(path: Path) -> bool:
    try:
        return os.stat(f"{path}-wal").st_size > 0
    except FileNotFoundError:
        return False


def _read_version(path: Path) -> int:
    """Schema version of an existing file, read through a read-only SQLite connection.

    Never through Python's own open(): closing any descriptor of the database file drops every
    POSIX lock this process holds on it, so another process could take the file as unused and
    checkpoint or delete the WAL under our open connections.
    """
    if path.stat().st_size == 0:
        raise StoreError(f"{path} is an empty file, not a tui-agent database; remove it or pass another --db")
    try:
        with closing(read_only(path, BUSY_TIMEOUT_MS / 1000)) as ro:
            row = ro.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error as e:
        raise _unreadable(e, path) from None
    if row is None or not str(row[0]).isdigit():
        raise StoreError(f"{path} has no schema version in its meta table; it is not tui-agent's")
    version = int(row[0])
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} has schema version {version}, newer than this tui-agent understands "
                         f"({SCHEMA_VERSION}); upgrade tui-agent")
    return version


def _unreadable(error: sqlite3.Error, path: Path) -> Exception:
    """Why the file's schema version could not be read: not ours, or the environment's.

    Not ours is exit 2. The environment's is exit 4: the file held by another program past the busy timeout, a
    full disk, or a damaged page after a SQLite header."""
    name, text = getattr(error, "sqlite_errorname", "") or "", str(error)
    if "no such table" in text:
        return StoreError(f"{path} is a SQLite database but not tui-agent's (it has no meta table); pass another --db")
    if name.startswith("SQLITE_NOTADB") or "not a database" in text:
        return StoreError(f"{path} is not a SQLite database; pass another --db")
    if name.startswith("SQLITE_CANTOPEN") and not os.access(path, os.R_OK):
        return StoreError(f"{path} cannot be opened read-only ({error}); check its permissions")
    stop = stop_for(error, path)
    if stop is not None:
        return stop
    if isinstance(error, sqlite3.OperationalError):
        return StoreError(f"{path} cannot be read ({error})")
    return StoreError(f"{path} is not a SQLite database; pass another --db")


def _migrate(conn: sqlite3.Connection, start: int) -> None:
    """Inside the caller's transaction. sqlite_utils, which the migrations are written in, loads only here: a
    command on a database that is up to date never imports it (a tenth of a second of every start)."""
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    for version in range(start, SCHEMA_VERSION):
        MIGRATIONS[version](db)
    db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")


_KERNEL_FOLDERS = (Path("/proc"), Path("/sys"))  # their files are the kernel's: no database can live there


def _check_place(path: Path) -> None:
    """Refuse, before anything is opened or made there, a path that can never hold a database."""
    if path.is_dir():
        raise StoreError(f"{path} is a folder, not a database file; pass --db a file in it, such as "
                         f"{path / 'runs.db'}")
    resolved = path.resolve()
    for root in _KERNEL_FOLDERS:
        if resolved.is_relative_to(root):
            raise StoreError(f"{path} is under {root}, which holds the kernel's files, never a database; "
                             "pass --db a file in a folder of yours")


def _temporary_beside(path: Path) -> Path:
    """A new private empty file in the database's folder (made if missing), or a one-line StoreError."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as e:
        stop = stop_for_os(e, path)  # a read-only folder or a full disk: the environment's, not a usage error
        if stop is not None:
            raise stop from None
        why = ("part of its path is a file, not a folder" if isinstance(e, (FileExistsError, NotADirectoryError))
               else e.strerror)
        raise StoreError(f"cannot create a database at {path} ({why}); pass --db a file in a folder you can "
                         "write") from None
    return tmp


def _create(path: Path) -> None:
    """Build the schema in a private temporary file and link it into place, never over another. The file has
    incremental auto-vacuum, so the pages prune frees go back to the file system (store/prune.py)."""
    tmp = _temporary_beside(path)
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            # before the first table: a page freed (by prune) can then be given back to the file system
            conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("BEGIN IMMEDIATE")
            _migrate(conn, 0)
            conn.execute("COMMIT")
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)


class _Write(Write):
    __slots__ = ()
    store: SqliteStore

    def __enter__(self) -> sqlite3.Connection:
        conn = self.store.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            self.store.wait_for_lock(e)
        return conn


class SqliteStore(Store):
    """The per-user SQLite file, behind one connection in autocommit mode.

    Writers use `write()` (or `write_one`), the first of which refuses a damaged file (store/integrity.py) or
    one that can only be read as it is (`as_it_is`)."""

    path: Path
    conn: sqlite3.Connection

    def __init__(self, path: Path, durability: str = "full", create: bool = True, any_thread: bool = False) -> None:
        """With `create=False`, for commands that only read, a missing database is an error and neither it nor its
        folders are made. A mistyped --db must not leave an empty database behind. `any_thread`: the connection may
        be handed to another thread (one thread at a time uses it: the TUI's reader and actor)."""
        if durability not in DURABILITY:
            raise StoreError(f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}")
        super().__init__()
        self._any_thread = any_thread
        self._unchecked = True                     # no write yet: the first one checks the file (_first_write)
        self.cannot_write: EnvironmentStop | None = None
        self.path = Path(path)
        self.label = self.path.name
        self.durability = durability
        self.data_dir = data_dir_for(self.path)
        _check_place(self.path)
        existed = self.path.exists()
        if not existed:
            if not create:
                raise StoreError(f"no database at {self.path}; start a run to create one (tui-agent run hello)")
            _create(self.path)
        version = _read_version(self.path)
        self.found_version = version if existed else None
        if create:
            try:
                self.data_dir.mkdir(mode=0o700, exist_ok=True)  # artifacts and outboxes are as private as the database
            except OSError as e:
                raise stop_for_os(e, self.data_dir) or e from e
        try:
            self._connect(durability)
            if version < SCHEMA_VERSION:
                with self.write():
                    current = int(self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
                    if current < SCHEMA_VERSION:
                        refuse_migration_while_running(self.conn, self.path, current, time.time())
                        _migrate(self.conn, current)
            self.artifacts_in_table = kept_in_table(self.conn)
        except sqlite3.Error as e:
            self.raise_stop(e)
            raise

    def _connect(self, durability: str) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000,
                               check_same_thread=not self._any_thread)
        self.conn, self.cannot_write = as_it_is(conn, self.path, self._any_thread)
        self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
        self.conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
        if self.cannot_write is None and self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self.conn.execute("PRAGMA journal_mode=WAL")   # ours always is: no write to ask

    def _first_write(self) -> None:
        """Before this connection's first write: the stop a file read as it is meets, or a damaged file's."""
        if self.cannot_write is not None:
            raise EnvironmentStop(self.cannot_write.kind, str(self.cannot_write))
        self.refuse_damaged()
        self._unchecked = False

    def write(self) -> _Write:
        """A writer's transaction: BEGIN IMMEDIATE, so a busy database waits instead of failing halfway."""
        if self._unchecked:
            self._first_write()
        return _Write(self)

    def write_one(self, sql: str, params: tuple, whole: bool = False) -> Cursor:
        if self._unchecked:
            self._first_write()
        return super().write_one(sql, params)

    def stopped(self, error: sqlite3.Error) -> EnvironmentStop | None:
        """The environment's reason for an error on this connection. One that is not a held lock (read-only, full,
        damaged) also forgets the file's verdict, so the next writer checks it again."""
        stop = stop_for(error, self.path)
        if stop is not None and stop.kind != BUSY:
            integrity.forget(self.path, self.data_dir)
        if stop is None and "no such" in str(error):   # a table or column missing: a bug of ours, or a changed file
            try:   # a connection of its own: ours may be closed already, or inside a failed transaction
                with closing(read_only(self.path)) as ro:
                    missing = differences(ro)
            except sqlite3.Error:
                return None
            if missing:
                return schema_mismatch(self.path, missing)
        return stop

    def abandon(self) -> None:
        """Roll back what is open. After a failed COMMIT SQLite may have rolled back already, and a second ROLLBACK
        would hide the real error behind "no transaction is active"."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def query(self, sql: str, params: tuple | list = ()) -> Iterator[dict]:
        return dict_rows(self.conn.execute(sql, params))

    def data_version(self) -> int:
        """Changes when another connection commits: a refresh check that costs one pragma."""
        return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def read_only(self) -> None:
        self.conn.execute("PRAGMA query_only = ON")

    def wait_at_most(self, ms: int) -> None:
        self.conn.execute(f"PRAGMA busy_timeout={ms}")

    def refuse_damaged(self) -> None:
        integrity.verify(self.conn, self.path, self.data_dir)

    def check_intact(self) -> None:
        if self._unchecked:
            self._first_write()
        missing = differences(self.conn)   # a worker writes every column: tables another program changed are refused
        if missing:
            raise schema_mismatch(self.path, missing)

    def checkpoint(self) -> bool:
        return wal.checkpoint(self)


def open_store(path: str | os.PathLike | None = None, durability: str = "full", create: bool = True, *,
               any_thread: bool = False, statement_timeout_s: float | None = None) -> Store:
    """The database at `path`, a SQLite file or a PostgreSQL server's database named by a postgresql:// URL.

    `path` None is the per-user default. `any_thread`: the connection may be handed to another thread, used by one
    thread at a time (a psycopg connection always may be). `statement_timeout_s`: on PostgreSQL, a statement that
    runs longer is cancelled, the environment's BUSY stop (SQLite's readers never wait on a writer, so it has none)."""
    if path is not None and is_url(path):
        # psycopg is an optional extra: imported only for a URL
        from .postgres import PostgresStore
        return PostgresStore(path, durability, create, statement_timeout_s=statement_timeout_s)
    return SqliteStore(default_path() if path is None else Path(path), durability, create, any_thread)
