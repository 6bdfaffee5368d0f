"""The harness's check: a command run in the worktree through `ctx.run_command`'s program runner, read as a verdict.

The command gets a process group of its own, its output kept as an artifact, and is killed at its timeout. A
pytest command is given `--junitxml=FILE` and a unittest one `-v`, and read per test (`kind`); any other is
judged by its exit code. A test that passed before and fails now is a regression (`regressions`). The output
also tells of the coding agent's spend (`claude_cost`). Why: docs/architecture.md, section 8.1."""

from __future__ import annotations

import json
import re
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from ..runtime.context import Context, run_program
from ..runtime.plateau import fingerprint

PASS, FAIL = "pass", "fail"
_VERBOSE = re.compile(r"^(?P<name>\w+) \((?P<where>[\w.]+)\)(?:\n.*?)?? \.\.\. (?P<verdict>ok|FAIL|ERROR|skipped\b.*|"
                      r"expected failure|unexpected success)$", re.M)
_OUTPUT_LIMIT = 8 * 1024


def kind(argv: list[str]) -> str | None:
    """`pytest`, `unittest`, or None (judged by its exit code)."""
    program = Path(argv[0]).name if argv else ""
    if program.startswith("pytest") or any(argv[i:i + 2] == ["-m", "pytest"] for i in range(len(argv))):
        return "pytest"
    if any(argv[i:i + 2] == ["-m", "unittest"] for i in range(len(argv))):
        return "unittest"
    return None


def run_check(ctx: Context, name: str, tree: Path, argv: list[str], timeout_s: float | None) -> dict:
    """Run `argv` in `tree`, inside the journaled call in progress, and read its verdict.

    Returns {argv, exit, passed, tests ({test id: pass|fail}, or None when the command does not say), passing,
    failing, fingerprint, summary (the last lines of output), output (where the whole of it is kept)}. The
    fingerprint, which feeds the plateau detector, is the failing tests, or the exit code and the last line of
    output with its digits removed."""
    which = kind(argv)
    with tempfile.TemporaryDirectory(prefix="tui-agent-check-") as scratch:
        junit = Path(scratch) / "junit.xml"
        run = [*argv, f"--junitxml={junit}", "-p", "no:cacheprovider"] if which == "pytest" else argv
        if which == "unittest" and not {"-v", "--verbose"} & set(argv):
            run = [*argv, "-v"]
        done = run_program(ctx, name, run, tree, None, {"PYTHONDONTWRITEBYTECODE": "1"}, timeout_s, _OUTPUT_LIMIT)
        text = done["stdout"] + done["stderr"]
        tests = _junit(junit) if which == "pytest" else _verbose(text) if which == "unittest" else None
    passed = done["exit"] == 0
    lines = [line for line in text.splitlines() if line.strip()]
    counts: tuple[int, int] | tuple[None, None]
    if tests:
        failing = sorted(t for t, v in tests.items() if v == FAIL)
        counts = (len(tests) - len(failing), len(failing))
        said = "failing: " + ", ".join(failing) if failing else ""
    else:
        counts, said = (None, None), ""
    printed = said or (f"exit {done['exit']}: {fingerprint(lines[-1]) if lines else 'no output'}")
    return {"argv": argv, "exit": done["exit"], "passed": passed, "tests": tests or None, "passing": counts[0],
            "failing": counts[1], "fingerprint": None if passed else printed,
            "summary": "\n".join(lines[-30:]), "output": done["stdout_artifact"]}


def _junit(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError:
        return {}
    tests = {}
    for case in root.iter("testcase"):
        outcome = {child.tag for child in case}
        if "skipped" in outcome:
            continue
        tests[f"{case.get('classname', '')}::{case.get('name', '')}"] = FAIL if outcome & {"failure", "error"} else PASS
    return tests


def _verbose(text: str) -> dict[str, str]:
    tests = {}
    for match in _VERBOSE.finditer(text):
        verdict = match["verdict"]
        if verdict.startswith("skipped") or verdict == "expected failure":
            continue
        tests[match["where"]] = PASS if verdict == "ok" else FAIL
    return tests


def regressions(before: dict, after: dict) -> list[str]:
    """What passed in `before` (a check's result) and fails in `after`: the tests by id where both say them, else
    the whole check by its exit code."""
    if before.get("tests") and after.get("tests") is not None:
        return sorted(t for t, v in before["tests"].items() if v == PASS and after["tests"].get(t) != PASS)
    if before.get("passed") and not after.get("passed"):
        return [f"the check ({' '.join(after['argv'])}), which passed before"]
    return []


def claude_cost(stdout: str) -> float | None:
    """The cost that `claude -p --output-format json` prints, or None when it says none. It is `total_cost_usd`, or the
    older `cost_usd`, read from the whole output as one JSON object, or from its last line that is one."""
    for text in (stdout.strip(), *reversed(stdout.strip().splitlines())):
        try:
            said = json.loads(text)
        except ValueError:
            continue
        if isinstance(said, dict):
            for key in ("total_cost_usd", "cost_usd"):
                if isinstance(said.get(key), (int, float)):
                    return float(said[key])
    return None
