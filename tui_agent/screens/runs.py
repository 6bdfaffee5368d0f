"""Runs (home): find a run. What needs a person sorts first; the strip under the table says what
the selected run is waiting for and which key acts on it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import islice

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input
from textual.widgets.data_table import ColumnKey

from .. import operate
from ..filters import Filter, FilterError, parse
from ..format import age, spent, step_cell, tokens
from ..report import busiest_budget, runs_page, tasks_of
from ..runtime.clock import now
from ..services.forecast import WINDOW, sparkline
from ..states import RunStatus
from ..store import Store
from ..store.journal import cost_window
from ..store.runs import counts, each_run
from ..widgets.gauges import level_style
from ..widgets.safe import safe
from ..widgets.status import badge
from ..widgets.theme import Palette, palette, style
from . import run_actions
from .situation import situation_over_time, workers_alive
from .table import TableScreen

PAGE = 200
MARK = "●"                         # before the id of a marked run
MARK_LIMIT = 10_000                # `*` marks at most this many runs at once
BULK_KEYS = {"park": "park", "resume": "resume", "cancel": "cancel", "approve": "approve",
             "reconcile": "reconcile-ask"}   # a run action's key on marked runs: the bulk action it preselects
COLUMNS = [("ID", "id"), ("AGENT", "agent"), ("STATUS", "status"), ("STEP", "step"), ("ATT", "att"),
           ("WORKER", "worker"), ("COST", "cost"), ("TOKENS", "tokens"), ("BUDGET", "budget"), ("BURN", "burn"),
           ("AGE", "age")]
# Left out while the table is too wide, in this order (a running run's strip names the first two, a budget's stop
# the last); ID, AGENT, STATUS, STEP, COST and AGE stay.
NARROW_DROPS = ("worker", "att", "tokens", "burn", "budget")
AGE_TICK_S = 5.0                   # ages and "N min ago" advance this often, from the rows already held
BUDGET_SOFT = 0.7                  # the BUDGET column turns the gauges' soft colour from here


def _width(cell: Text | str) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


def _burns(store: Store, rows: list[dict]) -> dict[str, list]:
    """BURN: each running run's cost per step of its last WINDOW entries (one bounded read each), oldest left."""
    return {row["id"]: cost_window(store, row["id"], WINDOW) for row in rows if row["status"] == RunStatus.RUNNING}


def fitting(cells: list[dict], width: int) -> list[tuple[str, str]]:
    """The columns that fit `width` (cells padded by one on each side, room kept for the scrollbar),
    leaving out NARROW_DROPS in order while they do not."""
    needed = {key: max([cell_len(label), *(_width(row[key]) for row in cells)]) + 2 for label, key in COLUMNS}
    columns = list(COLUMNS)
    for dropped in NARROW_DROPS:
        if sum(needed[key] for _, key in columns) <= width - 2:
            break
        columns = [(label, key) for label, key in columns if key != dropped]
    return columns


