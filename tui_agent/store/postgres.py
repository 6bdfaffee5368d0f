"""PostgreSQL, for a team whose workers run on several machines (SQLite's locks are not to be trusted over a
network file system). The same schema and the same SQL as the SQLite store: statements keep their `?`
placeholders and are translated to psycopg's `%s` once per text. A writer's transaction (`write()`) takes one
advisory lock exclusively, as SQLite's BEGIN IMMEDIATE takes the file's write lock, so every check-then-write
that is safe on SQLite is safe here unchanged; a worker's fenced transactions (`write_shared()`) hold it shared,
side by side, ordered by the run's row lock. The password in a URL is never printed: `Url` prints without it."""

from __future__ import annotations

import functools
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import platformdirs
import psycopg
from psycopg import pq
from psycopg.adapt import Loader

from ..errors import EnvironmentStop
from .base import SHARED_LOCK, WRITE_LOCK, Cursor, ReadWhole, Store, StoreError, Write, backoff, dict_rows
from .environment import BUSY, FULL, READ_ONLY, UNREACHABLE, ConnectionLost, schema_mismatch
from .schema import SCHEMA_VERSION
from .schema_postgres import create_schema, differences, migrate
from .workers import refuse_migration_while_running

# The version PostgreSQL's schema began at (schema_postgres.py); the migrations after it run on both dialects.
PG_FIRST_VERSION = 9

BUSY_TIMEOUT_MS = 15_000
# A writer of ours idle inside its transaction this long is a stopped process (Ctrl-Z, a laptop asleep, a
# debugger): the server ends its session, so its locks stop holding up every other writer, and nothing it wrote
# commits. Shorter than BUSY_TIMEOUT_MS, so a command waiting behind it goes on instead of giving up; our own
# transactions never wait on anything but the server between their statements.
IDLE_IN_WRITE_MS = 10_000
SYNCHRONOUS = {"full": "on", "normal": "off"}   # NORMAL loses at most the last commits to a server crash
_SECRET_PARAMS = {"password", "passfile"}


class Url(str):
    """A postgresql:// URL that prints without its password; `secret` is the whole URL, for connecting."""

    secret: str

    def __new__(cls, url: str) -> Url:
        if isinstance(url, Url):
            return url
        shown = super().__new__(cls, redacted(url))
        shown.secret = url
        return shown


def redacted(url: str) -> str:
    """The URL with no password, in its user part or its query."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in _SECRET_PARAMS])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class PostgresError(sqlite3.Error):
    """psycopg's error, raised as the store's one error class (see base.DatabaseError); `sqlstate` says what."""

    def __init__(self, error: psycopg.Error) -> None:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        super().__init__(first)
        self.sqlstate = error.sqlstate or ""
        self.lost = isinstance(error, psycopg.OperationalError) and not error.sqlstate   # the connection broke


_TOKENS = re.compile(r"'[^']*'|::|:([A-Za-z_]\w*)|\bIS (NOT )?\?|\?|%|\bINDEXED BY \w+")


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """A SQLite statement rewritten for psycopg and PostgreSQL.

    `?` becomes `%s`, `:name` becomes `%(name)s` (a `::` cast stays), and every literal `%` is doubled (psycopg
    reads `%` as a placeholder's start), in string literals too. SQLite's `INDEXED BY` (a hint that fails loudly
    when the index does not fit) goes: PostgreSQL's planner chooses. SQLite's `IS [NOT] ?`, equality that takes
    NULL, is PostgreSQL's `IS [NOT] DISTINCT FROM`."""
    def token(found: re.Match) -> str:
        text = found.group()
        if text.startswith("'"):
            return text.replace("%", "%%")
        if found.group(1):
            return f"%({found.group(1)})s"
        if text.startswith("IS "):
            return "IS DISTINCT FROM %s" if found.group(2) else "IS NOT DISTINCT FROM %s"
        return {"?": "%s", "%": "%%"}.get(text, "" if text.startswith("INDEXED") else text)
    return _TOKENS.sub(token, sql)


class _Numeric(Loader):
    """A numeric (a sum of integers, say) as an int when whole, else a float: never a Decimal, which neither
    JSON nor the arithmetic above the store takes."""

    def load(self, data) -> int | float:
        text = bytes(data).decode()
        return float(text) if any(c in text for c in ".eEN") else int(text)


class _Cursor:
    __slots__ = ("_cur", "rowcount")

    def __init__(self, cur: psycopg.Cursor) -> None:
        self._cur = cur
        self.rowcount = cur.rowcount

    @property
    def description(self):
        return self._cur.description

    def fetchone(self) -> tuple | None:
        return self._cur.fetchone() if self.description is not None else None

    def fetchall(self) -> list[tuple]:
        return self._cur.fetchall() if self.description is not None else []

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.fetchall())


