"""The shape the list screens share: a summary line, a table with a row cursor, a strip that
explains the selected row, and the footer; re-read whenever the database changed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static

from ..messages import DataChanged
from ..widgets.footer import KeysFooter


class TableScreen(Screen):
    COLUMNS: list[tuple[str, str]] = []
    TABLE_ID = "table"
    STRIP_ID = "situation"
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield Static(id="summary", classes="summary")
        yield from self.above_table()
        table = DataTable(id=self.TABLE_ID, cursor_type="row", zebra_stripes=True)
        for label, key in self.COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Static(id=self.STRIP_ID, classes="situation")
        yield KeysFooter()

    def above_table(self) -> ComposeResult:
        yield from ()

    def reload(self) -> None:
        raise NotImplementedError

    def selected_key(self) -> str | None:
        table = self.query_one(DataTable)
        if table.row_count == 0:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def on_data_changed(self, message: DataChanged) -> None:
        self.reload()

    def on_screen_resume(self) -> None:
        self.reload()

    def action_cursor_down(self) -> None:
        self.query_one(DataTable).action_cursor_down()

    def action_cursor_up(self) -> None:
        self.query_one(DataTable).action_cursor_up()
