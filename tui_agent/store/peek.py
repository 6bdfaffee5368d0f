"""A glance at a database for shell completion: ids and names starting with what was typed, never changing anything.

A SQLite file is read through SQLite's read-only URI, never created, validated or migrated, and as `immutable`
where no `-wal` and `-shm` lie beside it (a read-only WAL reader would make both and leave them). A
postgresql:// URL gets a short connect and statement timeout. `glance` raises sqlite3.Error (PostgresError on
a server) or OSError for any error of the database, for the caller to swallow."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .base import Connection, is_url
from .db import read_only_uri

CONNECT_TIMEOUT_S = 2     # libpq's least: below 2 it waits 2 anyway (the caller bounds the wait itself)
STATEMENT_TIMEOUT_MS = 300
SHOWN = 100               # the newest N matches at most: a Tab, not a listing

RUNS = "SELECT id, agent, status, reason FROM runs WHERE substr(id, 1, ?) = ? ORDER BY created_at DESC LIMIT ?"
SCHEDULES = "SELECT name, agent, cron, tz FROM schedules WHERE substr(name, 1, ?) = ? ORDER BY name LIMIT ?"
WORKERS = ("SELECT name, pid, host, stopped_at FROM workers WHERE substr(name, 1, ?) = ? ORDER BY started_at DESC"
           " LIMIT ?")


@contextmanager
def glance(where: str | os.PathLike) -> Iterator[Connection | None]:
    """A connection that only reads the database `where` names, or None when there is no such file."""
    if is_url(where):
        import psycopg  # an optional extra: only for a URL

        from .postgres import PostgresError, _Connection

        try:
            raw = psycopg.connect(str(where), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                  application_name="tui-agent completion")
        except psycopg.Error as e:
            raise PostgresError(e) from e
        try:
            raw.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            yield _Connection(raw)
        finally:
            raw.close()
        return
    path = Path(where)
    if not path.is_file():
        yield None
        return
    indexed = all(os.path.exists(f"{path}{tail}") for tail in ("-wal", "-shm"))
    conn = sqlite3.connect(read_only_uri(path) + ("" if indexed else "&immutable=1"), uri=True, timeout=0.1)
    try:
        yield conn
    finally:
        conn.close()


def starting_with(conn: Connection, query: str, prefix: str) -> list[tuple]:
    """The rows of `query` (RUNS, SCHEDULES or WORKERS) whose key starts with `prefix`."""
    return list(conn.execute(query, (len(prefix), prefix, SHOWN)))
