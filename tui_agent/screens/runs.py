"""Runs (home): find a run. What needs a person sorts first; the strip under the table says what
the selected run is waiting for and which key acts on it."""

from __future__ import annotations

from collections.abc import Callable

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input

from ..forecast import WINDOW, sparkline
from ..format import age
from ..report import busiest_budget, cost_window, counts, runs_page
from ..runtime.clock import now
from ..states import RunStatus
from ..widgets.gauges import level_style
from ..widgets.safe import safe
from ..widgets.status import STATUSES, badge
from ..widgets.theme import Palette, palette, style
from . import run_actions
from .situation import situation_over_time, workers_alive
from .table import TableScreen

PAGE = 200
COLUMNS = [("ID", "id"), ("AGENT", "agent"), ("STATUS", "status"), ("STEP", "step"), ("ATT", "att"),
           ("WORKER", "worker"), ("BUDGET", "budget"), ("BURN", "burn"), ("AGE", "age")]
NARROW_DROPS = ("worker", "att", "burn")  # left out while the table is too wide, in this order (a running run's
                                          # strip names the first two); BUDGET and AGE stay
AGE_TICK_S = 5.0                   # ages and "N min ago" advance this often, from the rows already held
BUDGET_SOFT = 0.7                  # the BUDGET column turns the gauges' soft colour from here


def _width(cell: Text | str) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


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


