"""Files a coding agent changes: written whole or not at all, and found the way the user's tools find them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from ..runtime.faults import crash_point

# Folders that hold what a build or an installer made, never the sources, outside a git repository.
SKIPPED = {"node_modules", "__pycache__", "build", "dist", "out", "target", "coverage", "venv", "env",
           "site-packages"}


def write_atomic(path: Path, data: bytes) -> None:
    """A temporary file in the same folder, flushed and fsynced, then renamed over `path` with its mode kept (a
    new file gets 0644): a kill -9 at any moment leaves the old file (or none) or the new one, never a truncated one."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    # One fixed name per file: a copy a kill left behind is truncated and reused, never listed for (a folder of
    # 10,000 files would make every write read the folder). One writer per file holds: the run's fence.
    tmp = str(path.with_name(f".{path.name}.tui-agent.tmp"))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        crash_point("mid-write", str(path))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)   # the rename itself survives a power cut
    finally:
        os.close(directory)


def tracked(tree: Path) -> list[str] | None:
    """The files git tracks under `tree` (paths relative to it), or None when `tree` is not in a repository."""
    try:
        done = subprocess.run(["git", "-C", str(tree), "ls-files", "-z", "--", "."], capture_output=True,
                              check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return [name for name in done.stdout.decode("utf-8", "surrogateescape").split("\0") if name]


def walked(tree: Path) -> list[str]:
    """Every file under `tree` outside hidden and build folders (paths relative to it)."""
    found = []
    for folder, subfolders, names in os.walk(tree):
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in SKIPPED]
        found += [os.path.relpath(os.path.join(folder, name), tree) for name in names]
    return found


def sources(tree: Path, suffixes: Iterable[str]) -> list[str]:
    """The source files under `tree` with one of `suffixes`, sorted: git's tracked files in a repository,
    else a walk that skips hidden and build folders."""
    wanted = tuple(suffixes)
    names = tracked(tree)
    return sorted(name for name in (walked(tree) if names is None else names) if name.endswith(wanted))
