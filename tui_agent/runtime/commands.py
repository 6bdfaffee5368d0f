"""`ctx.run_command`: a program run as a journaled step, stopped for real when it must stop.

A thread cannot be killed, but a process can. The program runs without a shell, in a process group of its own
(`process_group=0`), with its standard input from a file (empty unless `stdin` is given) and its output streamed to
files, never pipes: a grandchild that keeps a pipe open cannot hold the step up. The whole group is killed
(SIGKILL) when:

- `timeout_s` passes: the attempt then fails with `StepTimedOut`, a temporary error, so the run's retry policy
  decides what comes next, as for any step (the step deadline of runtime/deadlines.py is not applied on top);
- the run is taken from this thread: parked or cancelled by a person, taken by another lease, its lease let go
  of, handed on at a deadline (`wall_s`) or handed back when the worker stops (RunControl.kill_commands);
- the program ends: what it left running in its group goes with it.

A process that left the group (setsid) escapes, as from any process-group kill. The entry records the argv, the
exit code (negative: the signal that ended it), how long it ran, and the last `output_limit` bytes of stdout and
stderr (decoded as UTF-8, a broken character replaced); the program's exit code is not judged here: the caller
decides what a non-zero exit means. `env` is laid over this process's environment."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..errors import StepTimedOut
from .control import kill_group

if TYPE_CHECKING:
    from .control import RunControl

OUTPUT_LIMIT = 64 * 1024   # bytes of stdout and of stderr kept in the entry (the last ones)


def run(control: RunControl | None, argv: list[str], cwd: str | Path | None, stdin: str | bytes | None,
        env: Mapping[str, str] | None, timeout_s: float | None, output_limit: int) -> dict:
    """The step's function (Context.run_command journals what it returns)."""
    if not argv:
        raise ValueError("run_command needs a program to run: argv is empty")
    given = stdin.encode() if isinstance(stdin, str) else stdin
    with tempfile.TemporaryFile() as into, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        if given:
            into.write(given)
            into.seek(0)
        t0 = time.monotonic()
        child = subprocess.Popen(argv, cwd=cwd, stdin=into, stdout=out, stderr=err, process_group=0,
                                 env=None if env is None else {**os.environ, **env})
        if control is not None:
            control.adopt(child.pid)
        try:
            code = child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(child.pid)
            child.wait()
            raise StepTimedOut(f"{argv[0]} was still running after {timeout_s:g}s, its timeout; its process group "
                               "was killed") from None
        finally:
            kill_group(child.pid)   # what the program left running in its group
            if child.returncode is None:   # interrupted here (ctrl+c in `tui-agent run`): the group is gone
                child.wait()
            if control is not None:
                control.disown(child.pid)
        return {"argv": argv, "exit": code, "duration_s": round(time.monotonic() - t0, 3),
                "stdout": _tail(out, output_limit), "stderr": _tail(err, output_limit)}


def _tail(file: IO[bytes], limit: int) -> str:
    size = os.fstat(file.fileno()).st_size
    return os.pread(file.fileno(), limit, max(0, size - limit)).decode("utf-8", errors="replace")
