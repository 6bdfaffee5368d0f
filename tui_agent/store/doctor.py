"""`tui-agent doctor`: what is wrong with a database file and what to do about it, without changing it.

Every check only reads. The database is opened through a read-only SQLite URI, never with Python's open()
(closing any descriptor of the file would drop this process's POSIX locks on it, see `db._read_version`);
the rest is stat and statvfs. A missing database is reported, never created. It lives below the CLI so the
TUI can run the same checks.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import stat
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .base import is_url
from .db import BUSY_TIMEOUT_MS, data_dir_for, read_only
from .environment import set_aside
from .schema import SCHEMA_VERSION, differences

MIB = 2**20
WAL_LARGE = 64 * MIB  # a WAL this big means a reader held an old snapshot while much was written
DISK_LOW = 256 * MIB  # below this, a busy worker's journal or a recovered copy may not fit
SHOWN_PROBLEMS = 5    # quick_check can list a hundred lines; the first few say enough
NOT_OURS = "pass --db a tui-agent database; tui-agent never writes to another program's file"
T = TypeVar("T")


@dataclass
class Check:
    """One finding; `advice` says what to do when it is not ok."""

    name: str
    ok: bool
    detail: str
    advice: str | None = None


@dataclass
class Diagnosis:
    path: Path | str   # a file, or a server's URL (a postgres.Url, which prints without its password)
    checks: list[Check] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return all(check.ok for check in self.checks)

    def as_json(self) -> dict:
        return {"path": str(self.path), "healthy": self.healthy, "checks": [asdict(c) for c in self.checks]}


def diagnose(path: str | os.PathLike, full: bool = False) -> Diagnosis:
    """Every check of the database at `path`.

    `full` runs integrity_check rather than quick_check. A postgresql:// URL gets the server's checks
    (doctor_postgres.py's are here too, below)."""
    if is_url(path):
        return diagnose_postgres(str(path), full)
    path = Path(path)
    missing = _guard("database", path, _missing, path)
    if missing is not None:
        return Diagnosis(path, [missing])
    checks = _sql_checks(path, full)
    if any(check.advice == NOT_OURS for check in checks):
        return Diagnosis(path, checks)  # another program's file: its folder and permissions are not ours to judge
    for name, check in (("wal", _wal), ("permissions", _permissions), ("data folder", _data_folder),
                        ("disk", _disk)):
        checks.append(_guard(name, path, check, path))
    return Diagnosis(path, checks)


def _guard(name: str, path: Path, check: Callable[..., T], *args: Any) -> T | Check:
    """Run one check; whatever it meets becomes a finding, never a traceback: a doctor that crashes on the
    very file it examines helps nobody."""
    try:
        return check(*args)
    except sqlite3.Error as e:
        return _trouble(name, path, e)
    except Exception as e:  # noqa: BLE001 - see the docstring
        return Check(name, False, f"could not be checked ({type(e).__name__}: {e})",
                     "run `tui-agent doctor` again; if this repeats, check the file and its folder with `ls -l`")


def _missing(path: Path) -> Check | None:
    """A path that holds no database file, said plainly; None when there is a file to examine."""
    if not path.exists():
        return Check("database", False, f"there is no database at {path}",
                     "check --db and TUI_AGENT_DB; a command that writes (tui-agent run hello) creates one")
    if path.is_dir():
        return Check("database", False, f"{path} is a folder, not a database file",
                     f"pass --db a file, such as {path / 'runs.db'}")
    if path.stat().st_size == 0:
        return Check("database", False, f"{path} is an empty file, not a tui-agent database",
                     "remove it, or pass another --db; tui-agent never writes to a file it did not create")
    return None


def _sql_checks(path: Path, full: bool) -> list[Check]:
    try:
        conn = read_only(path, BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error as e:
        return [_trouble("database", path, e)]
    with closing(conn):
        readable = _guard("database", path, _readable, conn)
        if not readable.ok:
            return [readable]
        schema = _guard("database", path, _schema, conn)
        tables = [_guard("tables", path, _tables, conn, path, differences)] if schema.ok else []
        integrity = _guard("integrity", path, _integrity, conn, path, full)
        # sizes only of a sound file: reading a damaged one's pages says nothing more than integrity does
        sizes = [_guard("size", path, _sizes, conn), _guard("largest runs", path, _largest_runs, conn)] \
            if schema.ok and integrity.ok else []
        return [schema, *tables, integrity, *sizes]


def _readable(conn: sqlite3.Connection) -> Check:
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return Check("database", True, "a SQLite database")


def _schema(conn: sqlite3.Connection) -> Check:
    """Whose file it is and whether this tui-agent understands its schema."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):
            raise
        return Check("database", False, "a SQLite database, but not tui-agent's (it has no meta table)", NOT_OURS)
    return _version_check(row, "file", "")


def _tables(conn, where: Path | str, differences: Callable[[object], list[str]]) -> Check:
    """Check that a database at this code's schema version has every table, view and column that version makes. An
    older database is upgraded by the next command that writes, so it is compared then. `differences`: the dialect's."""
    version = int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
    if version < SCHEMA_VERSION:
        return Check("tables", True, f"compared once upgraded to schema version {SCHEMA_VERSION}")
    missing = differences(conn)
    if missing:
        return Check("tables", False, f"not as schema version {version} makes them: "
                     f"{'; '.join(missing[:SHOWN_PROBLEMS])}",
                     "another program, or a development build of tui-agent, changed them; no worker writes to "
                     f"it: {set_aside(where)}")
    return Check("tables", True, f"every table, view and column of schema version {version}")


def _integrity(conn: sqlite3.Connection, path: Path, full: bool) -> Check:
    pragma = "integrity_check" if full else "quick_check"
    found = [line for row in conn.execute(f"PRAGMA {pragma}({SHOWN_PROBLEMS})") for line in str(row[0]).splitlines()
             if line and not line.startswith("***")]  # "*** in database main ***" heads the list
    if found == ["ok"]:
        return Check("integrity", True, f"{pragma} found nothing wrong"
                     + ("" if full else " (--full also compares every index with its table)"))
    return Check("integrity", False, f"the file is damaged: {pragma} says " + "; ".join(found[:SHOWN_PROBLEMS]),
                 recover_advice(path))


SHOWN_SIZES = 5   # the largest tables, and the largest runs, doctor names


def _sizes(conn: sqlite3.Connection) -> Check:
    """The file's size, its free pages and its largest tables with their indexes. The free pages are what
    `tui-agent db vacuum` or incremental auto-vacuum gives back. The sizes come from SQLite's `dbstat` table
    where this SQLite has it."""
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    free = page * conn.execute("PRAGMA freelist_count").fetchone()[0]
    incremental = conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    said = (f"{_size(page * conn.execute('PRAGMA page_count').fetchone()[0])}, {_size(free)} of it free pages"
            + ("" if incremental else " (made without incremental auto-vacuum: `tui-agent db vacuum` gives them "
               "back)" if free else ""))
    try:
        tables = conn.execute(
            "SELECT coalesce(m.tbl_name, s.name), sum(s.pgsize) FROM dbstat s LEFT JOIN sqlite_master m ON"
            " m.name = s.name GROUP BY 1 ORDER BY 2 DESC LIMIT ?", (SHOWN_SIZES,)).fetchall()
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):
            raise
        return Check("size", True, f"{said}; this SQLite has no dbstat table, so the size of each table is not known")
    return Check("size", True, f"{said}; largest tables (with their indexes): "
                 + ", ".join(f"{name} {_size(size)}" for name, size in tables))


def _largest_runs(conn) -> Check:
    """The runs whose journals hold the most (their results' bytes): what `tui-agent prune` would gain most from."""
    rows = conn.execute("SELECT run_id, count(*), sum(coalesce(length(result), 0)) FROM journal GROUP BY run_id"
                        f" ORDER BY 3 DESC, 1 LIMIT {SHOWN_SIZES}").fetchall()
    if not rows:
        return Check("largest runs", True, "no run has a journal entry yet")
    return Check("largest runs", True, "by their journals' results: " + ", ".join(
        f"{run_id} {_size(size)} in {count:,} entr{'y' if count == 1 else 'ies'}" for run_id, count, size in rows))


def _trouble(name: str, path: Path, error: sqlite3.Error) -> Check:
    """A SQLite error met while reading, as a finding: damaged, not SQLite, locked or unreadable."""
    code, text = getattr(error, "sqlite_errorname", "") or "", str(error)
    if code.startswith("SQLITE_CORRUPT") or "malformed" in text:
        return Check(name, False, f"the file is damaged ({text})", recover_advice(path))
    if code.startswith("SQLITE_NOTADB") or "not a database" in text:
        return Check(name, False, f"{path} is not a SQLite database (or its first page, which says so, is damaged)",
                     NOT_OURS)
    if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        return Check(name, False, f"another program holds the file locked ({text})",
                     "run `tui-agent doctor` again once it lets go (a VACUUM, a backup, a sqlite3 shell?)")
    if code.startswith("SQLITE_CANTOPEN") or "unable to open" in text:
        return Check(name, False, f"it cannot be opened read-only ({text})",
                     "check that you may read the file and its folder (ls -l): SQLite also needs the -wal and "
                     "-shm files beside it, or the right to make them")
    if code.startswith(("SQLITE_IOERR", "SQLITE_FULL")) and shutil.disk_usage(path.parent).free < DISK_LOW:
        return Check(name, False, f"it cannot be read while the disk that holds it is full ({text}): SQLite makes "
                     "the -wal and -shm files beside it to read it", "free space on that disk, then run `tui-agent "
                     "doctor` again; nothing committed is lost")
    return Check(name, False, f"SQLite could not read it ({text})",
                 "run `tui-agent doctor --full`; if this repeats, treat the file as damaged: " + recover_advice(path))


def recover_advice(path: Path) -> str:
    """How to save what can still be read from a damaged file, keeping the damaged one. Every command in it is one a
    person can paste (tests/engine/test_doctor.py follows them)."""
    db, new = shlex.quote(str(path)), shlex.quote(str(path.with_name(f"{path.stem}.recovered{path.suffix}")))
    aside = shlex.quote(f"{path}.damaged")
    return (f"tui-agent will not write to a damaged file; keep it, and recover what can still be read into a new "
            f"one. {_room_for_a_copy(path)}1) Stop every worker, timer and TUI that uses it. 2) With SQLite's "
            f"shell: `sqlite3 {db} .recover | sqlite3 {new}`; a shell built without the sqlite_dbpage table "
            f"(older than 3.29, or a distribution's) says 'SQL logic error' there: then `rm -f {new} && sqlite3 "
            f"{db} .dump | sed 's/^ROLLBACK; -- due to errors$/COMMIT;/' | sqlite3 {new}` instead (it saves less "
            f"of a damaged table). 3) Check the copy: `chmod 600 {new} && tui-agent --db {new} doctor --full`. "
            f"4) Put it in place, keeping the damaged file: `mv {db} {aside} && mv {new} {db}`; if "
            f"{shlex.quote(f'{path}-wal')} is still there, move it aside too (SQLite would apply a stale -wal to the "
            "new file). The data folder stays where it is, so artifacts and the outbox still resolve.")


def _room_for_a_copy(path: Path) -> str:
    """The step before the others when the disk that holds the file has no room for the copy made beside it."""
    need = sum(f.stat().st_size for f in (path, Path(f"{path}-wal")) if f.exists())
    free = shutil.disk_usage(path.parent).free
    if free > need:
        return ""
    return (f"0) The copy is made beside it and needs up to {_size(need)}, but that disk has {_size(free)} free: "
            "free space there first. ")


def _wal(path: Path) -> Check:
    wal = Path(f"{path}-wal")
    try:
        size = wal.stat().st_size
    except FileNotFoundError:
        return Check("wal", True, "no write-ahead log beside it (nothing has it open)")
    if size <= WAL_LARGE:
        return Check("wal", True, f"{wal.name} is {_size(size)}")
    return Check("wal", False, f"{wal.name} is {_size(size)}: a reader kept an old snapshot open while much was "
                 "written, and SQLite cannot checkpoint past a reader",
                 "close long-lived readers of this file (a sqlite3 shell, a backup, a stuck program); SQLite then "
                 "reuses the log from its start; to shrink the file, stop every worker and TUI and run "
                 f"`sqlite3 {shlex.quote(str(path))} 'PRAGMA wal_checkpoint(TRUNCATE)'`")


def _permissions(path: Path) -> Check:
    """The database (and its -wal and -shm) should be 0600, yours and writable, in a folder you can write."""
    files = [f for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if f.exists()]
    problems, fixes = [], []
    for f in files:
        st = f.stat()
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            problems.append(f"{f.name} is {mode:04o}: other users can {'change' if mode & 0o022 else 'read'} it")
            fixes.append(f"chmod 600 {shlex.quote(str(f))}")
        if st.st_uid != os.geteuid():
            problems.append(f"{f.name} belongs to uid {st.st_uid}, not to you")
            fixes.append(f"chown {os.geteuid()} {shlex.quote(str(f))} (as its owner or root)")
    if not stat.S_IMODE(path.stat().st_mode) & 0o200 or not os.access(path, os.W_OK):
        problems.append(f"{path.name} is read-only for you: commands that write stop with exit 4")
        fixes.append(f"chmod u+w {shlex.quote(str(path))}")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        problems.append(f"its folder {path.parent} is not writable for you: SQLite makes its -wal and -shm there")
        fixes.append(f"chmod u+wx {shlex.quote(str(path.parent))}")
    if problems:
        return Check("permissions", False, "; ".join(problems), "; ".join(dict.fromkeys(fixes)))
    return Check("permissions", True, f"{path.name} is {stat.S_IMODE(path.stat().st_mode):04o}, yours and writable")


def _data_folder(path: Path) -> Check:
    return _folder_check(data_dir_for(path))


def _folder_check(folder: Path) -> Check:
    """The folder for artifacts and the outbox (beside a SQLite file, or this machine's for a server)."""
    if not folder.exists():
        return Check("data folder", True, f"{folder} is not made yet: the first command that writes makes it, 0700")
    if not folder.is_dir():
        return Check("data folder", False, f"{folder} is a file, where tui-agent keeps run artifacts and the outbox",
                     f"move {shlex.quote(str(folder))} away")
    st = folder.stat()
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return Check("data folder", False, f"{folder} is {mode:04o}: other users can look at run artifacts, reports "
                     "and the outbox", f"chmod 700 {shlex.quote(str(folder))}")
    if st.st_uid != os.geteuid():
        return Check("data folder", False, f"{folder} belongs to uid {st.st_uid}, not to you",
                     f"chown -R {os.geteuid()} {shlex.quote(str(folder))} (as its owner or root)")
    return Check("data folder", True, f"{folder} is {mode:04o}")


def _disk(path: Path) -> Check:
    usage = shutil.disk_usage(path.parent)
    if usage.free < DISK_LOW:
        return Check("disk", False, f"only {_size(usage.free)} free on the file system that holds {path.parent}",
                     "free space: on a full disk every command that writes stops (exit 4); nothing committed is "
                     "lost, and runs go on once there is room")
    return Check("disk", True, f"{_size(usage.free)} free of {_size(usage.total)}")


def _size(count: float) -> str:
    if count < 1024:
        return f"{count:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024
        if count < 1024 or unit == "TiB":
            break
    return f"{count:.1f} {unit}"


# -- PostgreSQL ----------------------------------------------------------------------------------

PG_OLDEST = 130000   # server_version_num: the oldest server the schema and its SQL are tried on
C_COLLATIONS = ("C", "POSIX")


def diagnose_postgres(url: str, full: bool = False) -> Diagnosis:
    """Run the doctor's checks on a PostgreSQL database, changing nothing. They are: reachable, whose schema at which
    version, its tables against that version's, the server's version, whether this user may write, the database's
    collation (text keys must sort by bytes, as SQLite's do), synchronous_commit and fsync, and the local data
    folder. It connects read-only (the tables check's own schema is made in a transaction rolled back); the password
    in the URL is never shown. A server checks its own pages: `full` adds nothing here."""
    import psycopg

    from .postgres import PostgresError, Url, connect_error, data_dir_for_url

    shown = Url(url)
    try:
        conn = psycopg.connect(shown.secret, autocommit=True, connect_timeout=10, application_name="tui-agent doctor",
                               options="-c default_transaction_read_only=on")
    except psycopg.Error as e:
        return Diagnosis(shown, [Check("database", False, str(connect_error(shown, e)),
                                       "start the server, or fix the URL (host, port, database, user, password)")])
    checks: list[Check] = []
    with closing(conn):
        def guard(name: str, check: Callable, *args) -> Check:
            try:
                return check(conn, *args)
            except psycopg.Error as e:
                return Check(name, False, f"could not be checked ({PostgresError(e)})",
                             "run `tui-agent doctor` again; if this repeats, look at the server's log")
        schema = guard("database", _pg_schema, shown)
        checks.append(schema)
        tables = guard("tables", _pg_tables, shown) if schema.ok else None
        checks += [tables] if tables else []
        checks.append(guard("server", _pg_server))
        if schema.advice == NOT_OURS:
            return Diagnosis(shown, checks)   # another program's database: its settings are not ours to judge
        checks.append(guard("role", _pg_role, shown))
        checks.append(guard("collation", _pg_collation))
        checks.append(guard("durability", _pg_durability))
        if schema.ok:
            checks += [guard("size", _pg_sizes), guard("largest runs", _largest_runs)]
    checks.append(_guard("data folder", Path(str(data_dir_for_url(shown))), _folder_check, data_dir_for_url(shown)))
    return Diagnosis(shown, checks)


def _pg_schema(conn, url) -> Check:
    if conn.execute("SELECT to_regclass('meta')").fetchone()[0] is None:
        tables = conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
                              ).fetchone()[0]
        if tables:
            return Check("database", False, f"a PostgreSQL database with {tables} tables, but not tui-agent's (it has "
                         "no meta table)", NOT_OURS)
        return Check("database", True, "reachable and empty: the first command that writes (tui-agent db init) "
                     f"makes tui-agent's schema, version {SCHEMA_VERSION}")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return _version_check(row, "database", "reachable; ")


