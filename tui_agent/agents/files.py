"""Files a coding agent reads and changes in a user's tree: only regular files reached without following a
link, read without blocking, written whole or not at all, and found the way the user's tools find them.

A symbolic link (to a file or a folder, inside the tree or outside it), a FIFO, a socket or a device is never
opened, read, written or replaced: `read_regular` and `write_atomic` raise NotRegular for it, and the walks
return it apart from the regular files, so a caller can say what it left alone."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..runtime.faults import crash_point

# Folders that hold what a build or an installer made, never the sources, outside a git repository.
SKIPPED = {"node_modules", "__pycache__", "build", "dist", "out", "target", "coverage", "venv", "env",
           "site-packages"}
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegular(ValueError):
    """A path under a tree that is not a regular file reached without a link. str(e) names it and says what is there
    instead (`pkg/a.py is a symbolic link to ../b.py`)."""


def shown(name: str) -> str:
    """A file name as text any output can hold: the bytes of a name that is not UTF-8 as `\\xe9` escapes."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def is_utf8(name: str) -> bool:
    """Whether a name from the file system (undecodable bytes kept as surrogates) is UTF-8 text."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def what(folder: int | str, name: str) -> str:
    """What the entry `name` in `folder` is, its link never followed. `folder` is an open folder or a path. The answer
    is `a symbolic link to TARGET`, `a FIFO`, `a socket`, `a device`, `a folder` or `a regular file`."""
    dir_fd, path = (folder, name) if isinstance(folder, int) else (None, os.path.join(folder, name))
    mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_mode
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {shown(os.readlink(path, dir_fd=dir_fd))}"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a regular file" if stat.S_ISREG(mode) else "a device"


def _split(name: str) -> tuple[list[str], str]:
    """The folders on the way to the file `name` and its own name; NotRegular when `name` is the tree itself."""
    parts = parts_of(name)
    if not parts:
        raise NotRegular(f"{shown(name)} is the tree itself, a folder, not a regular file")
    return parts[:-1], parts[-1]


def parts_of(name: str) -> list[str]:
    """The parts of `name`, a path relative to a tree (`a/b.py`); ValueError when it leads out of the tree."""
    parts = [part for part in os.path.normpath(name).split("/") if part not in ("", ".")]
    if os.path.isabs(name) or ".." in parts:
        raise ValueError(f"{shown(name)} is outside the tree; give a path relative to its root")
    return parts


@contextmanager
def _folder(tree: Path, parts: list[str], make: bool = False) -> Iterator[int]:
    """The folder `tree/parts...`, opened part by part without following a link (`make`: creating what is
    missing). NotRegular when a part is a link or not a folder; FileNotFoundError when one is missing."""
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            try:
                inner = os.open(part, _FOLDER, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                os.mkdir(part, dir_fd=fd)
                inner = os.open(part, _FOLDER, dir_fd=fd)
            except OSError as e:
                if e.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                raise NotRegular(f"{shown('/'.join(parts[:i + 1]))} is {what(fd, part)}, not a folder") from None
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def _regular(folder: int, name: str, shown_as: str) -> os.stat_result | None:
    """The stat of the regular file `name` in `folder`, None when there is none; NotRegular for anything else."""
    try:
        found = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(found.st_mode):
        raise NotRegular(f"{shown(shown_as)} is {what(folder, name)}, not a regular file")
    return found


def read_regular(tree: Path, name: str) -> bytes:
    """The bytes of the regular file `name` (relative to `tree`). NotRegular when it, or a folder on the way,
    is a link or not a regular file (a FIFO is never opened, so nothing blocks); FileNotFoundError when gone."""
    folders, last = _split(name)
    with _folder(tree, folders) as folder:
        if _regular(folder, last, name) is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", shown(name))
        try:   # O_NONBLOCK and the fstat: what was swapped in after the check is not read either
            fd = os.open(last, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                         dir_fd=folder)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENXIO):
                raise
            raise NotRegular(f"{shown(name)} is no longer a regular file") from None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NotRegular(f"{shown(name)} is no longer a regular file")
            return handle.read()


def write_atomic(tree: Path, name: str, data: bytes, make_folders: bool = False) -> None:
    """Write the file `name`, relative to `tree`, whole, so a kill -9 never leaves it truncated.

    A temporary file in the same folder is flushed and fsynced, then renamed over it with its mode kept (a new
    file gets 0644), so a kill -9 at any moment leaves the old file (or none) or the new one. NotRegular is
    raised when it, or a folder on the way, is a link or not a regular file: a link is never replaced, nor
    written through."""
    folders, last = _split(name)
    with _folder(tree, folders, make_folders) as folder:
        found = _regular(folder, last, name)
        mode = stat.S_IMODE(found.st_mode) if found else 0o644
        # One fixed name per file: a copy a kill left behind is removed and made anew, never listed for (a folder
        # of 10,000 files would make every write read the folder). One writer per file holds: the run's fence.
        tmp = f".{last}.tui-agent.tmp"
        try:
            os.unlink(tmp, dir_fd=folder)   # a link planted there is removed, never written through
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
                os.fchmod(handle.fileno(), mode)
            crash_point("mid-write", str(tree / name))
            os.replace(tmp, last, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=folder)
            except FileNotFoundError:
                pass
            raise
        os.fsync(folder)   # the rename itself survives a power cut


def tracked(tree: Path) -> list[str] | None:
    """The files git tracks under `tree` (paths relative to it), or None when `tree` is not in a repository."""
    try:
        done = subprocess.run(["git", "-C", str(tree), "ls-files", "-z", "--", "."], capture_output=True,
                              check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return [name for name in done.stdout.decode("utf-8", "surrogateescape").split("\0") if name]


def walked(tree: Path, under: str = "") -> tuple[list[str], dict[str, str]]:
    """The regular files under `tree/under` outside hidden and build folders, and every other entry met there.

    Paths are relative to `tree`. Each other entry that is not a folder gone into comes with what it is
    (`{"lib": "a symbolic link to ../x"}`). No link is followed: a linked folder is listed, never walked;
    NotRegular is raised when `under` is a link."""
    files: list[str] = []
    others: dict[str, str] = {}
    parts = parts_of(under)
    with _folder(tree, parts):
        pass   # `under` is a folder reached without a link
    pending = [tree.joinpath(*parts)]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                name = os.path.relpath(entry.path, tree)
                if entry.is_dir(follow_symlinks=False):
                    if not entry.name.startswith(".") and entry.name not in SKIPPED:
                        pending.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    files.append(name)
                else:
                    others[name] = what(str(folder), entry.name)
    return sorted(files), others


def sources(tree: Path, suffixes: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """The regular source files under `tree` with one of `suffixes`, sorted, and what was left alone.

    In a repository they are git's tracked files, else a walk that skips hidden and build folders. What was left
    alone is every link (a link to a folder is never walked) and every other entry with such a suffix that is not a
    regular file, with what it is."""
    wanted = tuple(suffixes)
    names = tracked(tree)
    if names is None:
        files, others = walked(tree)
    else:
        files, others = [], {}
        for name in names:
            try:
                mode = os.lstat(tree / name).st_mode
            except FileNotFoundError:   # deleted in the working tree: nothing to read
                continue
            if stat.S_ISREG(mode):
                files.append(name)
            elif not stat.S_ISDIR(mode):   # a folder: a submodule, not this repository's files
                others[name] = what(str(tree), name)
    sources_only = sorted(name for name in files if name.endswith(wanted))
    return sources_only, {name: kind for name, kind in others.items()
                          if name.endswith(wanted) or os.path.islink(tree / name)}


def left_alone_line(left: dict[str, str], most: int = 20) -> str:
    """One line naming the first `most` of what a walk left alone, with names as `shown` makes them.

    For example: `left 2 entries alone that are not regular files (a link is never followed): a.py (a symbolic
    link to b.py), f.py (a FIFO)`."""
    named = ", ".join(f"{name} ({kind})" for name, kind in sorted(left.items())[:most])
    more = f", and {len(left) - most} more" if len(left) > most else ""
    return (f"left {len(left)} entr{'y' if len(left) == 1 else 'ies'} alone that are not regular files (a link is "
            f"never followed): {named}{more}")
