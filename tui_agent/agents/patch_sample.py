"""Patch's sample repository and its offline script: a tiny package with one bug, a failing test and an issue
file, made on first use in the data folder, and the scripted replies that fix it through Patch's own tools.
So `tui-agent start patch && tui-agent worker --once` works on a fresh install with no key."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..errors import ParkRun, PermanentError

SAMPLE_MARK = "(the sample repository)"
ISSUE = "issues/mean-is-wrong.md"
BUGGY = '''"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) / (len(values) - 1)


def spread(values):
    """The difference between the largest and the smallest value."""
    return max(values) - min(values)
'''
FIXED = BUGGY.replace("sum(values) / (len(values) - 1)", "sum(values) / len(values)")
FILES = {
    ".gitignore": "__pycache__/\n",
    "README.md": "# calc\n\nSmall statistics helpers. Run the tests with `python -m unittest`.\n",
    "calc/__init__.py": "",
    "calc/stats.py": BUGGY,
    "tests/__init__.py": "",
    "tests/test_stats.py": '''import unittest

from calc.stats import mean, spread


class StatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([2, 4, 6]), 4)

    def test_mean_of_one_value(self):
        self.assertEqual(mean([5]), 5)

    def test_spread(self):
        self.assertEqual(spread([3, 9, 1]), 8)
''',
    ISSUE: '''# mean() is wrong

`calc.stats.mean([2, 4, 6])` returns 6.0, not 4, and `mean([5])` raises ZeroDivisionError.
The mean is the sum divided by the number of values. `tests/test_stats.py` shows the expected results.
''',
}


def sample_repo(data_dir: Path) -> Path:
    """The sample repository (made, with one commit, on first use)."""
    return made_once(data_dir / "patch" / "sample", FILES, "calc: statistics helpers", "patch")


def made_once(repo: Path, files: dict[str, str], message: str, agent: str) -> Path:
    """A sample repository of `files` with one commit (`message`), made unless it is there already; `agent` is
    named in the refusal when git is missing."""
    if (repo / ".git").is_dir():
        return repo
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    git = ["git", "-c", "user.name=tui-agent", "-c", "user.email=tui-agent@localhost", "-c", "init.defaultBranch=main"]
    try:
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", message]):
            subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise PermanentError(f"{agent} needs git to make its sample repository ({e}); install git") from None
    return repo


def _use(name: str, args: dict) -> dict:
    return {"content": [{"type": "tool_use", "name": name, "input": args}]}


STEPS = [_use("list_files", {"path": "."}), _use("read_file", {"path": "calc/stats.py"}),
         _use("write_file", {"path": "calc/stats.py", "content": FIXED}), _use("run_tests", {})]


def script(messages: list[dict], max_tokens: int, call_index: int) -> str | dict:
    """The offline model: it knows how to fix the sample bug, and nothing else."""
    first = messages[0]["content"]
    if SAMPLE_MARK not in (first if isinstance(first, str) else str(first)):
        raise ParkRun("without ANTHROPIC_API_KEY, Patch works only on its sample repository (its offline script "
                      "fixes that bug alone); set ANTHROPIC_API_KEY on the worker so Claude does the work")
    if call_index < len(STEPS):
        return STEPS[call_index]
    return "Fixed calc.stats.mean: it divided by len(values) - 1; it divides by len(values) now. The tests pass."
