"""Spend (`$` from the runs list): what the model calls of the last 30 local days cost, a bar per day and the same
table as `tui-agent spend`, by day, agent or model (`g`), as charged or priced by today's table (`r`)."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static
from textual.widgets.data_table import ColumnKey

from ..format import NONE, count, spent, usd
from ..runtime.clock import now
from ..spend import BY, days_back, report
from ..store import Store
from ..widgets.safe import safe
from .table import TableScreen

DAYS = 30                  # the days the view reads and draws, up to today
CHART_ROWS = 4             # the bars' height in rows, an eighth of a row at a time
EIGHTHS = " ▁▂▃▄▅▆▇█"
COLUMNS = [("DAY", "key"), ("COST", "cost"), ("BILLED?", "billed"), ("CALLS", "calls"), ("RUNS", "runs"),
           ("IN", "input"), ("CACHE R/W", "cache"), ("OUT", "output")]


def bars(values: list[float], rows: int = CHART_ROWS) -> list[str]:
    """A bar per value, `rows` high at the largest, drawn with block characters, top row first.

    Each value takes two columns, the bar and a gap. A value above zero shows at least an eighth of a row; zero shows
    nothing."""
    top = max(values, default=0) or 1
    heights = [max(1, round(value / top * rows * 8)) if value > 0 else 0 for value in values]
    lines = []
    for row in range(rows - 1, -1, -1):
        cells = [EIGHTHS[min(8, max(0, height - row * 8))] for height in heights]
        lines.append(" ".join(cells))
    return lines


class SpendScreen(TableScreen):
    COLUMNS = COLUMNS
    TABLE_ID = "spend"
    STRIP_ID = "spend-strip"
    BINDINGS = [
        Binding("g", "group", "Group by"),
        Binding("r", "reprice", "Today's prices"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.by = "day"
        self.reprice = False
        self._rows: dict[str, dict] = {}

    def above_table(self) -> ComposeResult:
        yield Static(id="chart", classes="chart")

    def on_mount(self) -> None:
        self.reload_now()
        self.table.focus()

    def load(self, store: Store) -> tuple[str, bool, date, dict]:
        """The report of the last DAYS days, grouped and priced as asked now."""
        at, by, reprice = now(), self.by, self.reprice
        today = datetime.fromtimestamp(at).astimezone().date()
        first = datetime.combine(today - timedelta(days=DAYS - 1), datetime.min.time()).astimezone()
        return by, reprice, today, report(store, at, by=by, since=first.timestamp(), reprice=reprice)

    def show(self, loaded: tuple[str, bool, date, dict]) -> None:
        """Repaint the chart and the table (the cursor stays on the same row)."""
        by, reprice, today, done = loaded
        if (by, reprice) != (self.by, self.reprice):    # asked before g or r: their own read follows
            return
        axis = days_back(today, DAYS)
        self._chart(axis, [done["daily"].get(day, 0.0) for day in axis])
        selected = self.selected_key()
        self._rows = {row[self.by]: row for row in done["rows"]}
        table = self.table
        regroup = str(table.columns[ColumnKey("key")].label) != self.by.upper()
        with self.app.batch_update():
            table.clear(columns=regroup)
            for label, key in COLUMNS if regroup else ():
                table.add_column(self.by.upper() if key == "key" else label, key=key)
            for name, row in self._rows.items():
                table.add_row(*self._cells(name, row), key=name)
            if selected in self._rows:
                table.move_cursor(row=table.get_row_index(selected), animate=False)
        total = done["total"]
        billed = f" · possibly billed {usd(total['possibly_billed_usd'])}" if total["possibly_billed_usd"] else ""
        prices = f"today's prices ({done['prices_date']})" if self.reprice else "as charged"
        self.summary.text = (f"{self.session.label} · spend of the last {DAYS} days (local) by {self.by} · "
                             f"{spent(total['cost_usd'], total['unpriced_calls'], 0)}{billed} · {prices}")
        self._explain()

    def _chart(self, axis: list[str], values: list[float]) -> None:
        top = max(values, default=0)
        lines = bars(values)
        label = f"{usd(top)} " if top else ""
        width = len(label)
        shown = [f"{label if i == 0 else ' ' * width}{line}" for i, line in enumerate(lines)]
        first, last = (datetime.fromisoformat(day).strftime("%b %d") for day in (axis[0], axis[-1]))
        span = len(lines[0])
        shown.append(" " * width + first + last.rjust(span - len(first)))
        self.query_one("#chart", Static).update(Text("\n".join(shown), style="bold"))

    @staticmethod
    def _cells(name: str, row: dict) -> list:
        cache = f"{count(row['cache_read_tokens'])}/{count(row['cache_write_tokens'])}" if (
            row["cache_read_tokens"] or row["cache_write_tokens"]) else NONE
        billed = usd(row["possibly_billed_usd"]) if row["possibly_billed_usd"] else NONE
        return [safe(name), spent(row["cost_usd"], row["unpriced_calls"], 0), billed, str(row["calls"]),
                str(row["runs"]), count(row["input_tokens"]), cache, count(row["output_tokens"])]

    def _explain(self) -> None:
        name = self.selected_key()
        row = self._rows.get(name) if name else None
        if row is None:
            self.strip.text = (f"No model calls in the last {DAYS} days; tui-agent spend --since reads further "
                               "back.")
            return
        said = [f"{name}: {spent(row['cost_usd'], row['unpriced_calls'], 0)} over {row['calls']:,} answered "
                f"call{'s' * (row['calls'] != 1)} of {row['runs']:,} run{'s' * (row['runs'] != 1)}; "
                f"{row['input_tokens']:,} input tokens ({row['cache_read_tokens']:,} read from the prompt cache, "
                f"{row['cache_write_tokens']:,} written to it), {row['output_tokens']:,} output"]
        if row["possibly_billed_usd"]:
            said.append(f"calls in flight when their worker died may have been billed "
                        f"{usd(row['possibly_billed_usd'])} more (BILLED?)")
        if row["unpriced_calls"]:
            said.append(f"{row['unpriced_calls']} call{'s' * (row['unpriced_calls'] != 1)} without a price, not "
                        "counted in the cost")
        self.strip.text = "; ".join(said)

    def on_data_table_row_highlighted(self) -> None:
        self._explain()

    def action_group(self) -> None:
        self.by = BY[(BY.index(self.by) + 1) % len(BY)]
        self.reload()

    def action_reprice(self) -> None:
        self.reprice = not self.reprice
        self.reload()