# Statements that change nothing by themselves (outside a writer's transaction, a SELECT only reads): sent again
# when the server dropped the connection under them
_SAFE_AGAIN = re.compile(r"\s*(SELECT|BEGIN|SHOW|SET)\b", re.IGNORECASE)


class _Connection:
    """The part of sqlite3.Connection the stores' queries use, over one psycopg connection in autocommit.
    A connection the server dropped (a restart, an administrator's pg_terminate_backend) is opened again by
    the next statement, `reopen` (which a worker's run lets wait for a server that is away), unless a writer's
    transaction was open on it: that transaction is gone, and its writer must hear so (its statements raise)
    rather than go on outside it."""

    def __init__(self, raw: psycopg.Connection, reopen: Callable[[], psycopg.Connection] | None = None) -> None:
        self.raw = raw
        self.reopen = reopen
        self.writing = False   # inside a writer's transaction (_Write)
        self._trace: Callable[[str], object] | None = None
        # at_once's cursor for one statement, kept with the connection it was made on: psycopg spends more client
        # CPU making a cursor than sending a statement on it (bench/step_overhead.py --postgres)
        self._one: psycopg.Cursor | None = None

    def set_trace_callback(self, trace: Callable[[str], object] | None) -> None:
        """Have `trace(sql)` called for every statement sent, as sqlite3's does, with its parameters after it. A test
        counts what a read costs, and which run it read."""
        self._trace = trace

    def _traced(self, sql: str, params: tuple | list) -> None:
        if self._trace is not None:
            self._trace(f"{sql} -- {params!r}" if params else sql)

    def execute(self, sql: str, params: tuple | list = ()) -> Cursor:
        self._traced(sql, params)
        # closed, not only broken: a connection given up on while the server was away (_reconnect) is closed
        if self.raw.closed and not self.writing and self.reopen is not None:
            self.raw = self.reopen()
        try:
            return _Cursor(self.raw.execute(translate(sql), params))
        except psycopg.Error as e:
            if not (self.raw.closed and not self.writing and self.reopen is not None and _SAFE_AGAIN.match(sql)):
                raise PostgresError(e) from e
        # the server dropped the connection under a statement that changes nothing: once more, on a new one
        self.raw = self.reopen()
        try:
            return _Cursor(self.raw.execute(translate(sql), params))
        except psycopg.Error as e:
            raise PostgresError(e) from e

    def at_once(self, statements: Sequence[tuple[str, tuple | list]]) -> list[Cursor]:
        """Commit `statements` together in one round trip, as one implicit transaction. A failing statement rolls
        back those before it and skips those after. One statement is sent as it is; several are pipelined up to one
        Sync. A connection the server has already ended (a restart, an administrator, while it sat idle) is opened
        again first, as nothing was sent on it; one that drops under them raises, and whether they committed is
        unknown."""
        raw = self.raw
        if (raw.closed or not _alive(raw)) and self.reopen is not None:
            raw = self.raw = self.reopen()
        for sql, params in statements:
            self._traced(sql, params)
        if len(statements) == 1:
            cur = self._one
            if cur is None or cur.connection is not raw:
                cur = self._one = raw.cursor()
            try:
                return [ReadWhole(_Cursor(cur.execute(translate(statements[0][0]), statements[0][1])))]
            except psycopg.Error as e:
                raise PostgresError(e) from e
        first = None   # an error met while sending: raised once the pipeline is left (whose own end then fails)
        try:
            with raw.pipeline():
                try:
                    sent = [raw.execute(translate(sql), params) for sql, params in statements]
                except psycopg.Error as e:
                    first = e
        except psycopg.Error as e:
            raise PostgresError(first or e) from e
        if first is not None:
            raise PostgresError(first) from first
        return [_Cursor(cur) for cur in sent]

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    def close(self) -> None:
        self.reopen = None
        self.raw.close()