def _pg_tables(conn, url) -> Check | None:
    """The tables check of a tui-agent database on a server; None for an empty one (nothing to compare yet).
    schema_postgres is imported here, as psycopg is: no command on a SQLite file needs it."""
    from psycopg.errors import InsufficientPrivilege

    from . import schema_postgres

    if conn.execute("SELECT to_regclass('meta')").fetchone()[0] is None:
        return None
    try:
        return _tables(conn, url, schema_postgres.differences)
    except InsufficientPrivilege:   # the comparison makes the version's schema in the session's temporary one
        user, database = conn.execute("SELECT current_user, current_database()").fetchone()
        return Check("tables", True, f"not compared: user {user} may not create temporary tables, where the "
                     f"comparison makes schema version {SCHEMA_VERSION}'s (GRANT TEMP ON DATABASE {database} TO "
                     f"{user} lets it)")


def _version_check(row: tuple | None, what: str, lead: str) -> Check:
    """The meta table's schema version against this code's: the same verdicts for a file and a server."""
    if row is None or not str(row[0]).isdigit():
        return Check("database", False, "its meta table holds no schema version: not tui-agent's", NOT_OURS)
    version = int(row[0])
    if version > SCHEMA_VERSION:
        return Check("database", False, f"schema version {version}, newer than this tui-agent understands "
                     f"({SCHEMA_VERSION})", f"upgrade tui-agent; this one refuses the {what} and leaves it untouched")
    if version < SCHEMA_VERSION:
        return Check("database", True, f"{lead}tui-agent's, schema version {version}; the next command that writes "
                     f"upgrades it to {SCHEMA_VERSION}")
    return Check("database", True, f"{lead}tui-agent's, schema version {version} (current)")


