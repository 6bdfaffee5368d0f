"""Whether a database file passed SQLite's `quick_check`, asked once per state of the file.

Every writer refuses a damaged file before its first write; the verdict is kept in the data folder (VERDICT)
with the file's state, recorded again at exit by a process that wrote without error, and forgotten on a write
error. It cannot see bytes overwritten between the check and the exit, nor a file changed with its times set
back by hand. Why: docs/architecture.md, section 7.1 (When the environment gets in the way)."""

from __future__ import annotations

import atexit
import json
import os
import sqlite3
from pathlib import Path

from .environment import damaged

VERDICT = "verified.json"   # in the data folder: {"file": [device, inode, size, mtime_ns, ctime_ns]}

# (device, inode) of each file this process verified and has written without an error since: its path, data folder
_TRUSTED: dict[tuple[int, int], tuple[Path, Path]] = {}


def _state(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def verify(conn: sqlite3.Connection, path: Path, folder: Path) -> None:
    """Raise DAMAGED when the file fails `quick_check`, before a process's first write. The check is skipped when
    this process trusts the file, or the data folder's verdict is for the file as it is now."""
    state = _state(path)
    if _TRUSTED.get((state[0], state[1]), (None,))[0] == path:   # the same file by the same name
        return
    if _recorded(folder) != state:
        quick_check(conn, path)
        _record(folder, state)
    _TRUSTED[(state[0], state[1])] = (path, folder)


def forget(path: Path, folder: Path) -> None:
    """After a write error: nobody trusts the file until it is checked again."""
    try:
        state = _state(path)
        _TRUSTED.pop((state[0], state[1]), None)
    except OSError:
        pass
    (folder / VERDICT).unlink(missing_ok=True)


@atexit.register
def _left_intact() -> None:
    """As the process exits: each file it trusts, if still the same file, is verified as this process left it."""
    for key, (path, folder) in list(_TRUSTED.items()):
        try:
            state = _state(path)
        except OSError:
            continue
        if (state[0], state[1]) == key:
            _record(folder, state)


def quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """SQLite's `quick_check`, which reads every page once: a damaged file is an EnvironmentStop (DAMAGED)."""
    try:
        found = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
    except sqlite3.DatabaseError as e:
        found = str(e)
    if found != "ok":
        first = " ".join(found.replace("*** in database main ***", "").split())  # one line of it
        raise damaged(path, f"quick_check: {first}")


def _recorded(folder: Path) -> list[int] | None:
    try:
        return json.loads((folder / VERDICT).read_text())["file"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record(folder: Path, state: list[int]) -> None:
    """Record in the data folder the verdict for the file as it is now (`state`), written whole or not at all. It is
    a temporary file renamed into place. A folder that cannot be written (a full disk, a read-only one) only means
    the next writer checks again."""
    tmp = folder / f".{VERDICT}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps({"file": state}))
        os.replace(tmp, folder / VERDICT)
    except OSError:
        tmp.unlink(missing_ok=True)

