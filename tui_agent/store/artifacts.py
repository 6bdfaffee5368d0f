"""Where a run's artifacts live (large step results, reports and other files meant for the operator), decided
here for every reader and writer.

A SQLite store keeps them as files in its data folder, beside the database. A server store serves workers on
several machines, where no folder beside the database exists: it keeps them in its `artifacts` table, unless
the user names a folder every machine shares (`--data DIR`, TUI_AGENT_DATA), which then holds them as files laid
out as on SQLite. Either way an artifact is named by the same relative path (`artifacts/<run id>/<name>`, what
the journal's `artifact` column holds). The agents' own data (sample sources, fetch log, outbox, worktrees,
worker logs) is not an artifact: it stays in `store.data_dir`, per machine for a server."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from .base import Store, on_server
from .environment import stop_for_os

ENV = "TUI_AGENT_DATA"
IN_TABLE = "artifact:"   # how an artifact kept in the table is named for a person: artifact:<relative path>

_UPSERT = ("INSERT INTO artifacts (path, content, size, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (path)"
           " DO UPDATE SET content = excluded.content, size = excluded.size, created_at = excluded.created_at")


def folder(store: Store) -> Path | None:
    """The folder that holds the store's artifacts as files, or None when its `artifacts` table does."""
    if not on_server(store.conn):
        return store.data_dir
    shared = os.environ.get(ENV)
    return Path(shared).expanduser() if shared else None


def where(store: Store, relative: str) -> str:
    """What a person is shown, and `tui-agent artifact` takes: a file's path, or artifact:<relative path>."""
    root = folder(store)
    return f"{IN_TABLE}{relative}" if root is None else str(root / relative)


def save(store: Store, relative: str, data: bytes) -> str:
    """Keep an artifact durably before anything refers to it (a journal row, a run's result); returns `where` it
    is. A file is fsynced, then renamed into place; a row is committed in a transaction of its own before the
    row that names it, or in the caller's open one (a fork's edited entry commits with its journal row). A
    crash in between leaves an artifact nothing names, which the retry writes over at the same path. A file
    that cannot be written (a full disk, a file-size limit, a read-only folder) is the environment's stop, with
    no part of it (nor a folder made for it) left behind."""
    root = folder(store)
    if root is None:
        params = (relative, data, len(data), time.time())
        if store.conn.in_transaction:
            store.conn.execute(_UPSERT, params)
        else:
            store.write_one(_UPSERT, params)
        return where(store, relative)
    target = root / relative
    made = [parent for parent in (target.parent, *target.parent.parents)
            if parent.is_relative_to(root) and parent != root and not parent.exists()]
    tmp = target.with_name(target.name + ".tmp")
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:   # a full disk, a file-size limit, a read-only folder: nothing of it is left behind
        tmp.unlink(missing_ok=True)
        for parent in made:   # the deepest first
            try:
                parent.rmdir()
            except OSError:
                pass
        raise stop_for_os(e, target) or e from e
    return str(target)


def load(store: Store, relative: str) -> bytes:
    """An artifact's content by its relative path (FileNotFoundError when no place holds it)."""
    root = folder(store)
    if root is not None:
        return (root / relative).read_bytes()
    row = store.conn.execute("SELECT content FROM artifacts WHERE path = ?", (relative,)).fetchone()
    if row is None:
        raise FileNotFoundError(errno.ENOENT, "no such artifact in the database", where(store, relative))
    return bytes(row[0])


def read(store: Store, named: str) -> bytes:
    """An artifact by any name a person has for it: what `where` printed, or its relative path."""
    if named.startswith(IN_TABLE):
        return load(store, named.removeprefix(IN_TABLE))
    path = Path(named)   # a file's path as `where` printed it (relative when the database's path is), else the
    return path.read_bytes() if path.is_absolute() or path.is_file() else load(store, named)   # relative path


def under(store: Store, relative: str) -> list[str]:
    """The relative paths of every file in the folder `relative` (a run's `artifact_dir`), at any depth, of a store
    that keeps its artifacts as files (a copy reads a table's rows all at once instead)."""
    root = folder(store)
    base = root / relative
    return sorted(str(Path(top, name).relative_to(root)) for top, _, names in os.walk(base) for name in names)