class RunsScreen(run_actions.RunActionKeys, TableScreen):
    COLUMNS = COLUMNS
    TABLE_ID = "runs"
    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("slash", "filter", "Filter"),
        Binding("n", "new", "New"),
        *run_actions.bindings("resume", "park", "cancel", "reconcile", "approve", "budget", hidden=("budget",)),
        Binding("o", "sort", "Sort", show=False),
        Binding("w", "workers", "Workers"),
        Binding("s", "schedules", "Schedules"),
        Binding("dollar_sign", "spend", "Spend", key_display="$"),
        Binding("m", "app.simulator", "Simulator"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("space", "mark", "Mark", show=False),
        Binding("asterisk", "mark_matching", "Mark all", show=False),
        Binding("U", "unmark", "Unmark all", show=False),
    ]
    # What a narrow footer keeps longest: the ways to start and to find things, the Simulator among them; the strip
    # names the key that acts on the selected run, so the run actions are the first to go.
    FOOTER = ("slash", "n", "w", "s", "m", "dollar_sign", "r", "p", "x", "c", "a")

    def __init__(self) -> None:
        super().__init__()
        self.where = Filter()                 # what the filter (`/`) selects
        self.typed = ""                       # the filter as typed, with why it cannot be read (a word it refuses)
        self.refused: str | None = None
        self.marked: set[str] = set()         # the runs an action applies to together (space, *)
        self.needs_first = True
        self.loaded_rows = PAGE               # the rows a reload re-reads: the pages the person scrolled to
        self._rows: list[dict] = []
        self._next: tuple[int, tuple[float, str] | None] | None = None  # where the next page starts, if any
        self._shown: dict[str, dict] = {}     # the cells of each run, so a refresh updates only what changed
        self._columns = list(COLUMNS)         # the columns on screen: a narrow one leaves some out
        self._saying: Callable[[float], str] = lambda at: ""  # the strip, said at an instant
        self._burn: dict[str, list] = {}      # each running run's cost per step, its last WINDOW entries
        self._figures: tuple[dict, int] = ({"queued": 0, "running": 0, "needs_you": 0}, 0)   # counts, workers

    def above_table(self) -> ComposeResult:
        yield Input(placeholder="filter: status:waiting agent:NAME since:3d cost>:0.10 words   (enter applies, "
                                "escape clears)", id="filter", classes="filter")

    def on_mount(self) -> None:
        self.reload_now()
        self.table.focus()
        self.set_interval(AGE_TICK_S, self.tick)

    # -- data -----------------------------------------------------------------------------------

    def _sections(self) -> tuple[bool | None, ...]:
        """The `needs_person` of each section, top to bottom: the runs that need a person, then the others
        (each newest first), or one section of every run newest first."""
        return (True, False) if self.needs_first else (None,)

    def _read(self, store: Store, limit: int, section: int = 0, before: tuple[float, str] | None = None,
              ) -> tuple[list[dict], tuple[int, tuple[float, str] | None] | None]:
        """Up to `limit` rows from `_sections()[section]` after the cursor `before`, and where the next page starts.

        Without `before` the section is read from its newest. When a section runs out, the rows go on from the
        next section's newest. The next page's start is a section and cursor, None when every section ran out."""
        sections = self._sections()
        if self.refused:
            return [], None
        rows: list[dict] = []
        while True:
            rows += runs_page(store, limit=limit - len(rows), needs_person=sections[section], before=before,
                              where=self.where)
            if len(rows) == limit:       # this section may hold more: the next page asks it first
                return rows, (section, (rows[-1]["created_at"], rows[-1]["id"]))
            if section + 1 == len(sections):
                return rows, None
            section, before = section + 1, None

    def load(self, store: Store) -> tuple:
        """The loaded pages (`loaded_rows`, the first page and those the person scrolled to, not the whole
        table), each running run's burn, and the summary's figures."""
        read, after = self._read(store, self.loaded_rows)
        held: dict[str, dict] = {}
        for row in read:     # each section is its own read: a run that moved between them is shown once
            held.setdefault(row["id"], row)
        rows = list(held.values())
        return rows, after, _burns(store, rows), counts(store), workers_alive(store)

    def show(self, loaded: tuple) -> None:
        """Repaint what `load` read, keeping the cursor on the same run.

        When the same runs are shown in the same order in the same columns, only changed cells are updated, their
        columns' widths following; else the table is rebuilt."""
        rows, self._next, self._burn, figures, alive = loaded
        self._figures = figures, alive
        at, colours = now(), palette(self.app)
        self._paint(rows, {row["id"]: self._cells(row, at, colours) for row in rows})
        self._summarize()
        self._explain()

    def _paint(self, rows: list[dict], cells: dict[str, dict]) -> None:
        table = self.table
        selected = self.selected_id()
        columns = fitting(list(cells.values()), self.size.width or self.app.size.width)
        with self.app.batch_update():
            if [r["id"] for r in rows] == [r["id"] for r in self._rows] and columns == self._columns:
                for run_id, new in cells.items():
                    old = self._shown[run_id]
                    for _, key in columns:
                        if old[key] != new[key]:
                            table.update_cell(run_id, key, new[key], update_width=True)
            else:
                table.clear(columns=columns != self._columns)
                if columns != self._columns:
                    for label, key in columns:
                        table.add_column(label, key=key)
                for run_id, new in cells.items():
                    table.add_row(*(new[key] for _, key in columns), key=run_id)
                for _, key in columns:   # sized now: the table's own sizing on its next idle was seen to miss rows
                    column = table.columns[ColumnKey(key)]
                    column.content_width = max([column.content_width, *(_width(new[key]) for new in cells.values())])
                if selected and selected in cells:
                    table.move_cursor(row=table.get_row_index(selected), animate=False)
        self._rows, self._shown, self._columns = rows, cells, columns

    def next_page(self) -> None:
        """Read the next PAGE rows and add them under the rows held.

        They are read from the keyset cursor where the held rows end: only those rows, however far the person
        scrolled. The rows held stay as they are and the cursor stays."""
        if self._next is None:
            return
        rows, self._next = self._read(self.session.reader, PAGE, *self._next)
        self._burn.update(_burns(self.session.reader, rows))
        self.loaded_rows += PAGE
        at, colours = now(), palette(self.app)
        rows = [row for row in rows if row["id"] not in self._shown]  # a run moved since the last reload
        new = {row["id"]: self._cells(row, at, colours) for row in rows}
        cells = {**self._shown, **new}
        if fitting(list(cells.values()), self.size.width or self.app.size.width) != self._columns:
            self._paint(self._rows + rows, cells)       # a wider cell: the columns change, the table is rebuilt
            return
        table = self.table
        with self.app.batch_update():
            for run_id, row_cells in new.items():
                table.add_row(*(row_cells[key] for _, key in self._columns), key=run_id)
        self._rows, self._shown = self._rows + rows, cells

    def tick(self) -> None:
        """The ages and the strip's relative times, advanced from what is held: no database read."""
        if self.app.screen is not self:     # covered: it reloads when it is shown again
            return
        table = self.table
        at = now()
        with self.app.batch_update():
            for row in self._rows:
                cells, shown = self._shown[row["id"]], age(at - row["created_at"])
                if cells["age"] != shown:
                    cells["age"] = shown
                    table.update_cell(row["id"], "age", shown, update_width=True)
            self._say(at)

    def on_resize(self, event: events.Resize) -> None:
        if fitting(list(self._shown.values()), event.size.width) != self._columns:
            self.reload()

    def _cells(self, row: dict, at: float, colours: Palette) -> dict:
        step = step_cell(row["current_step"], row["total_steps"], tasks_of(row["next_input"]))
        busiest = busiest_budget(row)
        burn = Text(sparkline(self._burn[row["id"]]), style=style(colours, "text-primary")) \
            if row["id"] in self._burn else ""
        budget = Text(f"{busiest[0].removesuffix('_usd')} {busiest[1]:.0%}",
                      style=level_style(busiest[1], BUDGET_SOFT, colours=colours)) \
            if busiest else Text("–", style="dim")
        cost = spent(row["cost_usd"], row["unpriced_calls"], row["possibly_billed_usd"])
        return dict(zip((key for _, key in COLUMNS), (
            f"{MARK} {row['id']}" if row["id"] in self.marked else row["id"], safe(row["agent"]),
            badge(row["status"], row["reason"], colours), step, str(row["attempt"]), safe(row["worker"] or "–"),
            Text(cost, style="dim") if cost == "–" else cost, tokens(row), budget, burn,
            age(at - row["created_at"]))))

    def _filter_text(self) -> str:
        return self.typed.strip() if self.refused else str(self.where)

    def _summarize(self) -> None:
        figures, alive = self._figures
        shown = f" · filter: {self._filter_text()}" if self.where or self.refused else ""
        marked = f" · {len(self.marked)} marked" if self.marked else ""
        self.summary.text = (
            f"{self.session.label} · workers {alive} {'●' if alive else '○'} · queued {figures['queued']} · "
            f"running {figures['running']} · needs you {figures['needs_you']}{marked}"
            f"{' · needs you first' if self.needs_first else ' · newest first'}{shown}")

    def _explain(self) -> None:
        """The strip for the selected run, read once; without one, why the table is empty."""
        run_id = self.selected_id()
        if run_id:
            self.session.read(self, "explain", lambda store: situation_over_time(store, run_id),
                              partial(self._explained, run_id))
            return
        empty = self._nothing_shown()
        self._saying = lambda at: empty
        self._say(now())

    def _explained(self, run_id: str, saying: Callable[[float], str]) -> None:
        if run_id == self.selected_id():     # else the newer selection's read follows
            self._saying = saying
            self._say(now())

    def _nothing_shown(self) -> str:
        if not (self.where or self.refused):
            return "No runs yet: press n to start one."
        refused = f": {self.refused}" if self.refused else ""
        return f'no run matches "{self._filter_text()}"{refused}; escape clears the filter'

    def _say(self, at: float) -> None:
        self.strip.text = self._saying(at)

    def selected_id(self) -> str | None:
        return self.selected_key()

    # -- events ---------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._explain()
        if event.cursor_row >= len(self._rows) - 5:
            self.next_page()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.apply_filter(event.value)

    def apply_filter(self, text: str) -> None:
        """Show the runs `text`'s words select (tui_agent/filters.py); words it cannot read show nothing, and
        the strip says why."""
        try:
            self.where, self.refused = parse(text), None
        except FilterError as e:
            self.where, self.refused = Filter(), str(e)
        self.typed = text
        box = self.query_one("#filter", Input)
        box.value = text
        box.set_class(bool(text.strip()), "-shown")
        self.loaded_rows = PAGE
        self.table.focus()
        self.reload()

    # -- actions --------------------------------------------------------------------------------

    def run_target(self) -> tuple[str | None, None]:
        return self.selected_id(), None

    def action_run(self, name: str) -> None:
        """Act on the marked runs together when any are marked, else on the selected run.

        This is a run action's key. For marked runs, one confirmation says which actions apply to how many of
        them."""
        if self.marked and name in BULK_KEYS:
            run_actions.act_on_marked(self.session, sorted(self.marked), BULK_KEYS[name], self._acted)
        else:
            super().action_run(name)

    def _acted(self, decided) -> None:
        """After a bulk action: the runs it acted on are unmarked (those it refused stay marked, to look at)."""
        self.marked -= set(decided.done)
        self.reload()

    def _remark(self, run_ids) -> None:
        """Show each run's mark as it is now (the ID cell), and the count in the header."""
        at, colours = now(), palette(self.app)
        held = {row["id"]: row for row in self._rows}
        for run_id in run_ids:
            row = held.get(run_id)
            if row is not None:
                self._shown[run_id] = self._cells(row, at, colours)
                self.table.update_cell(run_id, "id", self._shown[run_id]["id"], update_width=True)
        self._summarize()

    def action_mark(self) -> None:
        """Space: mark the selected run (or unmark it), then move to the next."""
        run_id = self.selected_id()
        if run_id is None:
            return
        self.marked ^= {run_id}
        self._remark([run_id])
        self.table.action_cursor_down()

    def action_mark_matching(self) -> None:
        """`*`: mark every run the filter selects (every run without one), not only the rows loaded."""
        chosen = [] if self.refused else each_run(self.session.reader, self.where, now())
        found = [run["id"] for run in islice(chosen, MARK_LIMIT)]
        self.marked |= set(found)
        self._remark(found)
        more = f" (the first {MARK_LIMIT:,}; narrow the filter for the rest)" if len(found) == MARK_LIMIT else ""
        self.notify(f"{len(self.marked)} marked{more}: r, p, x, a and c act on them together; U unmarks",
                    timeout=4)

    def action_unmark(self) -> None:
        unmarked, self.marked = self.marked, set()
        self._remark(unmarked)

    def action_open(self) -> None:
        from .run import RunScreen

        run_id = self.selected_id()
        if run_id:
            self.app.push_screen(RunScreen(run_id))

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-shown")
        box.focus()

    def action_clear_filter(self) -> None:
        self.apply_filter("")

    def action_sort(self) -> None:
        self.needs_first = not self.needs_first
        self.loaded_rows = PAGE
        self.reload()

    def action_new(self) -> None:
        run_actions.new_run(self.session)

    def action_workers(self) -> None:
        from .workers import WorkersScreen

        self.app.push_screen(WorkersScreen())

    def action_schedules(self) -> None:
        from .schedules import SchedulesScreen

        self.app.push_screen(SchedulesScreen())

    def save_filter(self) -> None:
        """Ask a name for the filter shown, and keep it under that name (operate.save_filter)."""
        from .modals import SaveFilterModal

        words = str(self.where)

        def named(name: str | None) -> None:
            if name:
                self.session.act(operate.save_filter, name, words, done=lambda said: said)

        self.app.push_screen(SaveFilterModal(words), named)

    def action_spend(self) -> None:
        from .spend import SpendScreen

        self.app.push_screen(SpendScreen())