def _pg_server(conn) -> Check:
    number = int(conn.execute("SHOW server_version_num").fetchone()[0])
    version = conn.execute("SHOW server_version").fetchone()[0]
    standby = conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
    if number < PG_OLDEST:
        return Check("server", False, f"PostgreSQL {version}, older than {PG_OLDEST // 10000}",
                     f"use PostgreSQL {PG_OLDEST // 10000} or newer")
    if standby:
        return Check("server", False, f"PostgreSQL {version}, a standby (in recovery): every command that writes "
                     "stops (exit 4)", "point --db at the primary server")
    return Check("server", True, f"PostgreSQL {version}")


def _pg_role(conn, url) -> Check:
    user = conn.execute("SELECT current_user").fetchone()[0]
    missing = [table for (table,) in conn.execute(
        "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace"
        " AND NOT (has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')"
        " AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE'))"
        " ORDER BY 1")]
    default_ro = conn.execute("SELECT setting FROM pg_settings WHERE name = 'default_transaction_read_only'"
                              ).fetchone()
    if missing:
        return Check("role", False, f"user {user} may read but not write {', '.join(missing)}: tui-agent ls works, "
                     "every command that writes stops (exit 4)",
                     f"connect as a user who may write, or GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN "
                     f"SCHEMA {conn.execute('SELECT current_schema()').fetchone()[0]} TO {user} (and USAGE on its "
                     "sequences)")
    if default_ro and default_ro[0] == "on" and not _role_default_ro_is_ours(conn):
        return Check("role", False, f"user {user}'s transactions are read-only by default "
                     "(default_transaction_read_only): every command that writes stops (exit 4)",
                     f"ALTER ROLE {user} SET default_transaction_read_only = off (or connect as another user)")
    return Check("role", True, f"user {user} may read and write tui-agent's tables")


