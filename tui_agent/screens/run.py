"""Run: understand one run and act on it. The timeline of its journal on the left, the selected entry
on the right; budget gauges, the effect ledger, the events and the checkpoint below (side by side on a
large terminal, as tabs on a small one). Reads through report.py and store queries; acts through
run_actions and operate.py; re-reads in place on DataChanged."""

from __future__ import annotations

import json

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Label, OptionList, ProgressBar, Static, Tab, Tabs

from ..errors import UserError
from ..messages import DataChanged
from ..report import effects_for, run_report
from ..runtime.clock import now
from ..states import IN_DOUBT, budget_dimension
from ..widgets.checkpoint import CheckpointView
from ..widgets.events import EventsLog
from ..widgets.footer import KeysFooter
from ..widgets.gauges import BudgetGauges
from ..widgets.journal import JournalViewer, human, raw
from ..widgets.ledger import EffectLedger
from ..widgets.status import badge
from ..widgets.theme import follow_theme, palette
from ..widgets.timeline import Timeline, TimelineItem, timeline_items
from . import run_actions
from .situation import situation

LOWER = [("budget", "Budget"), ("events", "Events"), ("ledger", "Effects"), ("checkpoint", "Checkpoint")]
WIDE_AT = (110, 32)          # below either (columns, rows), the lower panes become tabs


