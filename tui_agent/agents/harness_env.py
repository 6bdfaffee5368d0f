"""The harness's rehydration identifiers: what a resumed iteration needs to find as the run's start found it.

So a changed sandbox is a person's decision, not a worker's confusing failure (a missing API key looks like a
model failure until someone checks the environment). `identify` says what they are; `changes` names what
differs. Why: docs/architecture.md, section 8.1 (The harness agent: seed 001's iteration)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..runtime.context import Context, run_program

LOCKS = ("uv.lock", "poetry.lock", "requirements*.txt", "package-lock.json", "pnpm-lock.yaml", "Cargo.lock", "go.sum")
_PYTHON = re.compile(r"^python[0-9.]*$")


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _resolved(program: str, tree: Path) -> Path | None:
    if "/" in program:
        path = (tree / program).resolve()
        return path if path.is_file() else None
    found = shutil.which(program)
    return Path(found).resolve() if found else None


def _program(program: str, tree: Path) -> dict:
    path = _resolved(program, tree)
    if path is None:
        return {"name": program, "missing": True}
    found = path.stat()
    return {"name": program, "path": str(path), "size": found.st_size, "mtime": found.st_mtime_ns,
            "sha256": _digest(path)}


@functools.cache
def _python_version(path: str, size: int, mtime: int) -> str | None:
    """An interpreter's version, asked once per state of its file (it is run, so only a Python is asked)."""
    try:
        done = subprocess.run([path, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def identify(ctx: Context, settings: dict, tree: Path) -> dict:
    """This worker's identifiers for the run, read inside a journaled call (a `version_command` runs as its program).

    They are the coding agent's command (resolved on PATH: its file's path, size, modification time and digest;
    its `--version` output only when the request names a `version_command`, since running a user's script with
    `--version` may run it whole), the version of the check's interpreter when it is a Python, the digest of each
    lock file the worktree has, and which of the environment variables the request names are set (names only,
    never values)."""
    ids: dict = {}
    worker = settings["worker"]
    if "command" in worker:
        ids["agent"] = _program(worker["command"][0], tree)
        if worker.get("version_command") and not ids["agent"].get("missing"):
            said = run_program(ctx, "agent version", worker["version_command"], tree, None, None, 60, 4096)
            ids["agent_version"] = (said["stdout"].strip().splitlines() or [f"exit {said['exit']}"])[0]
    check = _resolved(settings["check"][0], tree)
    if check is not None and _PYTHON.match(check.name):
        found = check.stat()
        ids["check_python"] = _python_version(str(check), found.st_size, found.st_mtime_ns)
    ids["locks"] = {path.name: _digest(path) for pattern in LOCKS for path in sorted(tree.glob(pattern))
                    if path.is_file() and not path.is_symlink()}
    ids["env"] = {name: name in os.environ for name in settings["env"]}
    return ids


def changes(before: dict, now: dict) -> list[str]:
    """What differs between two sets of identifiers, one phrase each (empty: the same environment)."""
    said = []
    was, agent = before.get("agent"), now.get("agent")
    if was != agent:
        assert was is not None and agent is not None   # both or neither: the run's settings name the command or not
        if agent and agent.get("missing"):
            said.append(f"the coding agent's command {agent['name']} is no longer on PATH (it was {was.get('path')})")
        elif was and was.get("missing"):
            said.append(f"the coding agent's command {agent['name']} is on PATH now ({agent['path']})")
        else:
            what = [k for k in ("path", "size", "mtime", "sha256") if was.get(k) != agent.get(k)]
            said.append(f"the coding agent's command {agent['name']} changed ({', '.join(what)}: {agent['path']})")
    if before.get("agent_version") != now.get("agent_version"):
        said.append(f"the coding agent's version changed ({before.get('agent_version')} -> {now.get('agent_version')})")
    if before.get("check_python") != now.get("check_python"):
        said.append(f"the check's Python changed ({before.get('check_python')} -> {now.get('check_python')})")
    old_locks, new_locks = before.get("locks", {}), now.get("locks", {})
    for name in sorted(set(old_locks) | set(new_locks)):
        if name not in new_locks:
            said.append(f"the lock file {name} is gone")
        elif name not in old_locks:
            said.append(f"a lock file {name} appeared")
        elif old_locks[name] != new_locks[name]:
            said.append(f"the lock file {name} changed")
    for name, is_set in now.get("env", {}).items():
        if before.get("env", {}).get(name, is_set) != is_set:
            said.append(f"the environment variable {name} is {'set now' if is_set else 'no longer set'}")
    return said
