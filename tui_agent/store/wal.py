"""Keeping the WAL small: checkpoints an idle worker runs, never on the step path.

No checkpoint can pass a reader's snapshot, so while one reader holds a snapshot the WAL grows.
Once it lets go, a busy writer's own auto-checkpoints catch up and `journal_size_limit` (db.py)
cuts the file back when the WAL restarts; when writing stops, nobody restarts it, so an idle
worker checkpoints and truncates it here.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .base import Store
from .environment import BUSY, READ_ONLY
from .runs import data_version

if TYPE_CHECKING:   # db.py imports this module
    from .db import SqliteStore

CHECKPOINT_EVERY_S = 5.0  # an idle worker checkpoints at most this often
IDLE_FROM_BYTES = 1024 * 1024  # and only a WAL this big: emptying a smaller one buys nothing and costs fsyncs


def checkpoint(store: SqliteStore) -> bool:
    """Copy the WAL into the database, then empty the WAL file if every frame was copied.

    The copy is PASSIVE: it waits for nobody. The emptying is a TRUNCATE with a zero busy timeout: a TRUNCATE
    that waited for a reader would hold the write lock meanwhile and stall every writer. True when the WAL file
    was emptied. Housekeeping never fails a command for a lock or a file it may not write; any other error is
    the store's to report."""
    try:
        return _checkpoint(store.conn)
    except sqlite3.Error as e:
        stop = store.stopped(e)
        if (stop is not None and stop.kind in (BUSY, READ_ONLY)) or not os.access(store.path, os.W_OK):
            return False  # a read-only connection reports a disk I/O error here, not read-only
        raise (stop or e) from e


def _checkpoint(conn: sqlite3.Connection) -> bool:
    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if busy or frames == 0 or copied < frames:  # nothing to do, or a reader still needs the frames
        return False
    patience = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    conn.execute("PRAGMA busy_timeout=0")
    try:
        return conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.execute(f"PRAGMA busy_timeout={patience}")


class IdleCheckpoint:
    """`checkpoint` from a worker's idle loop, at most once every `every_s`. It checkpoints only when no other
    connection committed since the previous call, and the WAL is `from_bytes` or more; a writer at work checkpoints
    as it goes."""

    def __init__(self, store: Store, every_s: float = CHECKPOINT_EVERY_S, from_bytes: int = IDLE_FROM_BYTES) -> None:
        self.store = store
        self.every_s = every_s
        self.from_bytes = from_bytes
        self._wal = Path(f"{store.path}-wal")
        self._due_at = time.monotonic() + every_s
        self._version: int | None = None

    def __call__(self) -> None:
        version, self._version = self._version, data_version(self.store)
        if version != self._version or time.monotonic() < self._due_at:
            return
        self._due_at = time.monotonic() + self.every_s
        if _size(self._wal) >= self.from_bytes:
            self.store.checkpoint()


def _size(path: Path) -> int:
    """A file's size, from its metadata. It never calls open() on a database file: closing it would drop our locks."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
