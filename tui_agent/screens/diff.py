"""Diff: two runs side by side (`d` on the run screen, after picking the other run).

The totals on top, then both timelines aligned by position, each row marked by what differs, and the two
results of the selected position below. Like the run screen it holds a page of the rows at a time, and the
first divergence is searched in a thread worker (`DiffScreen.DivergenceFound`; `n` jumps there).
See docs/tui.md, "What the screens show"."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import get_current_worker

from ..format import ago, duration_ms
from ..messages import DataChanged
from ..paging import Window
from ..report import shown_stored
from ..runtime.clock import now
from ..safe_text import json_text
from ..services.diff import (
    EDITED,
    TOTALS,
    Pair,
    aligned_page,
    candidates,
    end_of,
    flags_text,
    money,
    pair_of,
    refreshed,
    resolve,
    results_at,
    search,
    shown_delta,
    shown_total,
    totals,
    totals_differ,
)
from ..session import Reads
from ..store import Store
from ..store.runs import data_version
from ..widgets.footer import KeysFooter
from ..widgets.safe import safe
from ..widgets.status import badge
from ..widgets.theme import follow_theme, palette, style
from .modals import Dialog, GotoModal

PAGE = 100                  # aligned rows read at a time; the window holds three pages at most
NEAR = 5                    # the cursor this close to a held end reads the next page
SHOWN_CHARS = 4000          # of each result in the detail panes

DIVERGES, DIFFERS, COSTS, SHARED = "▶", "≠", "~", "="


def _mark(row: dict, divergence: dict | None) -> tuple[str, str, bool]:
    """(mark, tone, bold) of an aligned row."""
    if divergence is not None and divergence["position"] == row["position"]:
        return DIVERGES, "text-error", True
    if row["why"]:
        return DIFFERS, "text-warning", False
    if row["shared"]:
        return SHARED, "text-muted", False
    if row["differs"]["cost"] or row["differs"]["duration"]:
        return COSTS, "text-secondary", False
    return " ", "foreground", False


class AlignedRows(OptionList, inherit_bindings=False):
    """The aligned rows, each laid out to the widget's width: mark, position, A's entry, B's entry, what
    differs. home and end are the screen's (the first and last rows of the runs, not of the stretch)."""

    BINDINGS = [Binding("down", "cursor_down", show=False), Binding("up", "cursor_up", show=False),
                Binding("pagedown", "page_down", show=False), Binding("pageup", "page_up", show=False)]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[dict] = []
        self.divergence: dict | None = None
        self._width = 0

    def set_rows(self, rows: list[dict], divergence: dict | None, select: int | None = None) -> None:
        """Replace the rows, keeping the highlighted position (or moving to `select`)."""
        keep = select if select is not None else self.selected_position
        same = [r["position"] for r in rows] == [r["position"] for r in self.rows]
        self.rows, self.divergence = list(rows), divergence     # a copy: the window grows its list in place
        prompts = self._prompts()
        if same:
            for index, prompt in enumerate(prompts):
                self.replace_option_prompt_at_index(index, prompt)
        else:
            self.clear_options()
            self.add_options([Option(prompt, id=f"p{row['position']}") for row, prompt in zip(rows, prompts)])
        positions = [r["position"] for r in rows]
        highlight = positions.index(keep) if keep in positions else (0 if rows else None)
        if self.highlighted != highlight:
            self.highlighted = highlight

    @property
    def selected(self) -> dict | None:
        index = self.highlighted
        return self.rows[index] if index is not None and index < len(self.rows) else None

    @property
    def selected_position(self) -> int | None:
        row = self.selected
        return None if row is None else row["position"]

    def select_position(self, position: int) -> bool:
        positions = [r["position"] for r in self.rows]
        if position in positions:
            self.highlighted = positions.index(position)
            return True
        return False

    def on_resize(self) -> None:
        width = self.scrollable_content_region.width
        if width != self._width and self.rows:
            self._width = width
            for index, prompt in enumerate(self._prompts()):
                self.replace_option_prompt_at_index(index, prompt)

    def widths(self) -> tuple[int, int]:
        """(a side's width, the flags' width) at the widget's width."""
        width = self._width or self.scrollable_content_region.width or 100
        flags = 18 if width >= 90 else 12
        return max(16, (width - 2 - 7 - 3 - 1 - flags) // 2), flags

    def _prompts(self) -> list[Text]:
        colours = palette(self.app)
        side, flags = self.widths()
        return [safe(self._prompt(row, colours, side, flags)) for row in self.rows]     # the entries' names

    def _prompt(self, row: dict, colours, side_w: int, flags_w: int) -> Text:
        mark, tone, bold = _mark(row, self.divergence)
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(mark, style=style(colours, tone, bold) or None)
        line.append(f"{row['position']:>7} ", style="dim")
        differs = row["differs"]
        line.append_text(_cell(row["a"], side_w, differs))
        line.append(" │ ", style="dim")
        if row["shared"]:
            line.append(f"{'= the same entry (copied by the fork)':<{side_w}}", style="dim")
        else:
            line.append_text(_cell(row["b"], side_w, differs))
        said = "" if row["shared"] else flags_text(row, short=True)
        line.append(" " + said[:flags_w], style=style(colours, tone) or None)
        return line


def _cell(entry: dict | None, width: int, differs: dict) -> Text:
    """An entry in a side's column, as its name, duration and cost, with what differs in bold.

    An edited entry's name is marked ✎ edited."""
    cell = Text(no_wrap=True)
    if entry is None:
        cell.append(f"{'—':<{width}}", style="dim")
        return cell
    name_w = max(4, width - 18)
    name = entry["name"] + (f" {EDITED}" if entry.get("edited") else "")
    name = name if len(name) <= name_w else name[: name_w - 1] + "…"
    cell.append(f"{name:<{name_w}} ", style="bold" if differs["name"] or differs["result"] else None)
    cell.append(f"{duration_ms(entry['duration_s'] * 1000):>7} ", style="bold" if differs["duration"] else "dim")
    cost = money(entry["cost_usd"]) if entry["cost_usd"] is not None else ("$?" if entry["kind"] == "model" else "")
    cell.append(f"{cost:>9}"[:9], style="bold" if differs["cost"] else "dim")
    return cell


class DiffScreen(Reads, Screen):
    CSS_PATH = "diff.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("n", "divergence", "First divergence"),
        Binding("g", "go_to", "Go to"),
        Binding("home", "first", "First/last", key_display="home/end"),
        Binding("end", "last", "Last entry", show=False),
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    @dataclass
    class DivergenceFound(Message):
        """The background search's answer, the first divergence as {position, why, message}.

        It is None when the runs are the same entry for entry, or `error` when the search could not read. `search` names
        the search it answers: a later one replaces it."""

        search: int
        divergence: dict | None
        error: str | None = None

    def __init__(self, a_id: str, b_id: str) -> None:
        super().__init__()
        self.a_id, self.b_id = a_id, b_id
        self.pair: Pair | None = None
        self.rows = Window(self._read, key=lambda row: row["position"], page=PAGE)
        self.divergence: dict | None = None
        self.searched = False            # the current search has answered
        self._search_id = 0
        self._version: int | None = None
        self._end = 0                    # the positions of the longer journal, read with the pair
        self._totals_read: tuple[dict, dict] = ({}, {})
        self._rereading = False          # a change's re-read: it may search again

    def compose(self) -> ComposeResult:
        yield Static(id="diff-header")
        yield Static(id="diff-totals")
        yield Static("searching for the first divergence…", id="diff-found")
        with Vertical(id="diff-pane", classes="pane") as pane:
            pane.border_title = "Entries"
            yield Static(id="diff-columns")
            yield AlignedRows(id="diff-rows")
        with Horizontal(id="diff-detail"):
            yield Static(id="detail-a", classes="pane")
            yield Static(id="detail-b", classes="pane")
        yield KeysFooter()

    @property
    def aligned(self) -> AlignedRows:
        return self.query_one(AlignedRows)

    @property
    def read_pair(self) -> Pair:
        """The pair as last read: on_mount reads it, and until it has no key that pages or paints acts
        (check_action)."""
        assert self.pair is not None
        return self.pair

    def on_mount(self) -> None:
        ok, current = self.session.guard(pair_of, self.session.reader, self.a_id, self.b_id)
        if ok:
            self._paint_loaded(self._load(self.session.reader, current, replace(self.rows)))
        self.aligned.focus()
        self.call_after_refresh(self._search)     # after the first paint: the search is the background
        follow_theme(self, self.reload)

    # -- data -------------------------------------------------------------------------------------

    def _read(self, after: int | None, limit: int, newest_first: bool) -> list[dict]:
        return aligned_page(self.session.reader, self.read_pair, after, limit, newest_first)

    def reload(self) -> None:
        """Read both runs, their totals and the stretch of rows held again on the reader thread (a run may have
        moved on); the screen repaints when it answers."""
        if self.pair is not None:
            self.session.read(self, "reload", partial(self._load, pair=self.pair, rows=replace(self.rows)),
                              self._paint_loaded)

    def _load(self, store: Store, pair: Pair, rows: Window) -> dict:
        """Everything a repaint shows, read from `store`; `pair` as last read (the first time, just read)."""
        current = pair if self.pair is None else refreshed(store, pair)
        restarted = self.pair is not None and (current.a["generation"], current.b["generation"]) != (
            pair.a["generation"], pair.b["generation"])
        rows.fetch = lambda after, limit, newest_first: aligned_page(store, current, after, limit, newest_first)
        if self.pair is None or restarted:
            if current.fork and current.shared_until:
                rows.around(current.shared_until)    # everything before the fork point is shared
            else:
                rows.first()
        else:
            rows.refresh()
        return {"pair": current, "version": data_version(store), "restarted": restarted, "rows": rows,
                "totals": (totals(store, current.a["id"]), totals(store, current.b["id"])),
                "end": end_of(store, current)}

    def _paint_loaded(self, loaded: dict) -> None:
        fresh, current = self.pair is None, loaded["pair"]
        self.pair, self._version = current, loaded["version"]
        self.rows.rows, self.rows.at_start, self.rows.at_end = (loaded["rows"].rows, loaded["rows"].at_start,
                                                                loaded["rows"].at_end)
        self._end, self._totals_read = loaded["end"], loaded["totals"]
        with self.app.batch_update():
            self._header(current)
            self._totals()
            self._paint(select=current.shared_until if fresh and current.shared_until else None)
        if loaded["restarted"]:
            self._search()
        elif self._rereading:
            self._rereading = False
            if self.searched and (self.divergence is None or self.divergence["why"] in ("only_a", "only_b")):
                self._search()          # a run moved on: what was the end of one journal may not be any more

    def _search(self) -> None:
        self._search_id += 1
        self.searched = False
        self._found_line()
        self._searching(self._search_id, self.a_id, self.b_id)

    @work(thread=True, exclusive=True, group="divergence", exit_on_error=False)
    def _searching(self, search_id: int, a_id: str, b_id: str) -> None:
        """Scan both journals a page at a time for the first divergence; post the answer, and only that."""
        worker = get_current_worker()
        try:
            found = search(self.session.db_path, self.session.durability, a_id, b_id, lambda: worker.is_cancelled)
        except Exception as e:      # a busy or damaged database, a run deleted: the screen says it, the app goes on
            self.post_message(self.DivergenceFound(search_id, None, str(e) or type(e).__name__))
            return
        if not worker.is_cancelled:
            self.post_message(self.DivergenceFound(search_id, found))

    @on(DivergenceFound)
    def _found(self, message: DivergenceFound) -> None:
        if message.search != self._search_id:
            return
        self.searched = True
        self.divergence = message.divergence
        if message.error:
            self.query_one("#diff-found", Static).update(safe(Text(f"the search stopped: {message.error}",
                                                                   style="bold")))
            return
        self._found_line()
        if self.pair is not None:       # else the runs could not be read: no rows to mark
            self._paint()

    def _found_line(self) -> None:
        colours = palette(self.app)
        line = Text()
        if not self.searched:
            line.append("searching for the first divergence…", style="dim")
        elif self.divergence is None:
            line.append("= ", style=style(colours, "text-success", True))
            line.append("the same entry for entry: names and results (costs and times may differ)")
        else:
            found = self.divergence
            line.append(f"{DIVERGES} first divergence at #{found['position']:,}", style=style(colours, "text-error",
                                                                                                 True))
            line.append(f": {found['message']} · ")
            line.append("n", style="bold")
            line.append(" jumps there")
        self.query_one("#diff-found", Static).update(safe(line))

    def _header(self, pair: Pair) -> None:
        colours = palette(self.app)
        text = Text(no_wrap=True, overflow="ellipsis")
        for label, run in (("A", pair.a), ("B", pair.b)):
            if label == "B":
                text.append("\n")
            text.append(f"{label} ", style="bold")
            text.append(run["id"], style="bold")
            text.append(f" · {run['agent']} v{run['agent_version']} · ")
            text.append_text(badge(run["status"], run["reason"], colours))
            fork = pair.fork
            if fork and fork["child"] == run["id"]:
                text.append(f" · fork of {'A' if label == 'B' else 'B'} at #{fork['fork_step']}")
            text.append(" · ")
            text.append(json_text(shown_stored(run["request"], "runs.request"), separators=(",", ":")), style="dim")
        self.query_one("#diff-header", Static).update(safe(text))

    def _totals(self) -> None:
        colours = palette(self.app)
        a, b = self._totals_read
        differ = totals_differ(a, b)
        table = Table.grid(padding=(0, 2))
        table.add_column()
        for _ in range(3):
            table.add_column(justify="right")
        table.add_row("", Text("A", style="bold"), Text("B", style="bold"), Text("B − A", style="dim"))
        for name, label in TOTALS:
            tone = style(colours, "text-warning") if name in differ else "dim"
            table.add_row(label, shown_total(name, a[name]), shown_total(name, b[name]),
                          Text(shown_delta(name, a[name], b[name]), style=tone))
        self.query_one("#diff-totals", Static).update(table)

    def _paint(self, select: int | None = None) -> None:
        rows = self.aligned
        rows.set_rows(self.rows.rows, self.divergence, select)
        side, _ = rows.widths()
        columns = Text(no_wrap=True, overflow="ellipsis", style="dim")
        columns.append(f" {'pos':>7} ")
        pair = self.read_pair
        columns.append(f"{'A ' + pair.a['id']:<{side}} │ {'B ' + pair.b['id']:<{side}} differs")
        self.query_one("#diff-columns", Static).update(columns)
        self.query_one("#diff-pane").border_title = f"Entries · {self._end:,} positions"
        self._show_selected()

    def _show_selected(self) -> None:
        row = self.aligned.selected
        for label, side in (("a", "A"), ("b", "B")):
            pane = self.query_one(f"#detail-{label}", Static)
            entry = None if row is None else row[label]
            if row is None or entry is None:
                pane.border_title = side
                pane.update(Text("no entry here" if row is not None else "", style="dim"))
                continue
            pane.border_title = safe(f"{side} #{row['position']} {entry['name']} · {entry['kind']}" + (
                f" · {EDITED} edited" if entry.get("edited") else ""))
        if row is None:
            return
        ok, results = self.session.guard(results_at, self.session.reader, row)     # artifacts: for this row only
        for index, label in enumerate(("a", "b")):
            if row[label] is None or not ok:
                continue
            text = json_text(results[index], indent=1, default=str)
            if len(text) > SHOWN_CHARS:
                text = text[:SHOWN_CHARS] + "\n…"
            self.query_one(f"#detail-{label}", Static).update(safe(text))

    # -- events -----------------------------------------------------------------------------------

    def on_data_changed(self, message: DataChanged | None) -> None:
        self._rereading = True
        self.reload()

    def on_screen_resume(self) -> None:
        if self.pair is not None:
            version = self._version

            def reread(changed: bool) -> None:
                if changed:
                    self.on_data_changed(None)

            self.session.read(self, "resume", lambda store: data_version(store) != version, reread)

    @on(OptionList.OptionHighlighted, "#diff-rows")
    def _highlighted(self) -> None:
        index, count = self.aligned.highlighted, len(self.aligned.rows)
        if index is not None and self.pair is not None:
            if index >= count - NEAR and self.rows.forward() or index < NEAR and self.rows.backward():
                self._paint()
                return
        self._show_selected()

    # -- actions ----------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Until the runs are read (on_mount, unless they could not be), only escape and the cursor keys act."""
        return self.pair is not None or action in ("back", "cursor_down", "cursor_up")

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_cursor_down(self) -> None:
        self.aligned.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.aligned.action_cursor_up()

    def go_to(self, position: int) -> None:
        """Select the row at `position`, reading its page unless it is held."""
        end = end_of(self.session.reader, self.read_pair)
        position = max(0, min(position, end - 1))
        if self.rows.index_of(position) is None:
            self.rows.around(position)
            self._paint(select=position)
        else:
            self.aligned.select_position(position)

    def action_divergence(self) -> None:
        if not self.searched:
            self.notify("still searching for the first divergence")
        elif self.divergence is None:
            self.notify("the runs are the same entry for entry: nothing diverges")
        else:
            self.go_to(self.divergence["position"])

    def action_go_to(self) -> None:
        def chosen(position: int | None) -> None:
            if position is not None:
                self.go_to(position)

        self.app.push_screen(GotoModal(end_of(self.session.reader, self.read_pair)), chosen)

    def action_first(self) -> None:
        if not self.rows.at_start:
            self.rows.first()
        self._paint(select=self.rows.rows[0]["position"] if self.rows.rows else None)

    def action_last(self) -> None:
        if not self.rows.at_end:
            self.rows.last()
        self._paint(select=self.rows.rows[-1]["position"] if self.rows.rows else None)


# -- the other run ---------------------------------------------------------------------------------


class PickRunModal(Dialog):
    """`d` on the run screen: the run to compare with. A fork's parent comes first, then the run's own
    forks, then the agent's other runs, newest first; or type an id."""

    TITLE = "Compare with another run"
    DO = "Compare"
    DEFAULT_CSS = "PickRunModal #choices { height: auto; max-height: 12; }"

    def __init__(self, run_id: str, choices: list[dict]) -> None:
        super().__init__()
        self.run_id, self.choices = run_id, choices

    def body(self) -> ComposeResult:
        yield Label(f"{self.run_id} side by side with:")
        if self.choices:
            yield OptionList(*[Option(self._label(c), id=c["id"]) for c in self.choices], id="choices")
        else:
            yield Label("no other run of this agent yet", classes="dim")
        yield Input(placeholder="or type a run id (a unique prefix will do)", id="typed")

    @staticmethod
    def _label(choice: dict) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(choice["id"], style="bold")
        text.append(" ")
        text.append_text(badge(choice["status"], choice["reason"]))
        if choice["relation"]:
            text.append(f" · {choice['relation']}")
        text.append(f" · {ago(choice['created_at'], now())}", style="dim")
        return safe(text)

    def on_mount(self) -> None:
        if self.choices:
            self.query_one("#choices", OptionList).focus()

    @on(OptionList.OptionSelected, "#choices")
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def answer(self) -> str | None:
        typed = self.query_one("#typed", Input).value.strip()
        if typed:
            return typed
        if self.choices:
            option = self.query_one("#choices", OptionList).highlighted_option
            if option is not None:
                return option.id
        self.notify("choose a run, or type its id", severity="warning")
        return None


def open_diff(session, run_id: str) -> None:
    """Offer the other run, then open the diff: a fork's parent on the left (A), else this run."""
    ok, choices = session.guard(candidates, session.reader, run_id)
    if not ok:
        return
    parents = {c["id"] for c in choices if c["kind"] == "parent"}

    def chosen(ref: str | None) -> None:
        if ref is None:
            return
        ok, other = session.guard(resolve, session.reader, ref)
        if not ok:
            return
        if other == run_id:
            session.app.notify(f"{other} is this run; choose another", severity="warning")
            return
        session.app.push_screen(DiffScreen(other, run_id) if other in parents else DiffScreen(run_id, other))

    session.app.push_screen(PickRunModal(run_id, choices), chosen)
