"""`tui-agent copy --from SRC --to DST`: a whole database into a new one, SQLite or PostgreSQL either way.

Ids, journals, ledgers and artifacts are kept; the tables come from the schema itself, read in one snapshot a
page at a time, and written in one transaction. A target at another version or holding any row is refused.
Why: docs/architecture.md, section 12, "Copying a database".
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from . import DatabaseError, Store, StoreError, artifacts, open_store
from .base import is_url
from .db import data_dir_for, read_only
from .schema import SCHEMA_VERSION
from .schema_postgres import statements

PAGE_ROWS = 1000            # rows read per page, and written per batch
Progress = Callable[[str, int, int], None]   # (table, rows copied so far in all, rows to copy in all)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]          # the primary key: the order pages are read in
    identity: str | None          # an id the database fills in (SQLite's rowid, PostgreSQL's identity)


_CREATE = re.compile(r"CREATE TABLE (\w+) \((.*)\)\s*$", re.S)
_RENAME = re.compile(r"ALTER TABLE (\w+) RENAME TO (\w+)$")
_ADD = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)")
_TABLE_KEY = re.compile(r"^PRIMARY KEY \(([^)]*)\)$")


def tables() -> list[Table]:
    """Every table of the schema but meta and artifacts, in the order the schema creates them (foreign keys
    first)."""
    found: list[Table] = []
    for statement in statements():
        if renamed := _RENAME.match(statement):
            found = [replace(t, name=renamed.group(2)) if t.name == renamed.group(1) else t for t in found]
            continue
        if added := _ADD.match(statement):     # a column a later migration added
            found = [replace(t, columns=(*t.columns, added.group(2))) if t.name == added.group(1) else t
                     for t in found]
            continue
        created = _CREATE.match(statement)
        if created is None or created.group(1) in ("meta", "artifacts"):
            continue
        columns: list[str] = []
        key: tuple[str, ...] = ()
        identity: str | None = None
        for line in (part.strip() for part in re.split(r",\s*\n", created.group(2))):
            if table_key := _TABLE_KEY.match(line):
                key = tuple(c.strip() for c in table_key.group(1).split(","))
                continue
            name = line.split()[0]
            columns.append(name)
            if "PRIMARY KEY" in line:
                key = (name,)
            if "AS IDENTITY" in line:
                identity = name
        if not key:
            raise StoreError(f"the schema's table {created.group(1)} has no primary key; copy cannot page it")
        found.append(Table(created.group(1), tuple(columns), key, identity))
    return found


# --- opening --------------------------------------------------------------------------------------------------

def _refuse_older(where: str) -> None:
    """A database at another schema version is refused before open_store could migrate it (it does so even with
    create=False): its version is read here without writing. One that cannot be read here (missing, not ours,
    a server away) is left to open_store, which says why."""
    sql = "SELECT value FROM meta WHERE key = 'schema_version'"
    try:
        if is_url(where):
            import psycopg

            from .postgres import Url
            try:
                with psycopg.connect(where, connect_timeout=10) as conn:
                    row = conn.execute(sql).fetchone()
            except psycopg.Error:
                return
            where = Url(where)   # named without its password
        elif Path(where).is_file():
            ro = read_only(where)
            try:
                row = ro.execute(sql).fetchone()
            finally:
                ro.close()
        else:
            return
    except sqlite3.Error:
        return
    if row and str(row[0]).isdigit():
        _refuse_version(where, int(row[0]))


def _refuse_version(where: object, version: int | None) -> None:
    if version is not None and version != SCHEMA_VERSION:
        raise StoreError(f"{where} has schema version {version}, this tui-agent copies version {SCHEMA_VERSION} "
                         "only; run the same tui-agent version on both sides (tui-agent db migrate upgrades an "
                         "older one)")


def open_source(where: str, durability: str = "full") -> Store:
    """The database to copy from, never written: a missing one is an error and an older one is refused before
    open_store could migrate it."""
    _refuse_older(where)
    store = open_store(where, durability, create=False)
    try:
        _refuse_version(store.path, store.found_version)
        store.refuse_damaged()   # before the target is made: a damaged source leaves nothing behind
        store.read_only()
    except BaseException:
        store.close()
        raise
    return store


def open_target(where: str, durability: str = "full") -> Store:
    """The database to copy into, made if missing (an older one is refused, not migrated)."""
    _refuse_older(where)
    return open_store(where, durability, create=True)


@contextmanager
def target_for_copy(where: str, durability: str = "full") -> Iterator[Store]:
    """`open_target` for the block that copies into it, closed after; when the block (or the open) fails, a file
    this made is removed again, with its -wal, -shm and data folder, so a failed copy leaves no empty database
    behind (a server's database is not ours to drop: the copy's rolled-back transaction left it empty)."""
    made: list[Path] = []
    if not is_url(where) and not Path(where).exists():
        made = [Path(where), Path(f"{where}-wal"), Path(f"{where}-shm")]
        if not data_dir_for(Path(where)).exists():
            made.append(data_dir_for(Path(where)))
    target = None
    try:
        target = open_target(where, durability)
        yield target
    except BaseException:
        if target is not None:
            target.close()
            target = None
        for path in made:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise
    finally:
        if target is not None:
            target.close()


# --- checks ---------------------------------------------------------------------------------------------------

def same_database(a: Store, b: Store) -> bool:
    """Whether two stores are one database: the same file, or the target's server sees the source's own session
    (its process id and start) connected to the target's database, whatever the two URLs say."""
    if is_url(a.path) != is_url(b.path):
        return False
    if not is_url(a.path):
        try:
            return os.path.samefile(a.path, b.path)
        except OSError:
            return Path(a.path).resolve() == Path(b.path).resolve()
    pid, started = a.conn.execute("SELECT pid, backend_start FROM pg_stat_activity"
                                  " WHERE pid = pg_backend_pid()").fetchone()
    return b.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ? AND backend_start = ?"
                          " AND datname = current_database()", (pid, started)).fetchone()[0] > 0


