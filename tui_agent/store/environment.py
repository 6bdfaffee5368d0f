"""When the environment, not the user, stops a command on a database of ours: another program holds
its lock past the busy timeout, the file (or its folder) is read-only, the disk is full, or
the file is damaged. Each is one line naming the file and what to do (the CLI's exit 4), never a
traceback, and never a reason to fail a run: nothing committed is lost."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from ..errors import EnvironmentStop

BUSY, READ_ONLY, FULL, DAMAGED = "busy", "read-only", "full", "damaged"
UNREACHABLE = "unreachable"   # a database server that cannot be reached (PostgreSQL)


class ConnectionLost(EnvironmentStop):
    """The server's connection dropped under a statement, by a restart, an administrator or the idle timeout.

    A transaction it was in is rolled back, unless its COMMIT was in flight, when whether it committed is unknown
    until it is read back (base.write_once does so for a journal entry and a model call's attempt). `kind` says
    whether a new connection opened at once (BUSY: only the session ended) or not (UNREACHABLE: the server is
    away)."""


def _kind(error: sqlite3.Error) -> str | None:
    name = getattr(error, "sqlite_errorname", "") or ""
    text = str(error)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in text:
        return BUSY
    if name.startswith("SQLITE_READONLY") or "readonly database" in text:
        return READ_ONLY
    if name == "SQLITE_FULL" or "disk is full" in text:
        return FULL
    if name.startswith("SQLITE_IOERR") or "disk I/O error" in text:
        return FULL  # a write that could not reach the disk: no space, or a file size limit
    if name.startswith("SQLITE_CANTOPEN"):
        return READ_ONLY  # the folder refuses the -wal or -shm file beside the database
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text:
        return DAMAGED
    return None


def _message(kind: str, path: Path, error: BaseException) -> str:
    if kind == BUSY:
        return (f"{path} is busy: another program has held its lock past the busy timeout (a sqlite3 shell, a "
                "backup, a program that keeps it with locking_mode=EXCLUSIVE?); nothing was lost; run the command "
                "again when it lets go")
    if kind == READ_ONLY:
        return (f"{path} is read-only for this user (or its folder is); nothing was written; make it writable "
                "(chmod u+w) or pass another --db")
    if kind == FULL:
        return (f"the disk is full (or failing): {path} could not be written ({error}); nothing that was committed "
                "was lost; free space and run the command again (a worker resumes where its runs stopped)")
    return (f"{path} is damaged ({error}); tui-agent will not write to it; run `tui-agent doctor` to see what "
            "can be recovered")


def stop_for(error: sqlite3.Error, path: Path) -> EnvironmentStop | None:
    """The environment's reason for a SQLite error on our database, or None when it is something else. Another error,
    such as a bug or a constraint, is not the environment's doing and must not be dressed up as such."""
    kind = _kind(error)
    return None if kind is None else EnvironmentStop(kind, _message(kind, path, error))


def schema_mismatch(where: Path | str, missing: list[str]) -> EnvironmentStop:
    """The stop for a database whose schema version is ours but whose tables are not what that version makes.
    `missing` comes from schema.differences or schema_postgres.differences. Such a database is damaged for our
    purposes, whatever the database says of its pages. `where`: a file's path, or a server database's URL
    (postgres.Url, which prints without its password)."""
    return EnvironmentStop(DAMAGED, f"{where} is not as its schema version makes it ({'; '.join(missing[:3])}): "
                           f"another program, or a development build of tui-agent, changed it; no worker writes to "
                           f"it; {set_aside(where)} (tui-agent doctor says more)")


def set_aside(where: Path | str) -> str:
    """The way past a database tui-agent will not write to: a file is moved aside; on a server, another database."""
    return "move it aside and pass another --db" if isinstance(where, Path) else "pass --db another database"


def stop_for_os(error: OSError, path: Path) -> EnvironmentStop | None:
    """The same for making the database's files: a read-only folder or a full disk."""
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return EnvironmentStop(READ_ONLY, _message(READ_ONLY, path, error))
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return EnvironmentStop(FULL, _message(FULL, path, error))
    return None


def damaged(path: Path, why: str) -> EnvironmentStop:
    """The stop for a file found damaged (a failed check, not a SQLite error): `why` says what was found."""
    return EnvironmentStop(DAMAGED, _message(DAMAGED, path, RuntimeError(why)))
