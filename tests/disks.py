"""Storage faults for the tests that run commands into them: a small disk to fill, a file-size limit, a read-only
path, a damaged page, and the one line a command answers them with (a plugin of tests/conftest.py, for small_disk)."""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import ROOT


def one_line(done, code: int = 4) -> str:
    """The error is one line, the last on stderr (a worker logs its claims there before it)."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("tui-agent: ")]
    assert len(errors) == 1, done.stderr
    assert lines[-1] == errors[0], done.stderr
    assert "Traceback" not in done.stderr
    return errors[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- a full disk -----------------------------------------------------------------------------------


@pytest.fixture
def small_disk():
    """A folder on a file system with little room: a 2 MiB tmpfs where this process may mount one (root);
    elsewhere a file-size limit for the child processes, which SQLite meets the same way."""
    folder = Path(tempfile.mkdtemp(prefix="tui-agent-full-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                             capture_output=True).returncode == 0
    try:
        yield folder, mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def fill(folder: Path, leave: int) -> Path:
    """Take all the free space in `folder` but `leave` bytes."""
    filler = folder / "filler"
    free = shutil.disk_usage(folder).free
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def limited(tui_agent, env: dict, *args: str):
    """The command through `tui_agent`, or, when `env` holds TUI_AGENT_TEST_FSIZE (taken out of it), as a process
    that may write no file past that many bytes."""
    limit = env.pop("TUI_AGENT_TEST_FSIZE", None)
    if limit is None:
        return tui_agent(*args)

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), int(limit)))

    return subprocess.run([sys.executable, "-m", "tui_agent", *args], capture_output=True, text=True, cwd=ROOT,
                          preexec_fn=cap, timeout=60)


# -- a read-only file or folder --------------------------------------------------------------------


def read_only(path: Path) -> None:
    """Not writable even for root: the immutable attribute where it can be set, else the mode bits."""
    if os.geteuid() != 0 or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        path.chmod(0o400 if path.is_file() else 0o500)


def writable(path: Path) -> None:
    subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    path.chmod(0o600 if path.is_file() else 0o700)


# -- a damaged page --------------------------------------------------------------------------------


def damage(path: Path, table: str | None = "runs", offset: int = 8) -> None:
    """Overwrite 100 bytes of the page that roots `table` (None: page 1, which holds the schema) with garbage;
    from byte 8 on that is the b-tree's cell pointers, which quick_check reads (deeper in a page, the bytes may
    be free space that nothing reads)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = 1 if table is None else conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                                                (table,)).fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:  # no SQLite connection is open in this process: no lock to lose
        f.seek((root - 1) * page_size + (100 if root == 1 else 0) + offset)
        f.write(b"\xa5" * 100)


def quick_check_fails(path: Path) -> bool:
    """Whether SQLite's quick_check finds the file damaged (or cannot read it at all)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("PRAGMA quick_check").fetchall() != [("ok",)]
    except sqlite3.DatabaseError:
        return True
    finally:
        conn.close()
