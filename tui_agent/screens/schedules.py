"""Schedules: each schedule with its cron, next fire (in the schedule's own zone), missed and overlap
policy and whether it is enabled; enter opens one (its next fires, runs and events); enable, disable
and fire now (asked first) act through operate.py."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Label, Static

from .. import operate
from ..format import countdown, in_zone, zoned
from ..messages import DataChanged
from ..runtime.clock import now
from ..runtime.schedule import fires
from ..session import Reads
from ..store import Store
from ..store.runs import RunNotFound, get_run
from ..store.schedules import listing as schedule_listing
from ..store.schedules import recent_runs, schedule_events
from ..widgets.safe import safe
from ..widgets.status import badge, mark_of, style_of
from ..widgets.theme import Palette, follow_theme, palette, style
from .modals import ConfirmModal
from .situation import workers_alive
from .table import TableScreen

# The columns a person scans first come first: at 80 columns the rest scroll, and the strip under the
# table spells out every field of the selected schedule.
COLUMNS = [("NAME", "name"), ("CRON", "cron"), ("NEXT FIRE", "next"), ("ENABLED", "enabled"), ("LAST RUN", "last"),
           ("AGENT", "agent"), ("ZONE", "tz"), ("MISSED", "missed"), ("OVERLAP", "overlap")]
MISSED_MEANS = {"skip": "fires missed while no worker ran are dropped",
                "once": "only the latest missed fire runs",
                "all": "every missed fire runs"}
OVERLAP_MEANS = {"skip": "a fire during an unfinished run is skipped",
                 "wait": "a fire during an unfinished run waits for it",
                 "allow": "fires run alongside unfinished runs"}


LATE, ON, OFF = "text-warning", "text-success", "text-muted"   # overdue or waiting on a person; enabled; disabled


class SchedulesScreen(TableScreen):
    COLUMNS = COLUMNS
    TABLE_ID = "schedules"
    STRIP_ID = "schedule-strip"
    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("e", "enable", "Enable"),
        Binding("d", "disable", "Disable"),
        Binding("F", "fire", "Fire now", key_display="F"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[dict] = []
        self._last: dict[str, Mapping[str, Any] | None] = {}      # each schedule's last run, when it still exists

    def on_mount(self) -> None:
        self.reload_now()
        self.table.focus()
        self.set_interval(1.0, self._count_down)

    def _count_down(self) -> None:
        """"in 14m 33s" moves on even when nothing was written."""
        if self.is_current:
            self._explain()

    # -- data -----------------------------------------------------------------------------------

    def load(self, store: Store) -> tuple[list[dict], dict[str, Mapping[str, Any] | None], int]:
        rows = schedule_listing(store)
        return rows, {row["name"]: _run(store, row["last_run_id"]) for row in rows}, workers_alive(store)

    def show(self, loaded: tuple[list[dict], dict[str, Mapping[str, Any] | None], int]) -> None:
        """Repaint the schedules read in one batch, keeping the cursor on the same schedule."""
        table = self.table
        selected = self.selected_key()
        old_index = table.cursor_row
        self._rows, self._last, alive = loaded
        at, colours = now(), palette(self.app)
        with self.app.batch_update():
            table.clear()
            for row in self._rows:
                table.add_row(*self._cells(row, at, colours), key=row["name"])
            names = [row["name"] for row in self._rows]
            if selected in names:
                table.move_cursor(row=names.index(selected), animate=False)
            elif names:
                table.move_cursor(row=min(old_index, len(names) - 1), animate=False)
        enabled = sum(1 for row in self._rows if row["enabled"])
        summary = Text(f"Schedules · {self.session.label} · {len(self._rows)} ({enabled} enabled) · ")
        summary.append("running workers fire them" if alive else "no worker running: nothing fires (w, +)",
                       style="" if alive else style(colours, LATE))
        self.summary.text = summary
        self._explain()

    def _cells(self, row: dict, at: float, colours: Palette) -> list:
        enabled = bool(row["enabled"])
        if enabled and row["next_fire_at"]:
            zone_name = in_zone(row["next_fire_at"], row["tz"]).strftime("%Z")
            next_fire = Text(f"{zoned(row['next_fire_at'], row['tz'], at)} {zone_name}",
                             style=style(colours, LATE) if row["next_fire_at"] < at else "")  # overdue: none fired it
        else:
            next_fire = Text("–", style="dim")
        last = self._last.get(row["name"])
        if last is not None:
            last_cell = Text.assemble(last["id"], " ", (mark_of(last["status"], last["reason"]),
                                                         style_of(last["status"], last["reason"], colours)))
        else:
            last_cell = Text(row["last_run_id"] or "–", style="dim")
        cells = {"name": row["name"], "cron": row["cron"], "next": next_fire,
                 "enabled": Text("yes", style=style(colours, ON)) if enabled else
                 Text("no", style=style(colours, OFF, bold=True)),
                 "last": last_cell, "agent": row["agent"], "tz": row["tz"], "missed": row["missed"],
                 "overlap": row["overlap"]}
        return [safe(cells[key]) for _, key in COLUMNS]       # a schedule's name, agent and zone are stored text

    def _explain(self) -> None:
        row = self.selected()
        if row is None:
            self.strip.text = ("No schedules yet: add one from a shell, for example\n"
                               "tui-agent schedule add NAME --agent AGENT --cron '0 2 * * *'")
            return
        at, colours = now(), palette(self.app)
        name = row["name"]
        request = row["input"] if len(row["input"]) <= 40 else row["input"][:39] + "…"
        text = Text(f"{name} · {row['agent']} {request} · ")
        if row["enabled"] and row["next_fire_at"]:
            fire = in_zone(row["next_fire_at"], row["tz"])
            if row["next_fire_at"] >= at:
                text.append(f"next fire {fire.strftime('%Y-%m-%d %H:%M %Z')} "
                            f"(in {countdown(row['next_fire_at'] - at)})")
            else:
                text.append(f"due since {zoned(row['next_fire_at'], row['tz'], at)} {fire.strftime('%Z')} "
                            f"({countdown(at - row['next_fire_at'])} ago): fires once a worker runs",
                            style=style(colours, LATE))
        else:
            text.append("disabled: it does not fire", style=style(colours, OFF, bold=True))
        text.append("\n")
        last = self._last.get(name)
        if last is not None:
            text.append(f"last run {last['id']} ")
            text.append_text(badge(last["status"], last["reason"], colours))
            if row["pending_fire_at"]:
                text.append(f" · the fire at {zoned(row['pending_fire_at'], row['tz'], at)} waits for it")
            text.append(" · ")
        text.append("enter shows its fires, runs and events · F fires it now · "
                    + ("d disables" if row["enabled"] else "e enables") + "\n")
        text.append(f"missed={row['missed']}: {MISSED_MEANS.get(row['missed'], '?')} · "
                    f"overlap={row['overlap']}: {OVERLAP_MEANS.get(row['overlap'], '?')}", style="dim")
        self.strip.text = text                # the countdown repaints only when a figure moved

    def selected(self) -> dict | None:
        name = self.selected_key()
        return next((row for row in self._rows if row["name"] == name), None)

    # -- events ---------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._explain()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    # -- actions --------------------------------------------------------------------------------

    def _with_schedule(self) -> dict | None:
        row = self.selected()
        if row is None:
            self.notify("no schedule selected" if self._rows else "no schedules yet: tui-agent schedule add makes one",
                        severity="warning")
        return row

    def _switch(self, enabled: bool) -> None:
        row = self._with_schedule()
        if row is None:
            return
        name = row["name"]
        if bool(row["enabled"]) == enabled:
            self.notify(f"{name} is {'enabled' if enabled else 'disabled'} already")
            return

        def done(_) -> str:
            if not enabled:
                return f"{name} disabled; it does not fire until enabled again"
            try:
                fresh = next(r for r in schedule_listing(self.session.reader) if r["name"] == name)
                return (f"{name} enabled; next fire {zoned(fresh['next_fire_at'], fresh['tz'], now())} "
                        f"{fresh['tz']} (fires while it was disabled never count)")
            except StopIteration:
                return f"{name} enabled"

        self.session.act(operate.schedule_enable, name, enabled, done=done)

    def action_enable(self) -> None:
        self._switch(True)

    def action_disable(self) -> None:
        self._switch(False)

    def action_open(self) -> None:
        row = self._with_schedule()
        if row is not None:
            self.app.push_screen(ScheduleDetail(row["name"]), lambda fire: self.action_fire() if fire else None)

    def action_fire(self) -> None:
        """Fire the selected schedule now, once the person confirms; the toast says what the fire did."""
        row = self._with_schedule()
        if row is None:
            return
        name = row["name"]

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.session.act(operate.schedule_fire, self.session.registry, name,
                             done=lambda fired: str(fired) + ("; a worker will pick it up" if fired.started else ""))

        question = (f"Start a run of {row['agent']} now? overlap={row['overlap']}: "
                    f"{OVERLAP_MEANS.get(row['overlap'], '?')}.")
        self.app.push_screen(ConfirmModal(f"Fire {name} now?", question, "Fire it now", "Don't fire"), confirmed)


def _run(store: Store, run_id: str | None) -> Mapping[str, Any] | None:
    """A schedule's last run, when it still exists."""
    if not run_id:
        return None
    try:
        return get_run(store, run_id)
    except RunNotFound:
        return None


