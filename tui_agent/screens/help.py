"""`?`: every key of every screen, read from their bindings so the help cannot drift."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label


def _screens():
    from .run import RunScreen
    from .runs import RunsScreen
    from .schedules import SchedulesScreen
    from .workers import WorkersScreen

    return [("Runs", RunsScreen), ("Run", RunScreen), ("Workers", WorkersScreen), ("Schedules", SchedulesScreen)]


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Keys", classes="title")
            table = DataTable(classes="help-table", cursor_type="none", zebra_stripes=True)
            table.add_columns("SCREEN", "KEY", "ACTION")
            for name, screen in [("Everywhere", self.app.__class__), *_screens()]:
                for binding in screen.BINDINGS:
                    if isinstance(binding, Binding) and binding.description:
                        table.add_row(name, self.app.get_key_display(binding), binding.description)
            table.add_row("Everywhere", "ctrl+p", "Command palette: the actions for the current run")
            yield table

    def action_dismiss(self) -> None:
        self.dismiss(None)