def _alive(raw: psycopg.Connection) -> bool:
    """Whether the server has not ended this idle connection. What it said meanwhile, such as an ended session's last
    words, is read without waiting, so an end it announced shows before anything is sent."""
    try:
        with raw.lock:
            raw.pgconn.consume_input()
    except psycopg.Error:
        return False
    return raw.pgconn.status == pq.ConnStatus.OK


class _Write(Write):
    """`write()`'s transaction: WRITE_LOCK held exclusively, so no other writer's transaction runs beside it."""

    __slots__ = ()
    store: PostgresStore
    LOCK = "pg_advisory_xact_lock"

    def __enter__(self) -> _Connection:
        conn = self.store.conn
        try:   # BEGIN and the lock in one round trip, as a simple query
            conn.execute(f"BEGIN; SELECT {self.LOCK}({WRITE_LOCK})")   # a dropped connection is opened again here
        except sqlite3.Error as e:
            self.store.abandon()
            self.store.wait_for_lock(e, f"SELECT {self.LOCK}(?)", (WRITE_LOCK,), begin=True)
        conn.writing = True
        return conn

    def __exit__(self, kind, error, trace) -> None:
        try:
            super().__exit__(kind, error, trace)
        finally:
            self.store.conn.writing = False


class _SharedWrite(_Write):
    """`write_shared()`'s transaction, which holds WRITE_LOCK shared. It sits beside other shared ones, whose row
    locks order them, never beside an exclusive one."""

    __slots__ = ()
    LOCK = "pg_advisory_xact_lock_shared"