def _version(store: Store) -> int | None:
    row = store.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row and str(row[0]).isdigit() else None


def check(source: Store, target: Store, schema: list[Table]) -> None:
    """Every refusal, before anything is written."""
    if same_database(source, target):
        raise StoreError(f"{source.path} and {target.path} are the same database; copy into another one")
    for store in (source, target):
        _refuse_version(store.path, _version(store))
    _refuse_held(target, schema)


def _refuse_held(target: Store, schema: list[Table]) -> None:
    """A target that holds rows is refused: asked before anything is read, and again inside the copy's write
    transaction, so a worker that starts on the target meanwhile cannot have its rows mixed with the copy."""
    held = [table.name for table in schema
            if target.conn.execute(f"SELECT 1 FROM {table.name} LIMIT 1").fetchone() is not None]
    if held:
        raise StoreError(f"{target.path} is not empty (its {', '.join(held)} hold rows); copy only into a new "
                         "database, whose ids cannot collide with the copied ones")


# --- reading --------------------------------------------------------------------------------------------------

@contextmanager
def read_snapshot(store: Store) -> Iterator[None]:
    """One read transaction on the source: every page sees the database as it was when the copy began."""
    store.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if is_url(store.path) else "BEGIN")
    try:
        _may_idle(store)
        yield
    finally:
        try:
            store.conn.execute("ROLLBACK")
        except DatabaseError:
            pass   # a lost connection: the error that lost it is the one to see


def _may_idle(store: Store) -> None:
    """Inside one of the copy's transactions: on a server, it sits idle while the other side is read or written (a
    large artifact, a slow disk), which is not the stopped process IDLE_IN_WRITE_MS ends the session of."""
    if is_url(store.path):
        store.conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")


def pages(store: Store, table: Table, where: str = "", given: tuple = ()) -> Iterator[list[tuple]]:
    """The table's rows in primary-key order, PAGE_ROWS at a time; each page starts after the last one's key. With
    `where` (and its parameters, `given`): only the rows it holds for (an index must serve it: an export's
    `run_id = ?`)."""
    columns, order = ", ".join(table.columns), ", ".join(table.key)
    at = [table.columns.index(c) for c in table.key]
    after = f"({order}) > ({', '.join('?' * len(table.key))})" if len(table.key) > 1 else f"{order} > ?"
    last: tuple | None = None
    while True:
        conditions = [c for c in (where, last is not None and after) if c]
        params = (*given, *(last or ()))
        clause = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        try:
            rows = store.conn.execute(f"SELECT {columns} FROM {table.name}{clause} ORDER BY {order} LIMIT ?",
                                      (*params, PAGE_ROWS)).fetchall()
        except DatabaseError as e:
            store.raise_stop(e)   # the source's server gone, say: named as the source's
            raise
        if rows:
            yield rows
        if len(rows) < PAGE_ROWS:
            return
        last = tuple(rows[-1][i] for i in at)


def _high_water(store: Store, table: Table) -> int:
    """The highest id the table's counter has handed out (it may be past the largest id still there)."""
    if is_url(store.path):   # a user who may read the table but not its sequence: the largest id it holds
        store.conn.execute("SAVEPOINT high_water")
        try:
            sql = "SELECT pg_sequence_last_value(pg_get_serial_sequence(?, ?)::regclass)"
            found = store.conn.execute(sql, (table.name, table.identity)).fetchone()[0]
        except DatabaseError:
            store.conn.execute("ROLLBACK TO SAVEPOINT high_water")
            found = None
        store.conn.execute("RELEASE SAVEPOINT high_water")
    else:
        found = store.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table.name,)).fetchone()
        found = found and found[0]
    return int(found or 0)


