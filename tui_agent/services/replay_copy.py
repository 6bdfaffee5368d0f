"""`tui-agent replay` on a copy of the database, in a child process with a time limit.

The copy lives in a temporary folder that is removed afterwards; the child's process group is killed whatever
happens. A path the agent's code names by itself is not redirected to the copy.
Why: docs/architecture.md, section 6.1a (The same mechanism as a regression test).
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from ..errors import EnvironmentStop, TuiAgentError
from ..states import EXIT_NOT_SUCCEEDED
from ..store import Store, artifacts, data_dir_for
from ..store.base import is_url
from ..store.copying import copy_database, open_target
from ..store.environment import FULL, READ_ONLY, stop_for, stop_for_os


class ReplayStopped(TuiAgentError):
    """The replay's child did not end by itself: it ran out of time, or a signal ended it."""

    exit_code = EXIT_NOT_SUCCEEDED


def snapshot(store: Store, folder: Path) -> Path:
    """A copy of the database `store` opens, as the SQLite file `folder`/runs.db with its data folder beside it;
    returns the copy's path. A copy that cannot be written there (a full disk) is the environment's stop."""
    copy = folder / "runs.db"
    try:
        if is_url(store.path):
            _from_server(store, copy)
        else:
            _from_file(store, copy)
    except EnvironmentStop as e:
        if e.kind not in (FULL, READ_ONLY):   # the source's own (busy, unreachable): said as it is
            raise
        raise EnvironmentStop(e.kind, f"cannot make the replay's copy of the database in {folder.parent} "
                                      f"({e.__cause__ or e}); the database is unchanged; free space there, or "
                                      "point TMPDIR at another folder") from e
    return copy


def _from_server(store: Store, copy: Path) -> None:
    target = open_target(str(copy))
    try:
        copy_database(store, target)
    finally:
        target.close()


def _from_file(store: Store, copy: Path) -> None:
    """SQLite's backup of every page, as of one read transaction, and the artifacts folder's files (links as
    links)."""
    kept, data = store.data_dir / "artifacts", data_dir_for(copy)   # every artifact the rows name lies under it
    source = store.conn
    assert isinstance(source, sqlite3.Connection)   # snapshot sends a server's store to _from_server
    try:
        with closing(sqlite3.connect(copy)) as into:
            source.backup(into)
        data.mkdir(mode=0o700)
        for folder, _, files in os.walk(kept):
            copied = data / Path(folder).relative_to(store.data_dir)
            copied.mkdir(mode=0o700, exist_ok=True)
            for name in files:
                shutil.copy2(Path(folder) / name, copied / name, follow_symlinks=False)
    except sqlite3.Error as e:
        raise stop_for(e, copy) or e from e
    except OSError as e:
        raise stop_for_os(e, copy) or e from e


def replay_on_copy(store: Store, agent_modules: list[str], replay_args: list[str], timeout_s: int,
                   what: str) -> int:
    """`tui-agent replay REPLAY_ARGS` in a child process on a copy of `store`'s database, within `timeout_s`; its
    exit code. Its output is the child's own (its standard output and error are this process's). `what` names
    the replay in the line that says it ran out of time."""
    with tempfile.TemporaryDirectory(prefix="tui-agent-replay-", ignore_cleanup_errors=True) as folder:
        copy = snapshot(store, Path(folder))
        command = [sys.executable, "-m", "tui_agent", "--db", str(copy)]
        for module in agent_modules:
            command += ["--agents", module]
        env = {**os.environ, "TUI_AGENT_DB": str(copy), artifacts.ENV: str(data_dir_for(copy))}
        code = _bounded([*command, "replay", *replay_args, "--on-copy"], env, timeout_s)
    if code is None:
        raise ReplayStopped(f"replay of {what} did not finish within {timeout_s} s: the agent's code was still "
                            "running (a loop or a wait after its last journaled call?) and was stopped; the "
                            "database is unchanged (the replay ran on a copy); give it longer with --timeout")
    if code < 0:
        raise ReplayStopped(f"replay of {what} was ended by {signal.Signals(-code).name} before it finished; the "
                            "database is unchanged (the replay ran on a copy)")
    return code


def _bounded(command: list[str], env: dict[str, str], timeout_s: float) -> int | None:
    """Run `command` in a process group of its own; its exit code (negative: the signal that ended it), or None
    when it was still running after `timeout_s`. The group is killed on the way out, whatever happens."""
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, process_group=0)
    try:
        with _terminated_as_an_exit():
            return child.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)   # what the code started, and the child if it still runs
        except ProcessLookupError:
            pass   # the child has ended and left nothing behind
        child.wait()


@contextmanager
def _terminated_as_an_exit() -> Iterator[None]:
    """SIGTERM and SIGHUP end this process by SystemExit (128 + the signal) meanwhile, so that the caller's
    `finally` kills the child's group and the temporary folder is removed; as before afterwards."""
    def leave(signum: int, frame) -> None:
        sys.exit(128 + signum)

    before = {signum: signal.signal(signum, leave) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