class ScheduleDetail(Reads, ModalScreen):
    """One schedule: its next fires in its own zone, the runs its fires started and its events.
    escape closes; F closes and fires it (asking first)."""

    BINDINGS = [Binding("escape", "close", "Close"), Binding("F", "fire", "Fire now", key_display="F"),
                Binding("down,j", "scroll_body(1)", "Scroll down", show=False),
                Binding("up,k", "scroll_body(-1)", "Scroll up", show=False)]
    FIRES = 5
    AUTO_FOCUS = "#close"

    def __init__(self, name: str) -> None:
        super().__init__()
        self.schedule_name = name

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide", id="schedule-detail"):
            yield Label(safe(f"Schedule {self.schedule_name}"), classes="title")
            with VerticalScroll(id="schedule-detail-body"):
                yield Static(id="schedule-detail-text")
            with Horizontal(classes="buttons"):
                yield Button("Fire now…", id="fire")
                yield Button("Close", variant="primary", id="close")

    def on_mount(self) -> None:
        self.show(self.load(self.session.reader))
        follow_theme(self, self.reload)

    def on_data_changed(self, message: DataChanged) -> None:
        self.reload()

    def reload(self) -> None:
        self.session.read(self, "reload", self.load, self.show)

    def load(self, store: Store) -> tuple[dict | None, list[dict], list[dict]]:
        row = next((r for r in schedule_listing(store) if r["name"] == self.schedule_name), None)
        if row is None:
            return None, [], []
        return row, recent_runs(store, self.schedule_name), schedule_events(store, self.schedule_name)

    def show(self, loaded: tuple[dict | None, list[dict], list[dict]]) -> None:
        row, runs, events = loaded
        self.query_one("#schedule-detail-text", Static).update(safe(
            self.describe(row, runs, events, now(), palette(self.app))
            if row is not None else Text(f"{self.schedule_name} was removed", style="dim")))

    def describe(self, row: dict, runs: list[dict], events: list[dict], at: float, colours: Palette) -> Text:
        tz = row["tz"]
        text = Text(f"{row['agent']} {row['input']} · cron {row['cron']} · {tz}\n")
        text.append(f"missed={row['missed']}: {MISSED_MEANS.get(row['missed'], '?')}\n"
                    f"overlap={row['overlap']}: {OVERLAP_MEANS.get(row['overlap'], '?')}\n", style="dim")
        text.append(f"\nNext fires ({tz})\n", style="bold")
        if not row["enabled"]:
            text.append("  disabled: it does not fire (e enables it)\n", style=style(colours, OFF, bold=True))
        else:
            if row["next_fire_at"] and row["next_fire_at"] < at:
                text.append(f"  due since {zoned(row['next_fire_at'], tz, at)}: fires once a worker runs\n",
                            style=style(colours, LATE))
            for fire in islice(fires(row["cron"], tz, at, float("inf")), self.FIRES):
                text.append(f"  {in_zone(fire, tz).strftime('%a %Y-%m-%d %H:%M %Z')}   in {countdown(fire - at)}\n")
        text.append("\nRecent runs\n", style="bold")
        for run in runs:
            text.append(f"  {run['id']}  ")
            text.append_text(badge(run["status"], run["reason"], colours))
            text.append(f"  started {zoned(run['created_at'], tz, at)}\n", style="dim")
        if not runs:
            text.append("  none yet\n", style="dim")
        text.append("\nEvents, newest first\n", style="bold")
        for event in events:
            text.append(f"  {zoned(event['at'], tz, at)}  ", style="dim")
            text.append(f"{event['message']}\n", style=style(colours, LATE) if event["kind"] == "needs_person" else "")
        if not events:
            text.append("  none yet\n", style="dim")
        text.rstrip()
        return text

    @on(Button.Pressed, "#fire")
    def _fire(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#close")
    def _close(self) -> None:
        self.dismiss(False)

    def action_scroll_body(self, lines: int) -> None:
        """On a small terminal the detail scrolls while the focus stays on Close."""
        self.query_one("#schedule-detail-body").scroll_relative(y=lines, animate=False)

    def action_close(self) -> None:
        self.dismiss(False)

    def action_fire(self) -> None:
        self.dismiss(True)
