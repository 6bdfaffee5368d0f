"""`?`: every key of every screen, read from their bindings so the help cannot drift."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static


def _screens():
    from .diff import DiffScreen
    from .run import RunScreen
    from .runs import RunsScreen
    from .schedules import SchedulesScreen
    from .simulator import SimulatorScreen
    from .workers import WorkersScreen

    return [("Runs", RunsScreen), ("Run", RunScreen), ("Diff", DiffScreen), ("Workers", WorkersScreen),
            ("Schedules", SchedulesScreen), ("Simulator", SimulatorScreen)]


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


def _keys_table(keys: list[tuple[str, str]]) -> Table:
    """Key and action in two columns; an action too long for the width wraps under itself."""
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True, min_width=6, style="bold")
    table.add_column(ratio=1, overflow="fold")
    for key, action in keys:
        table.add_row(key, action)
    return table


class HelpScreen(ModalScreen):
    """The keys of the screen it was opened from first, then those that work everywhere, then the others;
    the descriptions wrap to the dialog's width."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, current: type | None = None) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        screens = _screens()
        ordered = [*(s for s in screens if s[1] is self.current), ("Everywhere", self.app.__class__),
                   *(s for s in screens if s[1] is not self.current)]
        with Vertical(classes="dialog"):
            yield Label("Keys", classes="title")
            with VerticalScroll(classes="help-keys"):
                for name, screen in ordered:
                    yield Label(f"{name} (this screen)" if screen is self.current else name, classes="help-heading")
                    keys = [(self.app.get_key_display(b), b.description) for b in _own_bindings(screen)]
                    if name == "Everywhere":
                        keys.append(("ctrl+p", "Command palette: the actions for the current run, before you type"))
                    yield Static(_keys_table(keys), classes="help-section")

    def action_dismiss(self) -> None:  # type: ignore[override]  # the key's action takes no result
        self.dismiss(None)
