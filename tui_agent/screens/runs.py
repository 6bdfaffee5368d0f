"""Runs (home): find a run. What needs a person sorts first; the strip under the table says what
the selected run is waiting for and which key acts on it."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input, Static

from ..report import busiest_budget
from ..runtime.clock import now
from ..store.runs import counts, runs_page
from ..store.workers import workers_listing
from ..widgets.status import badge
from . import run_actions
from .situation import situation
from .table import TableScreen

PAGE = 200
COLUMNS = [("ID", "id"), ("AGENT", "agent"), ("STATUS", "status"), ("STEP", "step"), ("ATT", "att"),
           ("WORKER", "worker"), ("BUDGET", "budget"), ("AGE", "age")]


def age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def parse_filter(text: str) -> tuple[str | None, str | None]:
    """`status:waiting nightly` -> ("waiting", "nightly")."""
    status, words = None, []
    for word in text.split():
        if word.startswith("status:"):
            status = word.removeprefix("status:") or None
        else:
            words.append(word)
    return status, " ".join(words) or None


class RunsScreen(TableScreen):
    COLUMNS = COLUMNS
    TABLE_ID = "runs"
    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("slash", "filter", "Filter"),
        Binding("n", "new", "New"),
        Binding("r", "resume", "Resume"),
        Binding("p", "park", "Park"),
        Binding("x", "cancel", "Cancel"),
        Binding("c", "reconcile", "Reconcile"),
        Binding("a", "approve", "Approve"),
        Binding("b", "budget", "Budget", show=False),
        Binding("o", "sort", "Sort", show=False),
        Binding("w", "workers", "Workers"),
        Binding("s", "schedules", "Schedules"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.status_filter: str | None = None
        self.text_filter: str | None = None
        self.needs_first = True
        self.loaded_rows = PAGE
        self._rows: list[dict] = []
        self._shown: dict[str, list] = {}     # the cells on screen, so a refresh updates only what changed

    def above_table(self) -> ComposeResult:
        yield Input(placeholder="filter: status:waiting nightly   (enter applies, escape clears)",
                    id="filter", classes="filter")

    def on_mount(self) -> None:
        self.reload()
        self.query_one(DataTable).focus()

    # -- data -----------------------------------------------------------------------------------

    def _fetch(self) -> list[dict]:
        reader = self.app.reader
        query = {"status": self.status_filter, "text": self.text_filter}
        if not self.needs_first:
            return runs_page(reader, limit=self.loaded_rows, **query)
        first = runs_page(reader, limit=self.loaded_rows, needs_person=True, **query)
        return first + runs_page(reader, limit=max(0, self.loaded_rows - len(first)), needs_person=False, **query)

    def reload(self) -> None:
        """Re-read the loaded pages and repaint what changed, keeping the cursor on the same run: when the
        same runs are shown in the same order only changed cells are updated, else the table is rebuilt."""
        table = self.query_one(DataTable)
        selected = self.selected_id()
        rows = self._fetch()
        at = now()
        cells = {row["id"]: self._cells(row, at) for row in rows}
        with self.app.batch_update():
            if [r["id"] for r in rows] == [r["id"] for r in self._rows]:
                for run_id, new in cells.items():
                    for (_, column), old_cell, new_cell in zip(COLUMNS, self._shown[run_id], new):
                        if old_cell != new_cell:
                            table.update_cell(run_id, column, new_cell)
            else:
                table.clear()
                for run_id, new in cells.items():
                    table.add_row(*new, key=run_id)
                if selected and selected in cells:
                    table.move_cursor(row=table.get_row_index(selected), animate=False)
        self._rows, self._shown = rows, cells
        self._summarize()
        self._explain()

    def _cells(self, row: dict, at: float) -> list:
        step = f"{row['current_step'] or 0}" + (f"/{row['total_steps']}" if row["total_steps"] else "")
        busiest = busiest_budget(row)
        budget = Text(f"{busiest[0].removesuffix('_usd')} {busiest[1]:.0%}",
                      style="bold red" if busiest[1] >= 1 else "#ffb000" if busiest[1] >= 0.7 else "") \
            if busiest else Text("–", style="dim")
        return [row["id"], row["agent"], badge(row["status"], row["reason"]), step, str(row["attempt"]),
                row["worker"] or "–", budget, age(at - row["created_at"])]

    def _summarize(self) -> None:
        figures = counts(self.app.reader)
        alive = [w for w in workers_listing(self.app.reader)
                 if w["stopped_at"] is None and now() - w["heartbeat_at"] < w["lease_s"]]
        shown = f" · filter: {self.status_filter or ''} {self.text_filter or ''}" if (
            self.status_filter or self.text_filter) else ""
        self.query_one("#summary", Static).update(
            f"{self.app.db_path.name} · workers {len(alive)} {'●' if alive else '○'} · queued {figures['queued']} · "
            f"running {figures['running']} · needs you {figures['needs_you']}"
            f"{' · needs you first' if self.needs_first else ' · newest first'}{shown}")

    def _explain(self) -> None:
        run_id = self.selected_id()
        text = situation(self.app.reader, run_id) if run_id else "No runs yet: press n to start one."
        self.query_one("#situation", Static).update(text)

    def selected_id(self) -> str | None:
        return self.selected_key()

    # -- events ---------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._explain()
        if event.cursor_row >= len(self._rows) - 5 and len(self._rows) >= self.loaded_rows:
            self.loaded_rows += PAGE      # the next page, keyset-paged: as cheap as the first
            self.reload()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.status_filter, self.text_filter = parse_filter(event.value)
        self.loaded_rows = PAGE
        self.query_one(DataTable).focus()
        self.reload()

    # -- actions --------------------------------------------------------------------------------

    def _with_run(self, act) -> None:
        run_id = self.selected_id()
        if run_id is None:
            self.notify("no run selected", severity="warning")
        else:
            act(self.app, run_id)

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
        self.query_one(DataTable).focus()
        self.reload()

    def action_sort(self) -> None:
        self.needs_first = not self.needs_first
        self.reload()

    def action_new(self) -> None:
        run_actions.new_run(self.app)

    def action_resume(self) -> None:
        self._with_run(run_actions.resume)

    def action_park(self) -> None:
        self._with_run(run_actions.park)

    def action_cancel(self) -> None:
        self._with_run(run_actions.cancel)

    def action_reconcile(self) -> None:
        self._with_run(run_actions.reconcile)

    def action_approve(self) -> None:
        self._with_run(run_actions.approve)

    def action_budget(self) -> None:
        self._with_run(run_actions.raise_budget)

    def action_workers(self) -> None:
        from .workers import WorkersScreen

        self.app.push_screen(WorkersScreen())

    def action_schedules(self) -> None:
        from .schedules import SchedulesScreen

        self.app.push_screen(SchedulesScreen())
