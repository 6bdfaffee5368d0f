"""The harness's sample repository and its offline script: a tiny package with a plan of three tasks, each with a
failing test of its own, made on first use in the data folder, and the scripted replies with which the built-in
model worker does each task through `patch`'s tools. So `tui-agent start harness && tui-agent worker --once` works
on a fresh install with no key."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from ..errors import ParkRun
from .patch_sample import made_once

SAMPLE_MARK = "(the harness's sample repository)"
CHECK = [sys.executable, "-m", "unittest"]   # the sample brings its own check: this Python's unittest
STATS = '''"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) / (len(values) - 1)
'''
# each task's id, and the content of calc/stats.py once it is done (each builds on the one before)
DONE = {
    "make-mean-divide-by-the-number-of-values": STATS.replace("(len(values) - 1)", "len(values)"),
}
DONE["add-median-the-middle-value-of-the-sorted-values"] = DONE["make-mean-divide-by-the-number-of-values"] + '''

def median(values):
    """The middle value of the sorted values (the mean of the two middle ones for an even count)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
'''
DONE["add-spread-the-largest-minus-the-smallest-value"] = DONE[
    "add-median-the-middle-value-of-the-sorted-values"] + '''

def spread(values):
    """The difference between the largest and the smallest value."""
    return max(values) - min(values)
'''
FILES = {
    ".gitignore": "__pycache__/\n",
    "PLAN.md": """# calc statistics

Three small functions, one per iteration.

- [ ] Make mean() divide by the number of values
  check: {python} -m unittest tests.test_mean
- [ ] Add median(): the middle value of the sorted values
  check: {python} -m unittest tests.test_median
- [ ] Add spread(): the largest minus the smallest value
  check: {python} -m unittest tests.test_spread
""",
    "PROGRESS.md": "# Progress\n",
    "RULES.md": "# Rules\n\n- Change calc/stats.py only.\n",
    "calc/__init__.py": "",
    "calc/stats.py": STATS,
    "tests/__init__.py": "",
    "tests/test_mean.py": '''import unittest

from calc.stats import mean


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([2, 4, 6]), 4)

    def test_mean_of_one_value(self):
        self.assertEqual(mean([5]), 5)
''',
    "tests/test_median.py": '''import unittest


class MedianTest(unittest.TestCase):
    def test_odd(self):
        from calc.stats import median
        self.assertEqual(median([3, 1, 2]), 2)

    def test_even(self):
        from calc.stats import median
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
''',
    "tests/test_spread.py": '''import unittest


class SpreadTest(unittest.TestCase):
    def test_spread(self):
        from calc.stats import spread
        self.assertEqual(spread([3, 9, 1]), 8)
''',
}


def sample_repo(data_dir: Path) -> Path:
    """The sample repository (made, with one commit, on first use)."""
    files = {name: text.replace("{python}", shlex.quote(sys.executable)) for name, text in FILES.items()}
    return made_once(data_dir / "harness" / "sample", files, "calc: a plan of three tasks", "the harness")


def script(messages: list[dict], max_tokens: int, call_index: int) -> str | dict:
    """The offline model: it knows how to do each task of the sample's plan, and nothing else. A conversation is
    one iteration: first it writes the task's code, then it ends its turn."""
    first = messages[0]["content"]
    text = first if isinstance(first, str) else str(first)
    task = re.search(r"\(id `([^`]+)`", text)
    if SAMPLE_MARK not in text or task is None or task[1] not in DONE:
        raise ParkRun("without ANTHROPIC_API_KEY, the harness's model worker works only on its sample repository "
                      "(its offline script knows those tasks alone); set ANTHROPIC_API_KEY on the worker, or give "
                      "the run a command-line coding agent: {\"worker\": {\"command\": [...]}}")
    if len(messages) == 1:
        return {"content": [{"type": "tool_use", "name": "write_file",
                             "input": {"path": "calc/stats.py", "content": DONE[task[1]]}}]}
    return f"Done: {task[1]}, in calc/stats.py."
