"""A line above the footer while an action is in flight on the session's actor thread: what it is doing."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class Pending(Static):
    """Hidden while nothing is pending; shows the App's `pending` actions (tui_agent/session.py) otherwise."""

    DEFAULT_CSS = """
    Pending { dock: bottom; height: 1; display: none; padding: 0 1; color: $text-warning; }
    Pending.-shown { display: block; }
    """

    def on_mount(self) -> None:
        self.watch(self.app, "pending", self._show)

    def _show(self, pending: tuple[str, ...]) -> None:
        self.set_class(bool(pending), "-shown")
        self.update(Text("deciding: " + " · ".join(pending) + "…" if pending else ""))
