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


def _own_bindings(screen: type) -> list[Binding]:
    """The bindings a screen class and its tui_agent base classes declare (Textual's own are not ours to list)."""
    seen, found = set(), []
    for klass in screen.__mro__:
        if not klass.__module__.startswith("tui_agent"):
            continue
        for binding in getattr(klass, "BINDINGS", []):
            if isinstance(binding, Binding) and binding.description and binding.key not in seen:
                seen.add(binding.key)
                found.append(binding)
    return found


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Keys", classes="title")
            table = DataTable(classes="help-table", cursor_type="none", zebra_stripes=True)
            table.add_columns("SCREEN", "KEY", "ACTION")
            for name, screen in [("Everywhere", self.app.__class__), *_screens()]:
                for binding in _own_bindings(screen):
                    table.add_row(name, self.app.get_key_display(binding), binding.description)
            table.add_row("Everywhere", "ctrl+p", "Command palette: the actions for the current run")
            yield table

    def action_dismiss(self) -> None:
        self.dismiss(None)
