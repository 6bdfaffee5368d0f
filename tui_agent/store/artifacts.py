"""Where a run's artifacts live (large step results, reports, files for the operator), for every reader and writer.

A SQLite store keeps them as files in its data folder, unless its meta says its table holds them
(`IN_TABLE_META`: an export file); a server store in its `artifacts` table, unless `--data DIR` names a shared
folder. Either way an artifact is named `artifacts/<run id>/<name>`. The agents' own data is not an artifact.
Every name is confined to the artifacts (`NotAnArtifact`). Why: docs/architecture.md, sections 5 and 12."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time
from pathlib import Path, PurePosixPath
from typing import TypeGuard

from .base import Store, on_server
from .environment import stop_for_os

ENV = "TUI_AGENT_DATA"
IN_TABLE = "artifact:"   # how an artifact kept in the table is named for a person: artifact:<relative path>
HOME = "artifacts"       # every artifact's relative path is artifacts/<run id>/<name>
IN_TABLE_META = "artifacts"   # a meta row whose value `table` keeps a SQLite file's artifacts in its table

_UPSERT = ("INSERT INTO artifacts (path, content, size, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (path)"
           " DO UPDATE SET content = excluded.content, size = excluded.size, created_at = excluded.created_at")


class NotAnArtifact(OSError):
    """A name that is not one of the runs' artifacts, as the module defines them.

    It is an OSError (EACCES) whose `strerror` says why, so a reader that takes an unreadable artifact in its
    stride (diff, copy) takes this one too."""


def folder(store: Store) -> Path | None:
    """The folder that holds the store's artifacts as files, or None when its `artifacts` table does."""
    if not on_server(store.conn):
        return None if store.artifacts_in_table else store.data_dir
    shared = os.environ.get(ENV)
    return Path(shared).expanduser() if shared else None


def kept_in_table(conn) -> bool:
    """Whether a SQLite file's meta says it keeps its artifacts in its table (read as it is opened)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (IN_TABLE_META,)).fetchone()
    return row is not None and row[0] == "table"


def keep_in_table(store: Store) -> None:
    """Make the file's artifacts rows of its table from now on, for this store and every later open of the file. It
    runs inside the caller's write on a SQLite file, while an export is being made."""
    store.conn.execute("INSERT INTO meta (key, value) VALUES (?, 'table') ON CONFLICT (key) DO UPDATE SET value ="
                       " excluded.value", (IN_TABLE_META,))
    store.artifacts_in_table = True


def where(store: Store, relative: str) -> str:
    """What a person is shown, and `tui-agent artifact` takes: a file's path, or artifact:<relative path>."""
    root = folder(store)
    return f"{IN_TABLE}{relative}" if root is None else str(root / relative)


def well_formed(relative: str | None) -> TypeGuard[str]:
    """Whether `relative` has an artifact's shape: `artifacts/<run id>/...`, not absolute, no `..` (a row could
    name anything)."""
    path = PurePosixPath(relative or "")
    return not path.is_absolute() and ".." not in path.parts and len(path.parts) >= 2 and path.parts[0] == HOME


def confined(store: Store, relative: str) -> str:
    """`relative` as an artifact's relative path (normalised: `artifacts/<run id>/...`), or NotAnArtifact.

    A name that is absolute, holds `..`, is not under `artifacts/`, leads out through a link, or is not a regular
    file is refused before anything is read or written, so `tui-agent artifact` prints nothing else: not
    /etc/passwd, not the database file."""
    if not well_formed(relative):
        root = folder(store)
        kept = f"artifact:{HOME}/RUN/NAME in the database" if root is None else f"the files under {root / HOME}"
        raise NotAnArtifact(errno.EACCES, f"not one of the runs' artifacts, which are {kept}", relative)
    return str(PurePosixPath(relative))


def _inside(root: Path, path: Path) -> str:
    """`path` with every link resolved, refused when that leads out of the artifacts' folder."""
    home, real = os.path.realpath(root / HOME), os.path.realpath(path)
    if os.path.commonpath([home, real]) != home:
        raise NotAnArtifact(errno.EACCES, f"a link that leads out of {root / HOME}, to {real}", str(path))
    return real