# --- writing --------------------------------------------------------------------------------------------------

def _insert_many(store: Store, table: Table, rows: list[tuple]) -> None:
    """One batch of rows into the target, inside its writer's transaction."""
    if isinstance(store.conn, sqlite3.Connection):
        store.conn.executemany(f"INSERT INTO {table.name} ({', '.join(table.columns)})"
                               f" VALUES ({', '.join('?' * len(table.columns))})", rows)
        return
    # PostgreSQL: COPY, a stream with no round trip per row (an INSERT each: ~3,000 rows a second; COPY: tens of
    # thousands)
    import psycopg

    from .postgres import PostgresError, PostgresStore
    assert isinstance(store, PostgresStore)   # every store whose connection is not sqlite3's
    try:
        with store.conn.raw.cursor() as cursor:
            with cursor.copy(f"COPY {table.name} ({', '.join(table.columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
    except psycopg.Error as e:
        raise PostgresError(e) from e


class Fresh:
    """New ids for the rows of an identity table, from the target's own counter (an import into a database whose
    rows already hold ids), in the order of the rows' old ids. A server's sequence hands them out (concurrent
    writers draw from it too, so none is taken twice); a SQLite file's writer holds its one write lock, so they are
    the ones past its largest id, and `done` moves its counter past them."""

    def __init__(self, target: Store, table: Table) -> None:
        self.target, self.table = target, table
        self.at = table.columns.index(table.identity)
        self.server = is_url(target.path)
        self.last = 0 if self.server else max(_high_water(target, table), target.conn.execute(
            f"SELECT coalesce(max({table.identity}), 0) FROM {table.name}").fetchone()[0])

    def __call__(self, rows: list[tuple]) -> list[tuple]:
        ids: Sequence[int]
        if self.server:
            ids = sorted(row[0] for row in self.target.conn.execute(
                "SELECT nextval(pg_get_serial_sequence(?, ?)) FROM generate_series(1, ?)",
                (self.table.name, self.table.identity, len(rows))))
        else:
            ids = range(self.last + 1, self.last + 1 + len(rows))
            self.last += len(rows)
        return [(*row[:self.at], new, *row[self.at + 1:]) for row, new in zip(rows, ids)]

    def done(self) -> None:
        if not self.server:
            move_counter(self.target, self.table, self.last)


def move_counter(store: Store, table: Table, high: int) -> None:
    """The target's next id for `table` is past `high`."""
    if is_url(store.path):
        store.conn.execute("SELECT setval(pg_get_serial_sequence(?, ?), ?, ?)",
                           (table.name, table.identity, max(high, 1), high >= 1))
        return
    made = store.conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table.name,)).fetchone()[0]
    if "AUTOINCREMENT" in made.upper() and high:   # a rowid table without it takes max(id) + 1 by itself
        store.conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (table.name,))
        store.conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table.name, high))


class Artifacts:
    """The artifacts, read from wherever the source keeps them and saved where the target keeps them, at the same
    relative paths. A source that keeps them as files gives those its rows name, each run's folder whole; one that
    keeps them in its table gives every row of it, a page of paths at a time (`rows`)."""

    def __init__(self, source: Store, target: Store) -> None:
        self.source, self.target = source, target
        self.in_table = artifacts.folder(source) is None
        self.done: set[str] = set()   # every artifact saved (a file's run folder and its journal row both name it)
        self.copied = 0
        self.missing = 0

    def folder(self, relative: str | None) -> None:
        """A run's artifact folder, whole (its results and whatever its agent kept there)."""
        if not self.in_table and artifacts.well_formed(relative):
            for each in artifacts.under(self.source, relative):
                self.file(each)

    def file(self, relative: str | None) -> None:
        if self.in_table or not artifacts.well_formed(relative) or relative in self.done:
            return
        try:
            data = artifacts.load(self.source, relative)
        except OSError:
            self.missing += 1
            return
        self._save(relative, data)

    def _save(self, relative: str, data: bytes) -> None:
        artifacts.save(self.target, relative, data)
        self.done.add(relative)
        self.copied += 1

    def rows(self, runs: Sequence[str] | None = None) -> Iterator[int]:
        """Every row of the source's `artifacts` table into the target (with `runs`: those under their folders, a
        range of its key each); yields how many each page held."""
        for where, given in [("", ())] if runs is None else [
                ("path >= ? AND path < ?", (f"{artifacts.HOME}/{run}/", f"{artifacts.HOME}/{run}0")) for run in runs]:
            for page in pages(self.source, _ARTIFACT_PATHS, where, given):
                for (path,) in page:
                    if artifacts.well_formed(path):   # a row named elsewhere stays behind
                        self._save(path, artifacts.load(self.source, path))
                yield len(page)

    def undo(self) -> None:
        """The files saved so far removed again (a failed import's; rows go with its transaction)."""
        root = artifacts.folder(self.target)
        if root is None:
            return
        for relative in self.done:
            (root / relative).unlink(missing_ok=True)