class PostgresStore(Store):
    path: Url
    conn: _Connection

    def __init__(self, url: str, durability: str = "full", create: bool = True, *,
                 statement_timeout_s: float | None = None) -> None:
        """Open the server database at `url`, with an optional statement timeout.

        `statement_timeout_s`: a statement running longer is cancelled, the BUSY stop (the TUI's sessions use it,
        so a slow server cannot hold a screen); None leaves the server's default."""
        if durability not in SYNCHRONOUS:
            raise StoreError(f"durability must be one of {', '.join(SYNCHRONOUS)}, not {durability!r}")
        super().__init__()
        self.path = Url(url)
        self.durability = durability
        parts = urlsplit(self.path)
        self.label = f"{parts.path.strip('/') or 'postgres'}@{parts.hostname or 'local'}"
        self.data_dir = data_dir_for_url(self.path)
        self._settings = {"synchronous_commit": SYNCHRONOUS[durability],   # set again on a new connection
                          "idle_in_transaction_session_timeout": str(IDLE_IN_WRITE_MS)}
        if statement_timeout_s is not None:
            self._settings["statement_timeout"] = str(int(statement_timeout_s * 1000))
        self._snapshot: str | None = None     # the server's snapshot at the last data_version
        self._changes = 0                     # how often it was found to have moved: data_version
        self.conn = _Connection(self._connect(first=True), self._reconnect)
        self.wait_at_most(BUSY_TIMEOUT_MS)
        self._open_schema(create)
        if create:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _connect(self, first: bool = False) -> psycopg.Connection:
        """A new connection with this store's settings. A server that cannot be reached is the environment's stop
        (exit 4); a refusal of the URL itself (no such database or user, a wrong password) is the user's."""
        try:
            raw = psycopg.connect(self.path.secret, autocommit=True, connect_timeout=10, application_name="tui-agent")
        except psycopg.Error as e:
            raise connect_error(self.path, e) from None
        raw.adapters.register_loader("numeric", _Numeric)
        try:
            for name, value in self._settings.items():
                raw.execute(f"SET {name} = {value}")
        except psycopg.Error as e:
            broken = raw.broken
            raw.close()
            if broken:   # the server went between the connection and its settings
                raise connect_error(self.path, e) from None
            raise PostgresError(e) from e
        return raw

    def _reconnect(self, patient: bool = True) -> psycopg.Connection:
        """The server dropped our connection: a new one. While the server is away, a worker's run waits for it
        as long as `patience()` says (its lease still runs), trying again with back-off; anyone else, or past
        that, gets the environment's stop."""
        try:
            self.conn.raw.close()
        except psycopg.Error:
            pass
        pauses = backoff()
        while True:
            try:
                raw = self._connect()
                break
            except EnvironmentStop:
                if not (patient and self.patience()):
                    raise
            time.sleep(next(pauses))
        return raw

    def _open_schema(self, create: bool) -> None:
        """Ours at our version (migrated up if older), made if the database is empty; anything else untouched."""
        version, tables = self._found()
        self.found_version = version
        if version is None:
            if tables:
                raise StoreError(f"{self.path} holds tables but not tui-agent's (it has no meta table); "
                                 "pass another --db")
            if not create:
                raise StoreError(f"no tui-agent schema at {self.path}; run tui-agent db init {self.path}")
            with self.write():
                self.found_version = self._version()   # another process may have made it while we waited
                if self.found_version is None:
                    create_schema(self.conn.raw)
            return
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}, newer than this tui-agent understands "
                             f"({SCHEMA_VERSION}); upgrade tui-agent")
        if version < PG_FIRST_VERSION:
            raise StoreError(f"{self.path} has schema version {version}, older than any tui-agent made on PostgreSQL "
                             f"({PG_FIRST_VERSION} was the first); it cannot be upgraded here, and is left untouched")
        if version < SCHEMA_VERSION:
            with self.write():
                found = self._version()   # another process may have migrated it while we waited for the lock
                assert found is not None   # its meta table was read above, and no tui-agent drops it
                if found < SCHEMA_VERSION:
                    refuse_migration_while_running(self.conn, self.path, found, time.time())
                    migrate(self.conn.raw, found)

    def _version(self) -> int | None:
        return self._found()[0]

    def _found(self) -> tuple[int | None, int]:
        """Our schema version, or None, and how many tables and views the schema holds, from one snapshot. Asked
        apart, another process's schema committed between the two answers reads as someone else's tables. Asked of
        the catalog, not of to_regclass, whose name lookup may answer from a "no such table" this session cached
        before it waited for the lock while another process made the schema."""
        has_meta, tables = self.conn.execute(
            "SELECT count(*) FILTER (WHERE c.relname = 'meta' AND c.relkind = 'r'), count(*) FROM pg_catalog.pg_class c"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm', 'p', 'f')").fetchone()
        if not has_meta:
            return None, tables
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or not str(row[0]).isdigit():
            raise StoreError(f"{self.path} has no schema version in its meta table; it is not tui-agent's")
        return int(row[0]), tables

    def write(self) -> _Write:
        """A writer's transaction, one at a time across every process and machine (the advisory lock)."""
        return _Write(self)

    def write_shared(self) -> _SharedWrite:
        return _SharedWrite(self)

    def wait_for_lock(self, error: sqlite3.Error, sql: str = "", params: tuple = (), begin: bool = False):
        """As the SQLite store's; `begin`: the statement opens a writer's transaction, so BEGIN comes again."""
        if not begin:
            return super().wait_for_lock(error, sql, params)
        stop = self.stopped(error)
        while True:
            if stop is None:
                raise error
            if stop.kind != BUSY or not self.patience():
                raise stop from error
            try:
                self.conn.execute("BEGIN")
                return self.conn.execute(sql, params)
            except sqlite3.Error as e:
                self.abandon()
                error, stop = e, self.stopped(e)

    def write_one(self, sql: str, params: tuple, whole: bool = False) -> Cursor:
        """Base's, in one round trip (see write_batch): a `whole` statement as it is, another after the lock."""
        return (self._at_once([(sql, params)]) if whole else self.write_batch([(sql, params)]))[0]

    def write_batch(self, statements: list[tuple[str, tuple]]) -> list[Cursor]:
        """Base's, in one round trip: the writers' lock (shared) and the statements, pipelined and committed
        together at one Sync. A lock held past the busy timeout rolls the whole batch back, so it is
        sent again while `patience()` allows, as `write()` waits; a connection that drops under it leaves
        unknown whether it committed (ConnectionLost): a caller that may send it again reads back first
        (base.write_once)."""
        return self._at_once([(f"SELECT {SHARED_LOCK}", ()), *statements])[1:]

    def _at_once(self, statements: list[tuple[str, tuple]]) -> list[Cursor]:
        """conn.at_once, waiting out a held lock; see write_batch."""
        pauses = backoff()
        while True:
            try:
                return self.conn.at_once(statements)
            except PostgresError as e:
                stop = self.stopped(e)
                if stop is None:
                    raise
                if isinstance(stop, ConnectionLost) or stop.kind != BUSY or not self.patience():
                    raise stop from e
            time.sleep(next(pauses))

    def stopped(self, error: sqlite3.Error) -> EnvironmentStop | None:
        state = getattr(error, "sqlstate", "")
        if state == "57014" and "statement_timeout" in self._settings:
            return EnvironmentStop(BUSY, f"{self.path} did not answer within the statement timeout of "
                                   f"{int(self._settings['statement_timeout']) / 1000:g} s; nothing was lost; "
                                   "try again")
        if state in ("55P03", "57014", "40P01"):   # lock timeout, statement timeout, deadlock
            return EnvironmentStop(BUSY, f"{self.path} is busy: another session held tui-agent's write lock past "
                                   f"{BUSY_TIMEOUT_MS / 1000:g} s; nothing was lost; run the command again")
        if state == "25006":
            return EnvironmentStop(READ_ONLY, f"{self.path} is read-only for this user (or the server is a "
                                   "standby); nothing was written; connect as a user who may write")
        if state == "42501":   # insufficient privilege: a role that may read (or not even that) but not write
            return EnvironmentStop(READ_ONLY, f"{self.path} is read-only for this user ({error}); nothing was "
                                   "written; connect as a user who may write (GRANT INSERT, UPDATE, DELETE ...)")
        if state.startswith("53"):
            return EnvironmentStop(FULL, f"the server of {self.path} is out of space or resources ({error}); "
                                   "nothing that was committed was lost; run the command again when it has room")
        if state.startswith(("08", "57P")) or state == "25P03" or getattr(error, "lost", False):
            if self._reopened():   # the server is there: it ended this session alone, or restarted at once
                what = (f"{self.path} ended this session (idle inside a transaction for over "
                        f"{IDLE_IN_WRITE_MS / 1000:g} s, as a stopped process is; or an administrator's doing, or "
                        "a restart)")
                return ConnectionLost(BUSY, f"{what}; nothing that was committed was lost; run the command again",
                                      what)
            what = f"lost the connection to {self.path} ({error})"
            return ConnectionLost(UNREACHABLE, f"{what}; nothing that was committed was lost; run the command again "
                                  "when the server is back", what)
        if state in ("42703", "42P01"):   # no such column, or table: a bug of ours, or tables another program changed
            try:
                missing = self._differences()
            except (sqlite3.Error, EnvironmentStop, StoreError):
                return None
            if missing:
                return schema_mismatch(self.path, missing)
        return None

    def _differences(self) -> list[str] | None:
        """schema_postgres.differences, on a connection of its own: ours may be inside a failed transaction. None
        when this role may not make the temporary tables the comparison needs (TEMP revoked): not compared, the
        command goes on as it would have without the comparison."""
        try:
            with closing(self._connect()) as raw:
                return differences(raw)
        except psycopg.errors.InsufficientPrivilege:
            return None
        except psycopg.Error as e:
            raise PostgresError(e) from e

    def check_intact(self) -> None:
        """A server checks its own pages; a worker still refuses tables another program changed (it writes every
        column), before it writes anything."""
        missing = self._differences()
        if missing:
            raise schema_mismatch(self.path, missing)

    def _reopened(self) -> bool:
        """Whether a new connection opens now, tried once after a lost one, and kept for the next statement.

        It tells a session ended alone (or a server back at once) from a server that is away. Either way a worker
        goes on (an entry's write is read back, base.write_once; another write drops its run)."""
        if not self.conn.raw.closed:
            return False
        try:
            self.conn.raw = self._reconnect(patient=False)
        except (EnvironmentStop, StoreError):
            return False
        return True

    def abandon(self) -> None:
        self.conn.writing = False
        if not self.conn.raw.closed and self.conn.in_transaction:
            try:
                self.conn.raw.execute("ROLLBACK")
            except psycopg.Error:
                pass

    def query(self, sql: str, params: tuple | list = ()) -> Iterator[dict]:
        return iter(list(dict_rows(self.conn.execute(sql, params))))   # read whole: the connection is free again

    def data_version(self) -> int:
        """A count of the changes seen, one round trip: the server's snapshot (which transactions have ended) as
        of this call, against the last call's. Every commit that wrote something (it had a transaction id) moves
        it, so a change is never missed; so do commits on the server's other databases, and transactions that
        have begun writing, so a refresh may come for nothing. Writers send nothing for it: a NOTIFY in every
        commit would serialise their commits (bench/notify_cost.py)."""
        snapshot = self.conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0]
        if snapshot != self._snapshot:
            self._snapshot, self._changes = snapshot, self._changes + 1
        return self._changes

    def read_only(self) -> None:
        self._set("default_transaction_read_only", "on")

    def wait_at_most(self, ms: int) -> None:
        self._set("lock_timeout", str(int(ms)))

    def _set(self, name: str, value: str) -> None:
        """A session setting, kept for a connection opened again."""
        self.conn.execute(f"SET {name} = {value}")
        self._settings[name] = value