class RunScreen(run_actions.RunActionKeys, Screen):
    CSS_PATH = "run.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        *run_actions.bindings("resume", "park", "reconcile", "approve", "fork", "budget"),
        Binding("v", "toggle_json", "JSON"),
        *run_actions.bindings("cancel"),
        Binding("t", "next_pane", "Next pane"),     # only while the lower panes are tabs (check_action)
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]
    FOOTER = ("escape", "t", "r", "p", "x", "f", "b")   # what a narrow footer keeps longest (widgets/footer.py)

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.report: dict | None = None
        self.effects: list[dict] = []
        self.raw_json = False
        self.compact = True
        self.pane = "budget"
        self._arranged = False

    # -- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="run-header", classes="summary")
        with Horizontal(id="run-top"):
            with Vertical(id="timeline-pane", classes="pane") as pane:
                pane.border_title = "Timeline"
                with Horizontal(id="step-progress"):
                    yield Label(id="step-label")
                    yield ProgressBar(id="step-bar", show_eta=False, show_percentage=False)
                yield Timeline(id="timeline")
            viewer = JournalViewer(id="viewer", classes="pane")
            viewer.border_title = "Entry"
            yield viewer
        with Vertical(id="run-lower"):
            yield Tabs(*[Tab(label, id=f"tab-{key}") for key, label in LOWER], id="lower-tabs")
            with Horizontal(id="lower-columns"):
                for column, panes in (("lower-left", [("budget", "Budget", BudgetGauges(id="gauges")),
                                                      ("checkpoint", "Checkpoint", CheckpointView(id="checkpoint"))]),
                                      ("lower-right", [("ledger", "Effect ledger", EffectLedger(id="ledger")),
                                                       ("events", "Events", EventsLog(id="events"))])):
                    with Vertical(id=column, classes="lower-column"):
                        for key, title, widget in panes:
                            with Vertical(id=f"{key}-pane", classes="pane lower-pane") as pane:
                                pane.border_title = title
                                yield widget
        yield KeysFooter()

    # The panes, each used from several places.

    @property
    def timeline(self) -> Timeline:
        return self.query_one(Timeline)

    @property
    def viewer(self) -> JournalViewer:
        return self.query_one(JournalViewer)

    @property
    def ledger(self) -> EffectLedger:
        return self.query_one(EffectLedger)

    def on_mount(self) -> None:
        self._arrange(self.app.size.width, self.app.size.height)
        self.reload()
        self.timeline.focus()
        follow_theme(self, self.reload)

    def on_resize(self, event) -> None:
        self._arrange(event.size.width, event.size.height)

    def _arrange(self, width: int, height: int) -> None:
        """Side by side when there is room; otherwise one lower pane at a time, chosen with tabs."""
        compact = width < WIDE_AT[0] or height < WIDE_AT[1]
        changed = compact != self.compact or not self._arranged
        self._arranged = True
        self.compact = compact
        self.set_class(compact, "-compact")
        self.set_class(not compact, "-wide")
        self.query_one("#lower-tabs").display = compact
        left = {"budget", "checkpoint"}
        for key, _ in LOWER:
            self.query_one(f"#{key}-pane").display = not compact or key == self.pane
        self.query_one("#lower-left").display = not compact or self.pane in left
        self.query_one("#lower-right").display = not compact or self.pane not in left
        if changed:
            self.refresh_bindings()

    # -- data -----------------------------------------------------------------------------------

    def reload(self) -> None:
        """Re-read the run and repaint what changed, keeping the selected entry."""
        reader = self.app.reader
        try:
            report = run_report(reader, self.run_id)
        except UserError as e:
            self.notify(str(e), severity="error")
            return
        self.report, self.effects = report, effects_for(reader, self.run_id)
        at, colours = now(), palette(self.app)
        run = report["run"]
        with self.app.batch_update():
            self._header(report)
            self._progress(report["checkpoint"])
            self.timeline.set_items(timeline_items(report, self.effects))
            self._show_selected()
            # a budget reason is only ever written by the stop (waiting, parked or failed on that dimension)
            self.query_one(BudgetGauges).set_budget(report["budget"], budget_dimension(run["reason"]))
            self.ledger.set_effects(self.effects, run["generation"], at)
            self.query_one(EventsLog).set_events(report["events"], colours)
            self.query_one(CheckpointView).set_report(report, colours)
            self._titles(report)

    def _header(self, report: dict) -> None:
        run = report["run"]
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(run["id"], style="bold")
        line.append(f" · {run['agent']} v{run['agent_version']} · ")
        line.append_text(badge(run["status"], run["reason"], palette(self.app)))
        line.append(f" · attempt {run['attempt']}")
        if run.get("worker"):
            line.append(f" · {run['worker']}")
        if run.get("parent_id"):
            line.append(f" · fork of {run['parent_id']} at #{run['fork_step']}")
        line.append(" · ")
        line.append(json.dumps(run["request"], separators=(",", ":"), ensure_ascii=False), style="dim")
        self.query_one("#run-header", Static).update(line)

    def _progress(self, checkpoint: dict) -> None:
        total, step = checkpoint.get("total_steps"), checkpoint.get("current_step") or 0
        row = self.query_one("#step-progress")
        row.display = bool(total)
        if total:
            self.query_one("#step-label", Label).update(f"step {step}/{total} ")
            self.query_one("#step-bar", ProgressBar).update(total=total, progress=min(step, total))

    def _titles(self, report: dict) -> None:
        generation = report["run"]["generation"]
        entries = sum(1 for e in report["journal"] if e["generation"] == generation)
        self.query_one("#timeline-pane").border_title = f"Timeline · {entries} entr{'y' if entries == 1 else 'ies'}"
        doubtful = sum(1 for e in self.effects if e["generation"] == generation and e["state"] in IN_DOUBT)
        self.query_one("#ledger-pane").border_title = f"Effect ledger · {len(self.effects)}" + (
            f" · {doubtful} in doubt" if doubtful else "")
        self.query_one("#events-pane").border_title = f"Events · {len(report['events'])}"

    def _show_selected(self) -> None:
        viewer, item = self.viewer, self.timeline.selected
        if item is None or self.report is None:
            viewer.border_title = "Entry"
            viewer.show(Text("nothing recorded yet", style="dim"), None)
            return
        viewer.border_title = f"#{item.position} {item.name} · {item.kind if item.kind != 'pending' else item.note}"
        viewer.border_subtitle = "raw JSON · v" if self.raw_json else "v raw JSON"
        if self.raw_json:
            text = raw(item, self.report)
        else:
            text = human(item, self._situation() if item.pending else "", now(), palette(self.app))
        viewer.show(text, (item.key, self.raw_json))

    def _situation(self) -> str:
        """Where the run stands, in a sentence, and the last thing that happened to it."""
        text = situation(self.app.reader, self.run_id)
        events = self.report["events"] if self.report else []
        if events and events[-1]["message"] not in text:
            text += f"\n\nlast event: {events[-1]['message']}"
        return text

    # -- events ---------------------------------------------------------------------------------

    def on_data_changed(self, message: DataChanged) -> None:
        self.reload()

    def on_screen_resume(self) -> None:
        self.reload()

    @on(OptionList.OptionHighlighted, "#timeline")
    def _highlighted(self) -> None:
        self._show_selected()

    @on(EffectLedger.RowSelected, "#ledger")
    def _open_effect(self) -> None:
        """enter on a ledger row shows its entry in the timeline (when it is of this generation)."""
        at = self.ledger.position_at_cursor()
        if at and self.report and at[0] == self.report["run"]["generation"]:
            if self.timeline.select_key(f"p{at[1]}"):
                self.timeline.focus()

    @on(Tabs.TabActivated, "#lower-tabs")
    def _show_pane(self, event: Tabs.TabActivated) -> None:
        if event.tab is not None and event.tab.id:
            self.pane = event.tab.id.removeprefix("tab-")
            self._arrange(self.size.width or self.app.size.width, self.size.height or self.app.size.height)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "next_pane":
            return self.compact
        return True

    # -- actions --------------------------------------------------------------------------------

    @property
    def selected(self) -> TimelineItem | None:
        return self.timeline.selected

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_cursor_down(self) -> None:
        self.timeline.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.timeline.action_cursor_up()

    def action_toggle_json(self) -> None:
        self.raw_json = not self.raw_json
        self._show_selected()

    def action_next_pane(self) -> None:
        tabs = self.query_one(Tabs)
        keys = [key for key, _ in LOWER]
        tabs.active = f"tab-{keys[(keys.index(self.pane) + 1) % len(keys)]}"

    def run_target(self) -> tuple[str, TimelineItem | None]:
        """This run, and the timeline's selected position (a fork starts there, a doubtful effect is reconciled)."""
        return self.run_id, self.selected