def _role_default_ro_is_ours(conn) -> bool:
    """The doctor's own connection asked for read-only: the setting's source says whether anyone else did."""
    source = conn.execute("SELECT source FROM pg_settings WHERE name = 'default_transaction_read_only'").fetchone()
    return source is not None and source[0] == "client"


def _pg_collation(conn) -> Check:
    name, collate, ctype = conn.execute("SELECT datname, datcollate, datctype FROM pg_database"
                                        " WHERE datname = current_database()").fetchone()
    provider = conn.execute("SELECT datlocprovider FROM pg_database WHERE datname = current_database()"
                            ).fetchone()[0] if _has_column(conn, "pg_database", "datlocprovider") else "c"
    if collate in C_COLLATIONS and provider == "c":
        return Check("collation", True, f"{collate}: text sorts by bytes, as on SQLite")
    return Check("collation", False, f"the database sorts text by {collate!r} ({'ICU' if provider == 'i' else 'libc'}"
                 "), not by bytes: run ids, keys and cursors would order differently than tui-agent expects "
                 "(pages could skip or repeat rows)",
                 f"make a database that sorts by bytes and move to it: CREATE DATABASE {name}_c LC_COLLATE 'C' "
                 "LC_CTYPE 'C' TEMPLATE template0 (then point --db at it)")


def _has_column(conn, table: str, column: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s",
                        (table, column)).fetchone() is not None


def _pg_sizes(conn) -> Check:
    """The database's size and its largest tables, with their indexes and TOAST. The server's autovacuum reuses what
    prune frees, so there is no free-page count to give back."""
    total = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    tables = conn.execute(
        "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid ="
        " c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY 2 DESC, 1"
        f" LIMIT {SHOWN_SIZES}").fetchall()
    return Check("size", True, f"{_size(total)}; largest tables (with their indexes): "
                 + ", ".join(f"{name} {_size(size)}" for name, size in tables))


def _pg_durability(conn) -> Check:
    fsync = conn.execute("SHOW fsync").fetchone()[0]
    synchronous = conn.execute("SELECT boot_val, setting FROM pg_settings WHERE name = 'synchronous_commit'"
                               ).fetchone()
    if fsync != "on":
        return Check("durability", False, "the server runs with fsync off: a crash of its machine can lose or "
                     "damage committed steps", "set fsync = on in postgresql.conf and reload the server")
    return Check("durability", True, f"fsync on; synchronous_commit is {synchronous[1]} on the server "
                 "(tui-agent sets it per connection: on for --durability full, off for normal)")
