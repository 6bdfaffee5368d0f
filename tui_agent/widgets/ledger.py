"""The effect ledger of one run: each effect's name, key, state, attempts, last attempt and how long the
service still remembers its key."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from ..format import clock
from .journal import EFFECT_TONES, key_window
from .safe import safe
from .theme import Palette, palette, style

# the key last: it is the longest, and on a small terminal the columns before it matter more
COLUMNS = [("NAME", "name"), ("STATE", "state"), ("ATT", "att"), ("LAST ATTEMPT", "last"), ("KEY WINDOW", "window"),
           ("KEY", "key")]


class EffectLedger(DataTable):
    """The effect ledger, given by `set_effects(rows)` with the ledger rows in epoch times.

    Older generations are dimmed."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=True)
        self.rows_shown: list[tuple] = []
        self.generation: int | None = None

    def on_mount(self) -> None:
        for label, key in COLUMNS:
            self.add_column(label, key=key)

    def set_effects(self, effects: list[dict], generation: int, at: float) -> None:
        """Show a stretch of the ledger, the cursor staying on its effect when it is still shown (else on the same
        row number)."""
        colours = palette(self.app)
        rows = [self._cells(e, generation, at, colours) for e in effects]
        if rows == self.rows_shown:
            return
        keep = self.cursor_row
        keys = [key for _, key in rows]
        if self.rows_shown and self.rows_shown[min(keep, len(self.rows_shown) - 1)][1] in keys:
            keep = keys.index(self.rows_shown[min(keep, len(self.rows_shown) - 1)][1])
        self.clear()
        for cells, key in rows:
            self.add_row(*cells, key=key)
        self.rows_shown = rows
        if rows:
            self.move_cursor(row=min(keep, len(rows) - 1), animate=False)

    @staticmethod
    def _cells(e: dict, generation: int, at: float, colours: Palette) -> tuple[tuple, str]:
        old = e["generation"] != generation
        dim = "dim" if old else ""
        name = f"{e['name']} (g{e['generation']})" if old else e["name"]
        state = Text(e["state"], style=dim or style(colours, EFFECT_TONES.get(e["state"], "")))
        cells = (safe(Text(name, style=dim)), state, Text(str(e["attempts"]), style=dim),
                 Text(clock(e["attempted_at"], at), style=dim),
                 Text(key_window(e, at), style=dim), safe(Text(e["key"], style=dim)))
        return cells, f"{e['generation']}:{e['position']}"

    def position_at_cursor(self) -> tuple[int, int] | None:
        if not self.rows_shown:
            return None
        generation, position = self.rows_shown[self.cursor_row][1].split(":")
        return int(generation), int(position)