def parse_filter(text: str) -> tuple[str | None, str | None]:
    """`status:waiting nightly` -> ("waiting", "nightly")."""
    status, words = None, []
    for word in text.split():
        if word.startswith("status:"):
            status = word.removeprefix("status:") or None
        else:
            words.append(word)
    return status, " ".join(words) or None


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
        Binding("m", "app.simulator", "Simulator"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    # What a narrow footer keeps longest: the ways to start and to find things, the Simulator among them; the
    # strip names the key that acts on the selected run, so the run actions are the first to go.
    FOOTER = ("slash", "n", "w", "s", "m", "r", "p", "x", "c", "a")

    def __init__(self) -> None:
        super().__init__()
        self.status_filter: str | None = None
        self.text_filter: str | None = None
        self.needs_first = True
        self.loaded_rows = PAGE               # the rows a reload re-reads: the pages the person scrolled to
        self._rows: list[dict] = []
        self._next: tuple[int, tuple[float, str] | None] | None = None  # where the next page starts, if any
        self._shown: dict[str, dict] = {}     # the cells of each run, so a refresh updates only what changed
        self._columns = list(COLUMNS)         # the columns on screen: a narrow one leaves some out
        self._saying: Callable[[float], str] = lambda at: ""  # the strip, said at an instant

    def above_table(self) -> ComposeResult:
        yield Input(placeholder="filter: status:waiting nightly   (enter applies, escape clears)",
                    id="filter", classes="filter")

    def on_mount(self) -> None:
        self.reload()
        self.table.focus()
        self.set_interval(AGE_TICK_S, self.tick)

    # -- data -----------------------------------------------------------------------------------

    def _sections(self) -> tuple[bool | None, ...]:
        """The `needs_person` of each section, top to bottom: the runs that need a person, then the others
        (each newest first), or one section of every run newest first."""
        return (True, False) if self.needs_first else (None,)

    def _read(self, limit: int, section: int = 0, before: tuple[float, str] | None = None,
              ) -> tuple[list[dict], tuple[int, tuple[float, str] | None] | None]:
        """Up to `limit` rows from `_sections()[section]` after the keyset cursor `before` (from its newest
        without one), going on to the next section from its newest when one runs out; and where the page
        after these starts (section and cursor), None when every section ran out."""
        reader, sections = self.app.reader, self._sections()
        query = {"status": self.status_filter, "text": self.text_filter}
        rows: list[dict] = []
        while True:
            rows += runs_page(reader, limit=limit - len(rows), needs_person=sections[section], before=before,
                              **query)
            if len(rows) == limit:       # this section may hold more: the next page asks it first
                return rows, (section, (rows[-1]["created_at"], rows[-1]["id"]))
            if section + 1 == len(sections):
                return rows, None
            section, before = section + 1, None

    def reload(self) -> None:
        """Re-read the loaded pages (`loaded_rows`, the first page and those the person scrolled to, not
        the whole table) and repaint what changed, keeping the cursor on the same run: when the same runs
        are shown in the same order in the same columns only changed cells are updated (their columns'
        widths following), else the table is rebuilt."""
        read, self._next = self._read(self.loaded_rows)
        held: dict[str, dict] = {}
        for row in read:     # each section is its own read: a run that moved between them is shown once
            held.setdefault(row["id"], row)
        at, colours = now(), palette(self.app)
        self._paint(list(held.values()), {run_id: self._cells(row, at, colours) for run_id, row in held.items()})
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
                if selected and selected in cells:
                    table.move_cursor(row=table.get_row_index(selected), animate=False)
        self._rows, self._shown, self._columns = rows, cells, columns

    def next_page(self) -> None:
        """The next PAGE rows, read from the keyset cursor where the held rows end (only those rows, however
        far the person scrolled) and added under them; the rows held stay as they are and the cursor stays."""
        if self._next is None:
            return
        rows, self._next = self._read(PAGE, *self._next)
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
        step = f"{row['current_step'] or 0}" + (f"/{row['total_steps']}" if row["total_steps"] else "")
        busiest = busiest_budget(row)
        # BURN: cost per step of a running run's last WINDOW entries (one bounded read each), oldest left
        burn = Text(sparkline(cost_window(self.app.reader, row["id"], WINDOW)),
                    style=style(colours, "text-primary")) if row["status"] == RunStatus.RUNNING else ""
        budget = Text(f"{busiest[0].removesuffix('_usd')} {busiest[1]:.0%}",
                      style=level_style(busiest[1], BUDGET_SOFT, colours=colours)) \
            if busiest else Text("–", style="dim")
        return dict(zip((key for _, key in COLUMNS), (
            row["id"], safe(row["agent"]), badge(row["status"], row["reason"], colours), step, str(row["attempt"]),
            safe(row["worker"] or "–"), budget, burn, age(at - row["created_at"]))))

    def _filter_text(self) -> str:
        return " ".join(filter(None, (self.status_filter and f"status:{self.status_filter}", self.text_filter)))

    def _summarize(self) -> None:
        figures = counts(self.app.reader)
        alive = workers_alive(self.app.reader)
        shown = f" · filter: {self.status_filter or ''} {self.text_filter or ''}" if (
            self.status_filter or self.text_filter) else ""
        self.summary.text = (
            f"{self.app.store.label} · workers {alive} {'●' if alive else '○'} · queued {figures['queued']} · "
            f"running {figures['running']} · needs you {figures['needs_you']}"
            f"{' · needs you first' if self.needs_first else ' · newest first'}{shown}")

    def _explain(self) -> None:
        """The strip for the selected run, read once; without one, why the table is empty."""
        run_id = self.selected_id()
        if run_id:
            self._saying = situation_over_time(self.app.reader, run_id)
        else:
            empty = self._nothing_shown()
            self._saying = lambda at: empty
        self._say(now())

    def _nothing_shown(self) -> str:
        if not (self.status_filter or self.text_filter):
            return "No runs yet: press n to start one."
        unknown = f": {self.status_filter} is not a status (statuses are: {', '.join(STATUSES)})" if (
            self.status_filter and self.status_filter not in STATUSES) else ""
        return f'no run matches "{self._filter_text()}"{unknown}; escape clears the filter'

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
        self.status_filter, self.text_filter = parse_filter(event.value)
        self.loaded_rows = PAGE
        self.table.focus()
        self.reload()

    # -- actions --------------------------------------------------------------------------------

    def run_target(self) -> tuple[str | None, None]:
        return self.selected_id(), None

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
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("-shown")
        self.status_filter = self.text_filter = None
        self.loaded_rows = PAGE
        self.table.focus()
        self.reload()

    def action_sort(self) -> None:
        self.needs_first = not self.needs_first
        self.loaded_rows = PAGE
        self.reload()

    def action_new(self) -> None:
        run_actions.new_run(self.app)

    def action_workers(self) -> None:
        from .workers import WorkersScreen

        self.app.push_screen(WorkersScreen())

    def action_schedules(self) -> None:
        from .schedules import SchedulesScreen

        self.app.push_screen(SchedulesScreen())