_ARTIFACT_PATHS = Table("artifacts", ("path",), ("path",), None)   # read for its keys; each content on its own


# Which columns name artifacts: (table, column, a folder or a file).
ARTIFACTS = {("runs", "artifact_dir"): "folder", ("runs", "result_artifact"): "file",
             ("journal_rows", "artifact"): "file", ("journal_tail", "artifact"): "file"}
# Tables counted as one: the journal's rows and its tail are one journal to a person.
_COUNTED_AS = {"journal_rows": "journal", "journal_tail": "journal"}


class Tally:
    """What a copy has written: rows per table (the journal's two tables counted as one) and the artifacts, with
    the progress callback told as it goes; `table` is the one being copied (named when a copy fails)."""

    def __init__(self, total: int, on_progress: Progress | None, files: Artifacts) -> None:
        self.total, self.on_progress, self.files = total, on_progress, files
        self.rows: dict[str, int] = {}
        self.done = 0
        self.table = _ARTIFACT_PATHS

    def add(self, table: Table, count: int) -> None:
        self.table = table
        counted_as = _COUNTED_AS.get(table.name, table.name)
        self.rows[counted_as] = self.rows.get(counted_as, 0) + count
        self.done += count
        if self.on_progress is not None and count:
            self.on_progress(counted_as, self.done, self.total)

    def counts(self) -> dict[str, int]:
        """The rows copied per table, and `artifacts` (plus `missing artifacts` when a row names one the source
        does not have)."""
        counts = {**self.rows, "artifacts": self.files.copied}
        if self.files.missing:
            counts["missing artifacts"] = self.files.missing
        return counts


def copy_pages(target: Store, table: Table, batches: Iterator[list[tuple]], tally: Tally,
               fresh: Fresh | None = None) -> int:
    """Inside the target's write: pages of `table`'s rows into it, with the artifacts their rows name, and with
    `fresh` their identity ids made anew; returns the highest source id of them (0 for none)."""
    named = [(table.columns.index(column), getattr(tally.files, kind))
             for (name, column), kind in ARTIFACTS.items() if name == table.name]
    high = 0
    tally.add(table, 0)
    for rows in batches:
        for row in rows:
            for i, copy in named:
                copy(row[i])
        if table.identity:
            high = max(high, rows[-1][table.columns.index(table.identity)])
        _insert_many(target, table, fresh(rows) if fresh else rows)
        tally.add(table, len(rows))
    return high


def copy_database(source: Store, target: Store, on_progress: Progress | None = None) -> dict[str, int]:
    """Copy every row of every table (meta aside) from `source` into the empty `target`, ids kept, and the
    artifacts the rows name; returns Tally.counts. Raises StoreError, with nothing written, when `check`
    refuses."""
    schema = tables()
    check(source, target, schema)
    files = Artifacts(source, target)
    with read_snapshot(source):
        counted = [*schema, _ARTIFACT_PATHS] if files.in_table else schema
        tally = Tally(sum(source.conn.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0] for t in counted),
                      on_progress, files)
        with writing(source, target, tally, "no row was written"):
            _refuse_held(target, schema)
            for table in schema:
                high = copy_pages(target, table, pages(source, table), tally)
                if table.identity:
                    move_counter(target, table, max(high, _high_water(source, table)))
            if files.in_table:
                for count in files.rows():
                    tally.add(_ARTIFACT_PATHS, count)
    return tally.counts()


@contextmanager
def writing(source: Store, target: Store, tally: Tally, nothing: str, into: str | None = None) -> Iterator[None]:
    """The target's one writer's transaction for a copy; a database error inside is a StoreError naming the table,
    the target (or `into`) and `nothing` (what was not written), and the artifact files saved by then are removed.
    The environment's stops (busy, full, unreachable) leave as they are."""
    try:
        with target.write():
            _may_idle(target)
            yield
    except DatabaseError as e:
        tally.files.undo()
        raise StoreError(f"cannot copy {tally.table.name} from {source.path} into {into or target.path} ({e}); "
                         f"{nothing}") from e
    except BaseException:
        tally.files.undo()
        raise