def data_dir_for_url(url: str) -> Path:
    """This machine's folder for the agents' own data of the database at `url` (sample sources, fetch log, outbox,
    worker logs; per host, port and database). Artifacts are not kept here: every machine must read them
    (store/artifacts.py)."""
    parts = urlsplit(url)
    return (platformdirs.user_data_path("tui-agent") / "postgres"
            / f"{parts.hostname or 'local'}-{parts.port or 5432}-{parts.path.strip('/') or 'postgres'}")


_REFUSED = ("password authentication failed", "authentication failed", "does not exist",
            "no password supplied", "no pg_hba.conf entry", "permission denied for database")


def connect_error(url: Url, error: psycopg.Error) -> EnvironmentStop | StoreError:
    """Why a connection could not be made, in one line, with its exit code.

    The URL's own mistake (a database or user that does not exist, a wrong password) is exit 2; a server that
    cannot be reached is exit 4."""
    said = _first_line(error).removeprefix("connection failed: ")
    said = re.sub(r'^connection to server at "[^"]*"(?:, port \d+)? failed: (FATAL:\s+)?', "", said)
    if any(words in said for words in _REFUSED):
        return StoreError(f"the server at {url} refused the connection ({said}); check the database name, the "
                          "user and the password in the URL (or PGPASSWORD, ~/.pgpass)")
    what = f"cannot reach {url} ({said})"
    return EnvironmentStop(UNREACHABLE, f"{what}; check that the server runs and the URL, user and password are right",
                           what)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