def save(store: Store, relative: str, data: bytes) -> str:
    """Keep an artifact durably before anything refers to it (a journal row, a run's result); returns `where` it
    is. A file is fsynced, then renamed into place; a row is committed in a transaction of its own before the
    row that names it, or in the caller's open one (a fork's edited entry commits with its journal row). A
    crash in between leaves an artifact nothing names, which the retry writes over at the same path. A file
    that cannot be written (a full disk, a file-size limit, a read-only folder) is the environment's stop, with
    no part of it (nor a folder made for it) left behind."""
    relative = confined(store, relative)
    root = folder(store)
    if root is None:
        params = (relative, data, len(data), time.time())
        if store.conn.in_transaction:
            store.conn.execute(_UPSERT, params)
        else:
            store.write_one(_UPSERT, params)
        return where(store, relative)
    target = root / relative
    parent = Path(_inside(root, target.parent))   # outside the try: a refusal is not the environment's stop
    made = [above for above in (parent, *parent.parents)
            if above.is_relative_to(root) and above != root and not above.exists()]
    tmp = parent / (target.name + ".tmp")
    try:
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, parent / target.name)
    except OSError as e:   # a full disk, a file-size limit, a read-only folder: nothing of it is left behind
        tmp.unlink(missing_ok=True)
        for made_folder in made:   # the deepest first
            try:
                made_folder.rmdir()
            except OSError:
                pass
        raise stop_for_os(e, target) or e from e
    return str(target)


def load(store: Store, relative: str) -> bytes:
    """An artifact's content by its relative path (FileNotFoundError when no place holds it, NotAnArtifact when
    the path is not an artifact's)."""
    relative = confined(store, relative)
    root = folder(store)
    if root is None:
        row = store.conn.execute("SELECT content FROM artifacts WHERE path = ?", (relative,)).fetchone()
        if row is None:
            raise FileNotFoundError(errno.ENOENT, "no such artifact in the database", where(store, relative))
        return bytes(row[0])
    path = root / relative
    # O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer
    with open(os.open(_inside(root, path), os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise NotAnArtifact(errno.EACCES, "not a regular file", str(path))
        return f.read()


def read(store: Store, named: str) -> bytes:
    """An artifact by any name a person has for it; any other name is NotAnArtifact.

    A name is what `where` printed (a file's path, relative when the database's path is, or artifact:<relative
    path>), its relative path, or the path `where` printed for the database a copy was made from
    (`.../artifacts/<run id>/...` of a run this database holds: the copy's own artifact at that relative path,
    on whichever machine)."""
    if named.startswith(IN_TABLE):
        return load(store, named.removeprefix(IN_TABLE))
    root = folder(store)
    if root is not None and (os.path.isabs(named) or os.path.lexists(named)):   # a file's path, as `where` printed
        full = os.path.abspath(named)                                # it or through the links to the folder
        for base in {os.path.abspath(root), os.path.realpath(root)}:
            if os.path.commonpath([base, full]) == base:
                return load(store, os.path.relpath(full, base))
    parts = PurePosixPath(named).parts
    for i in range(len(parts) - 2):
        if parts[i] == HOME and store.conn.execute("SELECT 1 FROM runs WHERE id = ? AND artifact_dir = ?",
                                                   (parts[i + 1], f"{HOME}/{parts[i + 1]}")).fetchone():
            return load(store, "/".join(parts[i:]))
    return load(store, named)   # a relative path (load refuses one that is not an artifact's)


def under(store: Store, relative: str) -> list[str]:
    """The relative paths of every file in the folder `relative`, at any depth. `relative` is a run's `artifact_dir`,
    in a store that keeps its artifacts as files; a copy reads a table's rows all at once instead."""
    root = folder(store)
    assert root is not None, "under() is for a store that keeps its artifacts as files"
    base = root / confined(store, relative)
    return sorted(str(Path(top, name).relative_to(root)) for top, _, names in os.walk(base) for name in names)


def remove_folder(store: Store, artifact_dir: str) -> int:
    """Delete a run's artifact files for prune and return how many bytes they held. They are its folder,
    `artifact_dir`: artifacts/<run id>. Nothing to do where the store keeps them in its table (prune deletes those
    rows) or when the folder is not there. A link is removed, never followed (nor is anything outside the artifacts'
    folder read)."""
    root = folder(store)
    if root is None:
        return 0
    path = root / confined(store, artifact_dir)
    if path.is_symlink():
        path.unlink()
        return 0
    if not path.is_dir():
        return 0
    real = Path(_inside(root, path))
    size = sum(os.lstat(Path(top, name)).st_size for top, _, names in os.walk(real) for name in names)
    shutil.rmtree(real)
    return size
