"""A run's events, newest at the bottom: the append-only progress log the runtime writes."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

from ..format import clock
from ..runtime.clock import now, parse_instant
from ..states import RunStatus
from .safe import safe
from .status import NEEDS_YOU, TONES
from .theme import OFFLINE, Palette, style

# An event that ends or parks the run is painted as the status it gave it, a claim as running; the rest
# (queued, a wait on time, progress) stay plain so those stand out.
KIND_TONES = {kind: TONES[kind] for kind in (RunStatus.FAILED, RunStatus.SUCCEEDED, RunStatus.PARKED,
                                             RunStatus.CANCELLED)} | {
    "claimed": TONES[RunStatus.RUNNING], "takeover": TONES[RunStatus.RUNNING]}
NO_EVENTS = Text("no events", style="dim")


def event_line(event: dict, at: float, colours: Palette = OFFLINE) -> Text:
    line = Text()
    line.append(f"{clock(parse_instant(event['at']), at)} ", style="dim")
    tone = KIND_TONES.get(event["kind"], "")
    if event["kind"] == RunStatus.WAITING and event["message"].startswith("needs a person"):
        tone = NEEDS_YOU
    line.append(event["message"], style=style(colours, tone, bold=event["kind"] == RunStatus.FAILED))
    return line


class EventsLog(VerticalScroll):
    """The run's events, a stretch at a time, given by `set_events(events, colours, newest=...)`.

    It follows the newest event while the view is at the bottom and the stretch holds it (`newest`). Scrolled to an end
    of a stretch that does not hold the run's first or newest event, it posts `Edge` for the screen to read on."""

    text: reactive[Text] = reactive(Text, init=False)    # repainted only when the log or its colours changed

    @dataclass
    class Edge(Message):
        direction: int          # -1: the top (older events), 1: the bottom (newer ones)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.newest = True

    def compose(self):
        yield Static(id="events-body")

    def set_events(self, events: list[dict], colours: Palette = OFFLINE, newest: bool = True) -> None:
        at = now()
        self.newest = newest
        self.text = safe(Text("\n").join(event_line(e, at, colours) for e in events)) if events else NO_EVENTS

    def watch_text(self, old: Text, text: Text) -> None:
        follow = self.newest and (old is NO_EVENTS or not old or self.scroll_y >= self.max_scroll_y - 1)
        self.query_one("#events-body", Static).update(text)
        if follow:
            self.call_after_refresh(self.scroll_end, animate=False)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if self.max_scroll_y and new != old and (new <= 0 or new >= self.max_scroll_y):
            self.post_message(self.Edge(-1 if new <= 0 else 1))

    def on_show(self) -> None:
        """It opens at the newest event: a pane hidden behind a tab (small terminals) got its events
        while it could not scroll, and would otherwise open at the oldest."""
        if self.newest:
            self.call_after_refresh(self.scroll_end, animate=False)

    @property
    def plain(self) -> str:
        return self.text.plain
