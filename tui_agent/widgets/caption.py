"""A line or two of text that is said again on a timer (a countdown, "3 min ago", a worker's age): it
repaints only when what it says changed, which the reactive's comparison decides. What it says holds the runs'
own text (an agent's name, a park message, a question), so it is shown `safe`: never read as markup."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from .safe import safe


class Caption(Static):
    text: reactive[str | Text] = reactive("", init=False)

    def watch_text(self, text: str | Text) -> None:
        self.update(safe(text))
