"""Run: understand one run and act on it.

The timeline of its journal on the left, the selected entry on the right; budget gauges, the effect ledger,
the events and the checkpoint below (side by side on a large terminal, as tabs on a small one). Reads through
report.py, on the session's reader thread after DataChanged; acts through run_actions and operate.py. It holds
a page of each list at a time (paging.Window), so a 100,000-step run opens reading one page of each."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from functools import partial

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Label, OptionList, Static, Tab, Tabs

from ..errors import UserError
from ..format import held_by
from ..messages import DataChanged, Replayed
from ..paging import Window
from ..report import (
    beside,
    iso_times,
    next_for_person,
    retry_said,
    retry_wait,
    run_view,
    timeline_page,
    with_artifact,
    worker_log,
)
from ..runtime.clock import now
from ..safe_text import json_text
from ..services.worktrees import recorded as recorded_worktree
from ..states import TERMINAL, budget_dimension
from ..store import Store
from ..store.effects import effects_page
from ..store.events import events_page, last_event
from ..store.rows import EffectRow
from ..store.runs import data_version
from ..widgets.caption import Caption
from ..widgets.checkpoint import CheckpointView
from ..widgets.events import EventsLog
from ..widgets.footer import KeysFooter
from ..widgets.gauges import BudgetGauges, StepBar
from ..widgets.journal import JournalViewer, human, raw
from ..widgets.ledger import EffectLedger
from ..widgets.pending import Pending
from ..widgets.plan import plan_text, recorded_plan
from ..widgets.safe import safe
from ..widgets.status import badge
from ..widgets.theme import follow_theme, palette
from ..widgets.timeline import Timeline, TimelineItem, timeline_items
from . import run_actions
from .modals import GotoModal, LogModal
from .replay import DivergenceModal, reproduced_line, start_replay
from .situation import situation

PAGE = 100                   # rows a list reads at a time; it holds three pages at most
NEAR = 5                     # the cursor this close to a held end reads the next page
LOWER = [("budget", "Budget"), ("plan", "Plan"), ("events", "Events"), ("ledger", "Effects"),
         ("checkpoint", "Checkpoint")]    # the plan only for a run that records one (a harness run's)
LEFT = {"budget", "plan", "checkpoint"}
WIDE_AT = (110, 32)          # below either (columns, rows), the lower panes become tabs


def _steps(store: Store, run: dict, after: int | None, limit: int, newest_first: bool) -> list[dict]:
    return timeline_page(store, run, after, limit, newest_first)


def _events(store: Store, run_id: str, after: int | None, limit: int, newest_first: bool) -> list[dict]:
    return [iso_times(e) for e in events_page(store, run_id, after, limit, newest_first)]


def _effects(store: Store, run_id: str, after: tuple[int, int] | None, limit: int,
             newest_first: bool) -> list[EffectRow]:
    return effects_page(store, run_id, after, limit, newest_first)


def _situation(store: Store, run_id: str) -> str:
    """Where the run stands, in a sentence, and the last thing that happened to it."""
    text = situation(store, run_id)
    last = last_event(store.conn, run_id)
    if last and last["message"] not in text:
        text += f"\n\nlast event: {last['message']}"
    return text


def _held(window: Window) -> tuple:
    """Where a window stands: a reload adopts what it read only for a window no key has moved since."""
    return (window.key(window.rows[0]) if window.rows else None, window.key(window.rows[-1]) if window.rows else None,
            window.at_start, window.at_end)


class RunScreen(run_actions.RunActionKeys, Screen):
    CSS_PATH = "run.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        *run_actions.bindings("resume", "park", "reconcile", "approve", "fork", "budget"),
        Binding("e", "edit_fork", "Edit the selected step or reply, then fork", show=False),
        Binding("v", "toggle_json", "JSON"),
        *run_actions.bindings("cancel"),
        Binding("u", "rule", "Add a rule (a harness run)", show=False),
        Binding("t", "next_pane", "Next pane"),     # only while the lower panes are tabs (check_action)
        Binding("N", "next_for_person", "Needs you"),
        Binding("d", "diff", "Diff with…", show=False),
        Binding("g", "go_to", "Go to"),
        Binding("R", "replay", "Replay"),
        Binding("W", "remove_worktree", "Remove worktree"),   # only on a coding run's screen (check_action)
        Binding("home", "first", "First/last", key_display="home/end"),
        Binding("end", "last", "Last entry", show=False),
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]
    FOOTER = ("escape", "t", "r", "p", "x", "f", "b")   # what a narrow footer keeps longest (widgets/footer.py)

    compact: reactive[bool] = reactive(True, init=False)    # the lower panes as tabs (WIDE_AT), one shown
    pane: reactive[str] = reactive("budget", init=False)     # the lower pane shown while they are tabs
    raw_json: reactive[bool] = reactive(False, init=False)   # the entry as its stored JSON (v)
    planned: reactive[bool] = reactive(False, init=False)    # the run records a plan: the Plan pane is shown

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.view: dict | None = None       # report.run_view: the run, its checkpoint, budget and counts
        self.steps = Window(lambda *page: _steps(self.session.reader, self.painted["run"], *page),
                            key=lambda row: row["position"], page=PAGE)
        self.events = Window(partial(self._on_loop, _events), key=lambda event: event["id"], page=PAGE)
        self.effects = Window(partial(self._on_loop, _effects), key=lambda e: (e["generation"], e["position"]),
                              page=PAGE)
        self._version: int | None = None     # the database's data_version when last read
        self._claimable_at = 0.0              # when a claim may take the run from a worker that is gone
        self._artifact: tuple[str | None, object] = (None, None)    # (path, result) of the entry last shown
        self._said = ""                       # where the run stands (situation), read with the view
        self._replaying: threading.Thread | None = None   # the thread of the replay `R` started, while its code runs
        self._worktree: dict | None = None    # the worktree the run recorded (worktrees.recorded), once it has

    # -- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        compact = self._compact_at(self.app.size.width, self.app.size.height)
        self.set_class(compact, "-compact", update=False)   # the panes' styles are worked out once, as they mount
        self.set_class(not compact, "-wide", update=False)
        yield Static(id="run-header", classes="summary")
        yield Static(id="run-worktree", classes="summary")   # a coding run's worktree and branch
        with Horizontal(id="run-top"):
            with Vertical(id="timeline-pane", classes="pane") as pane:
                pane.border_title = "Timeline"
                with Horizontal(id="step-progress"):
                    yield Label(id="step-label")
                    yield StepBar(id="step-bar")
                yield Timeline(id="timeline")
            viewer = JournalViewer(id="viewer", classes="pane")
            viewer.border_title = "Entry"
            yield viewer
        with Vertical(id="run-lower"):
            yield Tabs(*[Tab(label, id=f"tab-{key}") for key, label in LOWER], id="lower-tabs")
            with Horizontal(id="lower-columns"):
                for column, panes in (("lower-left", [("budget", "Budget", BudgetGauges(id="gauges")),
                                                      ("plan", "Plan", Caption(id="plan")),
                                                      ("checkpoint", "Checkpoint", CheckpointView(id="checkpoint"))]),
                                      ("lower-right", [("ledger", "Effect ledger", EffectLedger(id="ledger")),
                                                       ("events", "Events", EventsLog(id="events"))])):
                    with Vertical(id=column, classes="lower-column"):
                        for key, title, widget in panes:
                            with Vertical(id=f"{key}-pane", classes="pane lower-pane") as pane:
                                pane.border_title = title
                                yield widget
        yield Pending()
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
        self.compact = self._compact_at(self.app.size.width, self.app.size.height)
        self._arrange()
        self.refresh_bindings()
        self._paint_loaded(self._load(self.session.reader, self._asked()))
        self.timeline.focus()
        follow_theme(self, self.reload)
        self.set_interval(1.0, self._count_down)

    def _count_down(self) -> None:
        """A run held by a worker that is gone: the header's "claimable in 42 s" ticks with nothing written."""
        if self.view is not None and self.view["run"].get("holder_gone"):
            self._header(self.view)

    def on_resize(self, event) -> None:
        self.compact = self._compact_at(event.size.width, event.size.height)

    def watch_compact(self) -> None:
        self._arrange()
        self.refresh_bindings()

    def watch_pane(self) -> None:
        self._arrange()

    def watch_planned(self) -> None:
        self._arrange()

    def watch_raw_json(self) -> None:
        self._show_selected()

    @staticmethod
    def _compact_at(width: int, height: int) -> bool:
        return width < WIDE_AT[0] or height < WIDE_AT[1]

    def _arrange(self) -> None:
        """Side by side when there is room; otherwise one lower pane at a time, chosen with tabs."""
        compact = self.compact
        self.set_class(compact, "-compact")
        self.set_class(not compact, "-wide")
        tabs = self.query_one("#lower-tabs", Tabs)
        tabs.display = compact
        (tabs.show if self.planned else tabs.hide)("tab-plan")
        for key, _ in LOWER:
            self.query_one(f"#{key}-pane").display = (not compact or key == self.pane) and \
                (key != "plan" or self.planned)
        self.query_one("#lower-left").display = not compact or self.pane in LEFT
        self.query_one("#lower-right").display = not compact or self.pane not in LEFT

    # -- data -----------------------------------------------------------------------------------

    @property
    def painted(self) -> dict:
        """The view painted last: on_mount paints the first one, before any key or message reaches the screen."""
        assert self.view is not None
        return self.view

    def _on_loop(self, read, after, limit: int, newest_first: bool) -> list[dict]:
        """A page the cursor reached, read on the loop: one page, at a key."""
        return read(self.session.reader, self.run_id, after, limit, newest_first)

    def reload(self, only_if_changed: bool = False) -> None:
        """Re-read the run and the stretch of each list the screen holds, on the reader thread.

        The screen repaints what changed when it answers, keeping the selected entry; on the last one, it
        follows the run as it moves on. `only_if_changed`: nothing is read past data_version when no commit happened."""
        self.session.read(self, "reload", partial(self._load, asked=self._asked(), only_if_changed=only_if_changed),
                          self._paint_loaded)

    def _asked(self) -> dict:
        """What a reload starts from, taken on the loop: the view shown and a copy of each window."""
        return {"view": self.view, "version": self._version, "worktree": self._worktree,
                "windows": [(_held(w), replace(w, rows=list(w.rows))) for w in (self.steps, self.events, self.effects)]}

    def _load(self, store: Store, asked: dict, only_if_changed: bool = False) -> dict | None:
        """Everything a repaint shows, read from `store`.

        It is read on the reader thread, or on the loop at the first paint. None when `only_if_changed` and
        nothing was committed since the last read."""
        version = data_version(store)
        if only_if_changed and version == asked["version"]:
            return None
        view, before = run_view(store, self.run_id), asked["view"]
        fresh = before is None or before["run"]["generation"] != view["run"]["generation"]
        fetches: tuple[partial[list], ...] = (partial(_steps, store, view["run"]), partial(_events, store, self.run_id),
                                              partial(_effects, store, self.run_id))
        windows = []
        for (held, window), fetch in zip(asked["windows"], fetches):
            window.fetch = fetch
            if not fresh:
                window.refresh()
            elif fetch.func is _effects:
                window.first()              # the ledger reads from its first effect down, as it always has
            else:
                window.last()               # the timeline and the events open where the run is now
            windows.append((held, window))
        steps = windows[0][1]
        first = steps.rows[0]["position"] if steps.rows else 0
        last = None if steps.at_end else steps.rows[-1]["position"]
        return {"view": view, "version": version, "fresh": fresh, "windows": windows,
                "beside": beside(store, view["run"], first, last),
                "worktree": asked["worktree"] or recorded_worktree(store, self.run_id),
                "said": _situation(store, self.run_id) if view["run"]["status"] not in TERMINAL else ""}

    def _paint_loaded(self, loaded: dict | None) -> None:
        """Repaint what `_load` read; a window a key moved while it read keeps the stretch the key chose."""
        if loaded is None:
            return
        view = loaded["view"]
        self._version, self._said = loaded["version"], loaded["said"]
        self._claimable_at = now() + (view["run"]["claimable_in_s"] or 0)
        self.view = view
        beside_rows = loaded["beside"]
        for (held, read), window in zip(loaded["windows"], (self.steps, self.events, self.effects)):
            if loaded["fresh"] or _held(window) == held:
                window.rows, window.at_start, window.at_end = read.rows, read.at_start, read.at_end
            elif window is self.steps:
                beside_rows = None
        if self._worktree is None and loaded["worktree"] is not None:
            self._worktree = loaded["worktree"]
            self.refresh_bindings()
        with self.app.batch_update():
            self._header(view)
            self._worktree_line(view["run"])
            self._progress(view["checkpoint"])
            self._paint_timeline(beside_rows=beside_rows)
            # a budget reason is only ever written by the stop (waiting, parked or failed on that dimension)
            self.query_one(BudgetGauges).set_budget(view["budget"], budget_dimension(view["run"]["reason"]))
            self._paint_effects()
            self._paint_events()
            self.query_one(CheckpointView).set_report(view, palette(self.app))
            self._plan(view["checkpoint"])
            self._titles(view)

    def _paint_timeline(self, select: str | None = None, beside_rows: dict | None = None) -> None:
        """Show the stretch held, the highlight staying on its entry, or moving to `select` (a key, or "first"
        or "last" of the stretch). `beside_rows`: what a reload read beside it (else read here, at a key)."""
        rows, run = self.steps.rows, self.painted["run"]
        first = rows[0]["position"] if rows else 0
        last = None if self.steps.at_end else rows[-1]["position"]
        if beside_rows is None:
            beside_rows = beside(self.session.reader, run, first, last)
        items = timeline_items(self.painted, rows, beside_rows, self.steps.at_end)
        if items and select in ("first", "last"):
            select = items[0 if select == "first" else -1].key
        self.timeline.set_items(items, select, follow=self.steps.at_end)
        self._show_selected()

    def _paint_effects(self) -> None:
        self.ledger.set_effects(self.effects.rows, self.painted["run"]["generation"], now())

    def _paint_events(self) -> None:
        self.query_one(EventsLog).set_events(self.events.rows, palette(self.app), newest=self.events.at_end)

    def _header(self, report: dict) -> None:
        run = report["run"]
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(run["id"], style="bold")
        line.append(f" · {run['agent']} v{run['agent_version']} · ")
        line.append_text(badge(run["status"], run["reason"], palette(self.app)))
        line.append(f" · attempt {run['attempt']}")
        if wait := retry_wait(run, report["checkpoint"].get("step_attempts")):
            line.append(f" · next try: {retry_said(wait)}" + (f" · the last: {wait['last_error']}"
                                                             if wait["last_error"] else ""))
        if run.get("holder_gone"):
            line.append(f" · {held_by(run['worker'], self._claimable_at - now())}")
        elif run.get("worker"):
            line.append(f" · {run['worker']}")
        if run.get("parent_id"):
            line.append(f" · fork of {run['parent_id']} at #{run['fork_step']}")
        line.append(" · ")
        line.append(json_text(run["request"], separators=(",", ":")), style="dim")
        self.query_one("#run-header", Static).update(safe(line))

    def _worktree_line(self, run: dict) -> None:
        """A coding run's worktree and branch, shown under the header.

        The run records them once, among its first entries, and a reload reads them until it has. No git is
        asked here, on every refresh."""
        line = self.query_one("#run-worktree", Static)
        line.display = self._worktree is not None
        if self._worktree is not None:   # the branch first: a long path is what the width cuts
            tree = self._worktree["worktree"]
            there = os.path.isdir(tree)
            text = Text(no_wrap=True, overflow="ellipsis")
            text.append(f"branch {self._worktree['branch']} · ")
            if there and run["status"] in TERMINAL:
                text.append("W removes the worktree · ")
            text.append(f"worktree {tree}" if there else f"worktree removed ({tree})")
            line.update(safe(text))

    def _progress(self, checkpoint: dict) -> None:
        total, step = checkpoint.get("total_steps"), checkpoint.get("current_step") or 0
        row = self.query_one("#step-progress")
        row.display = bool(total)
        if total:
            self.query_one("#step-label", Label).update(f"step {step}/{total} ")
            step_bar = self.query_one(StepBar)
            step_bar.total, step_bar.done = total, min(step, total)

    def _plan(self, checkpoint: dict) -> None:
        """A harness run's plan as it recorded it last, ticked and open tasks; no pane for a run that keeps none."""
        found = recorded_plan(checkpoint)
        self.planned = bool(found)
        if found:
            plan, record = found
            self.query_one("#plan", Caption).text = plan_text(plan, record, palette(self.app))
            ticked = sum(1 for _, done in plan if done)
            self.query_one("#plan-pane").border_title = f"Plan · {ticked}/{len(plan)} tasks done"

    def _titles(self, view: dict) -> None:
        counts = view["counts"]
        entries, doubtful = counts["entries"], counts["in_doubt"]
        self.query_one("#timeline-pane").border_title = f"Timeline · {entries:,} entr{'y' if entries == 1 else 'ies'}"
        self.query_one("#ledger-pane").border_title = f"Effect ledger · {counts['effects']:,}" + (
            f" · {doubtful} in doubt" if doubtful else "")
        self.query_one("#events-pane").border_title = f"Events · {counts['events']:,}"

    def _show_selected(self) -> None:
        viewer, item = self.viewer, self.timeline.selected
        if item is None or self.view is None:
            viewer.border_title = "Entry"
            viewer.show(Text("nothing recorded yet", style="dim"), None)
            return
        if item.entry is not None and item.entry.get("artifact"):
            item.entry = self._read_artifact(item.entry)
        shown = item.kind if item.kind != "pending" else item.note
        viewer.border_title = safe(f"#{item.position} {item.name} · {shown}")
        viewer.border_subtitle = "raw JSON · v" if self.raw_json else "v raw JSON"
        if self.raw_json:
            text = raw(item, self.view)
        else:
            text = human(item, self._said if item.pending else "", now(), palette(self.app))
        viewer.show(text, (item.key, self.raw_json))

    def _read_artifact(self, entry: dict) -> dict:
        """The selected entry's large result, read once while it stays selected (a refresh rebuilds the items)."""
        if self._artifact[0] != entry["artifact"]:
            self._artifact = (entry["artifact"], with_artifact(self.session.reader, entry)["result"])
        return {**entry, "result": self._artifact[1]}

    # -- events ---------------------------------------------------------------------------------

    def on_data_changed(self, message: DataChanged) -> None:
        self.reload()

    def on_screen_resume(self) -> None:
        """Shown again after a modal or another screen: re-read only if another commit happened meanwhile (the
        app's poll tells only the screen on top)."""
        if self.view is not None:
            self.reload(only_if_changed=True)

    @on(OptionList.OptionHighlighted, "#timeline")
    def _highlighted(self) -> None:
        """Near an end of the stretch held, read the next page on that side."""
        index, count = self.timeline.highlighted, len(self.timeline.items)
        if index is not None and self.view is not None:
            if index >= count - NEAR and self.steps.forward() or index < NEAR and self.steps.backward():
                self._paint_timeline()
                return
        self._show_selected()

    @on(OptionList.OptionSelected, "#timeline")
    def _open_log(self) -> None:
        """enter on a harness iteration's row: the coding agent's log of that iteration."""
        item = self.selected
        outcome = item.entry.get("result") if item is not None and item.entry is not None else None
        if item is None or item.kind != "effect" or not isinstance(outcome, dict) or "task_id" not in outcome:
            return
        try:
            name, text = worker_log(self.session.reader, outcome)
        except UserError as e:
            self.notify(str(e), severity="warning")
            return
        self.app.push_screen(LogModal(f"#{item.position} {item.name} · {outcome['task_id']} · {name}", text))

    @on(EffectLedger.RowHighlighted, "#ledger")
    def _ledger_moved(self, event: EffectLedger.RowHighlighted) -> None:
        rows = len(self.effects.rows)
        if event.cursor_row >= rows - NEAR and self.effects.forward() or \
                event.cursor_row < NEAR and self.effects.backward():
            self._paint_effects()

    @on(EventsLog.Edge)
    def _events_edge(self, event: EventsLog.Edge) -> None:
        log = self.query_one(EventsLog)
        if event.direction < 0 and (came := self.events.backward()):
            self._paint_events()
            log.call_after_refresh(log.scroll_to, y=came, animate=False)   # the same events stay in view
        elif event.direction > 0 and self.events.forward():
            self._paint_events()

    @on(EffectLedger.RowSelected, "#ledger")
    def _open_effect(self) -> None:
        """enter on a ledger row shows its entry in the timeline (when it is of this generation)."""
        at = self.ledger.position_at_cursor()
        if at and self.view and at[0] == self.view["run"]["generation"]:
            self._go_to(at[1])
            self.timeline.focus()

    @on(Tabs.TabActivated, "#lower-tabs")
    def _show_pane(self, event: Tabs.TabActivated) -> None:
        if event.tab is not None and event.tab.id:
            self.pane = event.tab.id.removeprefix("tab-")

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "next_pane":
            return self.compact
        if action == "remove_worktree":
            return self._worktree is not None
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

    def _go_to(self, position: int) -> None:
        """Select the entry at `position` (the run's pending row past its last entry), reading its page unless
        it is held."""
        if position >= self.painted["counts"]["entries"]:
            self.action_last()
            return
        if self.steps.index_of(position) is None:
            self.steps.around(position)
            self._paint_timeline(select=f"p{position}")
        else:
            self.timeline.select_key(f"p{position}")

    def action_first(self) -> None:
        if not self.steps.at_start:
            self.steps.first()
        self._paint_timeline(select="first")

    def action_last(self) -> None:
        if not self.steps.at_end:
            self.steps.last()
        self._paint_timeline(select="last")

    def _go_to_chosen(self, position: int | None) -> None:
        """A modal's answer: the position chosen, or None when it was closed."""
        if position is not None:
            self._go_to(position)

    def action_go_to(self) -> None:
        self.app.push_screen(GotoModal(self.view["counts"]["entries"] if self.view else 0), self._go_to_chosen)

    def action_next_for_person(self) -> None:
        if self.view is None:
            return
        item = self.selected
        found = next_for_person(self.session.reader, self.view, item.position if item else -1)
        if found is None:
            self.notify("nothing in this run needs a person: no effect in doubt, no question, no budget crossing")
            return
        self._go_to(found)

    def action_toggle_json(self) -> None:
        self.raw_json = not self.raw_json

    def action_next_pane(self) -> None:
        tabs = self.query_one(Tabs)
        keys = [key for key, _ in LOWER if key != "plan" or self.planned]
        tabs.active = f"tab-{keys[(keys.index(self.pane) + 1) % len(keys)]}"

    def action_diff(self) -> None:
        """This run side by side with another (a fork's parent is offered first)."""
        from .diff import open_diff

        open_diff(self.session, self.run_id)

    def action_replay(self) -> None:
        if self._replaying is not None and self._replaying.is_alive():
            self.notify(f"the replay of {self.run_id} is still running: the agent's code has not returned (a "
                        "loop after its last journaled call?); tui-agent replay stops it after --timeout",
                        severity="warning")
            return
        self.notify(f"replaying {self.run_id} with the current code of {self.painted['run']['agent']}")
        self._replaying = start_replay(self, self.run_id)

    def on_replayed(self, message: Replayed) -> None:
        if message.error is not None:
            self.notify(f"{message.run_id}: cannot replay: {message.error}", severity="error")
            return
        assert message.replay is not None     # a Replayed carries its replay or the error that stopped it
        if message.replay.reproduced:
            self.notify(reproduced_line(message.replay))
        else:
            self.app.push_screen(DivergenceModal(message.replay), self._go_to_chosen)

    def action_remove_worktree(self) -> None:
        self.session.guard(run_actions.remove_worktree, self.session, self.run_id)

    def action_edit_fork(self) -> None:
        """Fork the run with an edit of the timeline's selected entry.

        It is not a RUN_ACTIONS entry: it needs the selected entry, which the runs screen and the palette's rule
        (`why_not(app, run)`) do not have."""
        self.session.guard(run_actions.edit_fork, self.session, self.run_id, self.selected)

    def action_rule(self) -> None:
        """Not a RUN_ACTIONS entry: only a harness run has a rulebook, so it is a key of this screen alone (the
        palette offers it on the runs list too)."""
        self.session.guard(run_actions.rule, self.session, self.run_id)

    def run_target(self) -> tuple[str, TimelineItem | None]:
        """This run, and the timeline's selected position (a fork starts there, a doubtful effect is reconciled)."""
        return self.run_id, self.selected
