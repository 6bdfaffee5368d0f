"""The harness's workspace files, as text: the plan, the progress log, the rulebook, the first prompt, the starters.

PLAN.md's tasks are Markdown checkboxes; PROGRESS.md holds one verified entry per task done, appended by the
harness; RULES.md one line per rule a person added after a real failure. Pure functions of text. A task is a
line `- [ ] text` (or `* [ ]`; ticked: `[x]`), its id its text's slug (an edited text is another task; two
tasks with one id are refused); `check: ARGS...` indented under it gives it a check, split as a shell would."""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass

_TASK = re.compile(r"^(?P<indent>\s*)[-*] \[(?P<mark>[ xX])\] (?P<text>.*\S)\s*$")
_CHECK = re.compile(r"^\s+check:\s*(?P<args>.*\S)\s*$")
_HEADING = re.compile(r"^#\s+(?P<text>.*\S)\s*$")
ENTRY = "## "   # a progress entry starts with this line


class PlanError(ValueError):
    """The plan cannot be worked as it is. Examples are two tasks with one id, or a check line that does not split.
    str(e) says what to change."""


@dataclass(frozen=True)
class Task:
    id: str
    text: str
    done: bool
    line: int                     # its index among the plan's lines
    check: list[str] | None = None

    def as_dict(self) -> dict:
        return {"id": self.id, "text": self.text, "done": self.done, "check": self.check}


def slug(text: str) -> str:
    """A task's id: its text in lower case, every run of other characters than letters and digits one `-`."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "task"


def tasks(plan: str) -> list[Task]:
    """The plan's tasks in order; PlanError when two share an id or a check line does not split."""
    found: list[Task] = []
    lines = plan.splitlines()
    for i, line in enumerate(lines):
        match = _TASK.match(line)
        if match is None:
            continue
        check = None
        below = lines[i + 1] if i + 1 < len(lines) else ""
        if (said := _CHECK.match(below)) and len(below) - len(below.lstrip()) > len(match["indent"]):
            try:
                check = shlex.split(said["args"])
            except ValueError as e:
                raise PlanError(f"the check under task {match['text']!r} does not split into arguments ({e}); "
                                "fix its quotes in the plan") from None
        task = Task(slug(match["text"]), match["text"], match["mark"] != " ", i, check)
        if any(t.id == task.id for t in found):
            raise PlanError(f"two tasks of the plan have the same text ({task.text!r}, id {task.id}); give each task "
                            "its own text")
        found.append(task)
    return found


def heading(plan: str) -> str | None:
    """The plan's first `# heading`, or None."""
    return next((m["text"] for line in plan.splitlines() if (m := _HEADING.match(line))), None)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def ticked(plan: str, task: Task) -> str:
    """The plan with `task`'s box ticked, nothing else changed (its line endings included)."""
    lines = plan.splitlines(keepends=True)
    lines[task.line] = lines[task.line].replace("[ ]", "[x]", 1)
    return "".join(lines)


def entry(task: Task, place: tuple[int, int], *, iteration: int, verdict: str, diff: str, cost: str) -> str:
    """One verified progress entry: its task and verdict lines say what was done; the rest, how."""
    return (f"{ENTRY}{task.text}\n\n- task: `{task.id}` ({place[0]} of {place[1]})\n- verdict: {verdict}\n"
            f"- iteration: {iteration}\n- diff: {diff or 'no change'}\n- cost: {cost}\n")


def appended(progress: str, text: str) -> str:
    """The progress log with one more entry at its end, a blank line between."""
    return progress.rstrip("\n") + "\n\n" + text if progress.strip() else text


def tail(progress: str, count: int) -> str:
    """The last `count` entries of the progress log (not the whole file: a fresh worker that reads everything
    inherits the drift of the ones before it)."""
    lines = progress.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(ENTRY)]
    if not starts or count <= 0:
        return ""
    return "\n".join(lines[starts[-min(count, len(starts))]:]).strip() + "\n"


def with_rule(rules: str, rule: str) -> str:
    """The rulebook with `rule` as one more line (`- rule`) at its end."""
    line = "- " + " ".join(rule.split())
    return (rules.rstrip("\n") + "\n" if rules.strip() else "") + line + "\n"


def prompt(plan: str, task: Task, *, place: tuple[int, int], progress_tail: str, rules: str, failure: str | None,
           names: dict[str, str]) -> str:
    """What a fresh coding agent reads, small and in order. That is the plan with its task marked, where the task stands
    in the queue, the tail of the progress log, the rules, and how its last check failed."""
    marked = []
    for i, line in enumerate(plan.splitlines()):
        marked.append(f"{line}    <-- YOUR TASK" if i == task.line else line)
    parts = [
        f"You are one iteration of a loop that works the plan in {names['plan']}, one task at a time. Do the one "
        f"task marked below, in this working tree, then stop. The harness runs the check, decides whether the task "
        f"is done, ticks its box and writes {names['progress']}; do not commit, do not edit {names['plan']} or "
        f"{names['progress']}, and do not change the tests: they are the oracle, and they are restored before "
        "every check.",
        f"# The plan ({names['plan']})\n\n" + "\n".join(marked),
        f"# Your task: {place[0]} of {place[1]}\n\n{task.text}\n\n(id `{task.id}`"
        + (f"; its check: `{shlex.join(task.check)}`)" if task.check else ")"),
        f"# Progress so far (the last entries of {names['progress']})\n\n{progress_tail.strip() or '(none yet)'}",
        f"# Rules ({names['rules']})\n\n{rules.strip() or '(none yet)'}",
    ]
    if failure:
        parts.append(f"# The last check of this task failed\n\n{failure.strip()}")
    return "\n\n".join(parts) + "\n"


def starter_plan(title: str) -> str:
    return (f"# {title}\n\nThe plan the harness works through, one task per iteration, top to bottom. Each task is a "
            "checkbox; the harness ticks it once the task's check passes (the coding agent never does). A line\n"
            "`check: ARGS...` indented under a task gives it a check of its own.\n\n"
            "- [ ] Write the first task here, one thing a single iteration can do\n"
            "  check: python -m pytest -q tests/test_first.py\n")


STARTER_PROGRESS = ("# Progress\n\nThe harness appends one verified entry per task done: the task, its verdict, "
                    "the iteration, the diff stat and the cost.\n")
STARTER_RULES = ("# Rules\n\nEvery line here was earned by a real failure. Add one with `tui-agent harness rule RUN "
                 "\"text\"`.\n")
