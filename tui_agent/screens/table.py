"""The shape the list screens share: a summary line, a table with a row cursor, a strip that
explains the selected row, and the footer; re-read on the reader thread whenever the database changed."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable

from ..messages import DataChanged
from ..session import Reads
from ..store import Store
from ..widgets.caption import Caption
from ..widgets.footer import KeysFooter
from ..widgets.pending import Pending
from ..widgets.theme import follow_theme


class TableScreen(Reads, Screen):
    COLUMNS: list[tuple[str, str]] = []
    TABLE_ID = "table"
    STRIP_ID = "situation"
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield Caption(id="summary", classes="summary")
        yield from self.above_table()
        table: DataTable[Any] = DataTable(id=self.TABLE_ID, cursor_type="row", zebra_stripes=True)
        for label, key in self.COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Caption(id=self.STRIP_ID, classes="situation")
        yield Pending()
        yield KeysFooter()

    def on_mount(self) -> None:
        follow_theme(self, self.reload)      # the cells are Rich text in the theme's colours

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    @property
    def summary(self) -> Caption:
        return self.query_one("#summary", Caption)

    @property
    def strip(self) -> Caption:
        """The text under the table that explains the selected row."""
        return self.query_one(f"#{self.STRIP_ID}", Caption)

    def above_table(self) -> ComposeResult:
        yield from ()

    def load(self, store: Store) -> Any:
        """What the screen shows, read from `store` (on the reader thread, or on the loop for the first paint)."""
        raise NotImplementedError

    def show(self, loaded: Any) -> None:
        """Paint what `load` read."""
        raise NotImplementedError

    def reload(self) -> None:
        """Read again on the reader thread; the screen paints when it answers."""
        self.session.read(self, "reload", self.load, self.show)

    def reload_now(self) -> None:
        """The first paint, read on the loop: what a screen opens with."""
        self.show(self.load(self.session.reader))

    def selected_key(self) -> str | None:
        table = self.table
        if table.row_count == 0:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def on_data_changed(self, message: DataChanged) -> None:
        self.reload()

    def on_screen_resume(self) -> None:
        self.reload()

    def action_cursor_down(self) -> None:
        self.table.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.table.action_cursor_up()
