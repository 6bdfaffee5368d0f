"""A run's events, newest at the bottom: the append-only progress log the runtime writes."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from .timeline import clock

STYLES = {"failed": "bold #ff5f5f", "succeeded": "#4ec94e", "parked": "#8a8a8a", "cancelled": "dim",
          "claimed": "#4aa3ff", "takeover": "#4aa3ff"}


def _epoch(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def event_line(event: dict) -> Text:
    line = Text()
    line.append(f"{clock(_epoch(event['at']))} ", style="dim")
    style = STYLES.get(event["kind"], "")
    if event["kind"] == "waiting" and event["message"].startswith("needs a person"):
        style = "#ffb000"
    line.append(event["message"], style=style)
    return line


class EventsLog(VerticalScroll):
    """`set_events(report["events"])`; follows the newest event while the view is at the bottom."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.events: list[dict] = []
        self.text = Text()

    def compose(self):
        yield Static(id="events-body")

    def set_events(self, events: list[dict]) -> None:
        if events == self.events:
            return
        follow = not self.events or self.scroll_y >= self.max_scroll_y - 1
        self.events = list(events)
        self.text = Text("\n").join(event_line(e) for e in events) if events else Text("no events", style="dim")
        self.query_one("#events-body", Static).update(self.text)
        if follow:
            self.call_after_refresh(self.scroll_end, animate=False)

    def on_show(self) -> None:
        """It opens at the newest event: a pane hidden behind a tab (small terminals) got its events
        while it could not scroll, and would otherwise open at the oldest."""
        self.call_after_refresh(self.scroll_end, animate=False)

    @property
    def plain(self) -> str:
        return self.text.plain
