"""A coding agent's oracle: the files it may not change (the tests, by globs), put back as the base commit has them
before every check, and the check itself, a command run in the worktree. Shared by `patch` and `harness`: if the
worker can change the tests, the tests are not an oracle."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from ..errors import ParkRun
from . import worktree
from .files import walked

ORACLE = ["tests/**", "test/**", "**/test_*.py", "**/*_test.py", "**/conftest.py"]
TEST_TIMEOUT_S = 300
# How a check is run: (worktree, argv) -> {"exit_code": int | None (timed out), "output": text}
Runner = Callable[[Path, list[str]], dict]


def oracle_pattern(globs: list[str]) -> re.Pattern:
    """One regex for the oracle's globs: `**/` any folders (or none), `**` anything, `*` within a name."""
    parts = []
    for glob in globs:
        text = re.escape(glob).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        parts.append(text.replace(r"\?", "[^/]"))
    return re.compile("^(?:" + "|".join(parts) + ")$")


def restore(tree: Path, base: str, oracle: re.Pattern) -> list[str]:
    """Put the oracle's files back as the base commit has them. Each one changed or deleted is put back and each new one
    removed; for a link the tests would meet too, that is the link, never its target. Returns the names that differed,
    sorted."""
    in_base = [n for n in worktree.git("ls-tree", "-r", "--name-only", base, cwd=tree).splitlines() if oracle.match(n)]
    differed = set()
    if in_base:
        changed = worktree.git("diff", "--name-only", "--no-renames", base, "--", *in_base, cwd=tree).splitlines()
        differed.update(changed)
        worktree.git("checkout", base, "--", *in_base, cwd=tree)
    files, others = walked(tree)
    for name in [*files, *others]:
        if oracle.match(name) and name not in in_base:
            (tree / name).unlink()
            differed.add(name)
    return sorted(differed)


def run_tests(tree: Path, command: list[str]) -> dict:
    """The check as a plain child process, bounded by TEST_TIMEOUT_S (patch's tools run it so)."""
    try:
        done = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=TEST_TIMEOUT_S,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})   # no __pycache__ to commit
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "output": f"timed out after {TEST_TIMEOUT_S}s"}
    except OSError as e:
        raise ParkRun(f"the test command {command[0]!r} cannot be run here ({e})") from None
    return {"exit_code": done.returncode, "output": done.stdout + done.stderr}


def run_oracle(tree: Path, base: str, oracle: re.Pattern, command: list[str], run: Runner = run_tests) -> dict:
    """Run the command by `run` on the tests as the base commit has them.

    Any change to an oracle file is undone first. Returns {passed, exit_code, passing, output (its last 4,000
    characters), restored (the oracle's files that differed)}."""
    restored = restore(tree, base, oracle)
    done = run(tree, command)
    output = done["output"][-4000:]
    return {"passed": done["exit_code"] == 0, "exit_code": done["exit_code"], "passing": passing(output),
            "output": output, "restored": restored}


def passing(output: str) -> int:
    """How many tests passed, from unittest's or pytest's summary (0 when it cannot tell)."""
    pytest_passed = re.search(r"(\d+) passed", output)
    if pytest_passed:
        return int(pytest_passed.group(1))
    ran = re.search(r"Ran (\d+) tests?", output)
    if not ran:
        return 0
    failed = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", output))
    return int(ran.group(1)) - failed
