"""`ctx.run_command`: a program run as a journaled step, stopped for real when it must stop.

The program runs without a shell, in a process group of its own, held at a gate until its group is committed
(store/commands.py), its output streamed to artifact files. The group is killed at `timeout_s`
(`StepTimedOut`), when the run is taken from this thread, when the program ends, and by the next claim after a
dead worker. The exit code is not judged here. Why: docs/architecture.md, section 7 (Workers), "Deadlines"."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from ..errors import StepTimedOut
from ..store import artifacts
from ..store import commands as rows
from ..store.host import process_start
from .control import kill_group
from .faults import crash_point
from .journal import Recorder

OUTPUT_LIMIT = 64 * 1024   # bytes of stdout and of stderr kept in the entry (the last ones)
# The gate, on a pipe as its standard input: wait for the go line (end of file: the worker died first, so run
# nothing), then become the program, its standard input the file named first. The program's arguments are the
# shell's positional parameters, never parsed.
GATE = 'read -r go || exit 126; input=$1; shift; exec "$@" <"$input"'
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def run(journal: Recorder, artifact_dir: Path, *, name: str, argv: list[str], cwd: str | Path | None,
        stdin: str | bytes | None, env: Mapping[str, str] | None, timeout_s: float | None, output_limit: int) -> dict:
    """Run the program inside the journaled call in progress, and return what Context.run_command journals.

    The call is a step's function or an effect's `do`, at the position before the journal's position, and the
    program is recorded as its program. It is not journaled itself: a caller that is not a step records what it
    returns."""
    if not argv:
        raise ValueError("run_command needs a program to run: argv is empty")
    merged = None if env is None else {**os.environ, **env}
    _findable(argv[0], cwd, merged)
    position = journal.position - 1
    journal.programs += 1
    relative = f"{journal.artifact_dir}/commands/g{journal.generation}-{position:05d}-f{journal.fence}-" \
               f"{journal.programs}-{_UNSAFE.sub('-', name)[:40]}"
    folder = artifact_dir / "commands"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    base = folder / Path(relative).name
    with (open(f"{base}.stdout", "w+b") as out, open(f"{base}.stderr", "w+b") as err,
          tempfile.NamedTemporaryFile(dir=folder, prefix=".stdin-") as into):
        into.write(stdin.encode() if isinstance(stdin, str) else stdin or b"")
        into.flush()
        t0 = time.monotonic()
        child, command_id = _started(journal, name, position=position, gated=[into.name, *argv], env=env,
                                     files=dict(cwd=cwd, stdout=out, stderr=err, env=merged))
        control = journal.control
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
            rows.ended(journal.store, command_id, child.returncode, journal.clock.now())
        duration = round(time.monotonic() - t0, 3)
        kept = {stream: _keep(journal, f"{relative}.{stream}", handle)
                for stream, handle in (("stdout", out), ("stderr", err))}
        return {"argv": argv, "env": sorted(env or ()), "exit": code, "duration_s": duration,
                "stdout": _tail(out, output_limit), "stderr": _tail(err, output_limit),
                "stdout_artifact": kept["stdout"], "stderr_artifact": kept["stderr"]}


def _started(journal: Recorder, name: str, *, position: int, gated: list[str], env: Mapping[str, str] | None,
             files: dict) -> tuple[subprocess.Popen, int]:
    """The program started behind its gate, its row committed, then let go; (the process, its row's id).
    `gated`: the input file's path, then the program's argv. When the row cannot be written (the run was taken,
    the database stopped us) the gate is closed, so nothing runs."""
    go: int | None   # the gate's write end, None once closed
    gate, go = os.pipe()
    argv = gated[1:]
    try:
        try:
            child = subprocess.Popen(["/bin/sh", "-c", GATE, argv[0], *gated], process_group=0, stdin=gate,
                                     **files)
        finally:
            os.close(gate)
        try:
            crash_point("command-gated", name)
            with journal.write() as conn:
                command_id = rows.begin(conn, run_id=journal.run_id, generation=journal.generation,
                                        position=position, name=name, fence=journal.fence, argv=argv,
                                        env=list(env or ()), pgid=child.pid, pid_started=process_start(child.pid),
                                        now=journal.clock.now())
        except BaseException:
            os.close(go)
            go = None
            child.wait()   # the gate read end of file: it exits without running the program
            raise
        if journal.control is not None:
            journal.control.adopt(child.pid)
        os.write(go, b"go\n")
        return child, command_id
    finally:
        if go is not None:
            os.close(go)


def _findable(program: str, cwd: str | Path | None, env: Mapping[str, str] | None) -> None:
    """FileNotFoundError, as Popen raises it, for a program that cannot be run (the gate would only exit 127)."""
    found: Path | str | None
    if "/" in program:
        path = Path(cwd or ".") / program
        found = path if path.is_file() and os.access(path, os.X_OK) else None
    else:
        found = shutil.which(program, path=(env or os.environ).get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "no such program, or not executable", program)


def _keep(journal: Recorder, relative: str, handle: IO[bytes]) -> str:
    """Where the whole stream is kept, as `show` prints it: the file itself, or on a store whose artifacts are rows,
    the copy saved there."""
    if artifacts.folder(journal.store) is None:
        handle.seek(0)
        return artifacts.save(journal.store, relative, handle.read())
    return artifacts.where(journal.store, relative)


def _tail(file: IO[bytes], limit: int) -> str:
    size = os.fstat(file.fileno()).st_size
    return os.pread(file.fileno(), limit, max(0, size - limit)).decode("utf-8", errors="replace")


def started(journal: Recorder, position: int, name: str) -> int:
    """How many programs named `name` were started inside the journaled call at `position`, those a dead worker
    started included: what was spent on them stays counted."""
    return sum(row["name"] == name
               for row in rows.of_position(journal.store.conn, journal.run_id, journal.generation, position))
