"""A harness run's plan, from what the run recorded (its checkpoint's next input, agents/harness.py's record):
each task ticked or open, the one its iteration works now marked. Never read from a checkout or a worktree. The
run screen shows it in a Caption (the tasks are the plan's words: shown `safe`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text

from .theme import OFFLINE, Palette, style


def recorded_plan(checkpoint: Mapping[str, Any]) -> tuple[list[list], dict] | None:
    """The plan's tasks ([text, ticked] each) and the record that holds them, or None for a run that keeps none."""
    record = checkpoint.get("next_input")
    if not isinstance(record, dict):
        return None
    plan = record.get("plan")
    return (plan, record) if isinstance(plan, list) and plan else None


def plan_text(plan: list[list], record: dict, colours: Palette = OFFLINE) -> Text:
    """`[x] text` for a ticked task, `[ ] text` for an open one; the task of an iteration under way (`pending`) in
    bold, with `◂ iteration N` after it."""
    text = Text()
    # the harness selects the first open task: while its iteration runs (`pending`), that is the one worked
    working = next((i for i, (_, ticked) in enumerate(plan) if not ticked), None) \
        if record.get("status") == "pending" else None
    for i, (task, ticked) in enumerate(plan):
        text.append("[x] " if ticked else "[ ] ", style=style(colours, "text-success") if ticked else "")
        text.append(task, style="dim" if ticked else "bold" if i == working else "")
        if i == working:
            text.append(f" ◂ iteration {record.get('iteration')}", style=style(colours, "text-secondary"))
        text.append("\n")
    text.rstrip()
    return text
