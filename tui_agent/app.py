"""The Textual app: screens over one database, a cheap poll for changes, and every action through
operate.py so a keystroke and a command can never disagree."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive

from . import config
from .messages import DataChanged, Loaded
from .runtime.registry import Registry, load_registry
from .runtime.serve import GRACE_S
from .safe_text import one_line, visible
from .screens.palette import RunCommands
from .services import notify
from .session import READ_TIMEOUT_S, Session
from .store import Store, notices, open_store
from .store.runs import data_version

POLL_S = 0.5
STOP_SIGNALS = [s for s in (getattr(signal, "SIGHUP", None), signal.SIGTERM) if s is not None]


def _look(store: Store, last: int | None, cursor: int) -> tuple[int, list[dict]]:
    """The poll's read: the database's version, and the notices after `cursor` when it moved since `last`."""
    version = data_version(store)
    return version, notices.after(store, cursor) if version != last else []


class TuiAgentApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "tui-agent"
    COMMANDS = App.COMMANDS | {RunCommands}
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("m", "simulator", "Simulator: crash it yourself", show=False),   # the Runs footer shows it
    ]

    pending: reactive[tuple[str, ...]] = reactive(())    # the actions in flight (widgets/pending.py shows them)

    def __init__(self, db_path: Path, durability: str = "full", *, registry: Registry | None = None,
                 agent_modules: Sequence[str] = (), poll_s: float | None = POLL_S, theme: str | None = None) -> None:
        """`theme`: the config file's (config.start_theme says which theme the app opens with)."""
        super().__init__()
        self.file_theme = theme
        opened = partial(open_store, db_path, durability, statement_timeout_s=READ_TIMEOUT_S)
        store = opened(any_thread=True)        # the actor's: actions write through this one
        self.session = Session(self, store, reader=opened(), loading=opened(any_thread=True),
                               registry=registry or load_registry(list(agent_modules)), durability=durability,
                               agent_modules=list(agent_modules))
        self.store, self.reader, self.spawned = store, self.session.reader, self.session.spawned
        self._poll_s = poll_s
        self._version: int | None = None
        # The runner calls you: every notice after this one rings the bell and posts a desktop notification
        # (`desktop`, which tests replace). A display's own cursor: it never claims what --notify delivers.
        self.notice_cursor = notices.last_id(self.reader)
        self.desktop: Callable[[dict], Any] = notify.notify_desktop

    @property
    def registry(self) -> Registry:
        return self.session.registry

    @registry.setter
    def registry(self, registry: Registry) -> None:
        self.session.registry = registry

    def on_mount(self) -> None:
        from .screens.runs import RunsScreen

        self.sub_title = self.session.label
        opening = config.start_theme(self.file_theme, self.available_themes)
        if opening:
            self.theme = opening
        self.watch(self, "theme", self.keep_theme, init=False)
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:  # a closed terminal still stops the workers we started
            loop.add_signal_handler(signum, self.exit)
        self.push_screen(RunsScreen())
        if self._poll_s:
            self.set_interval(self._poll_s, self.poll)

    def keep_theme(self, theme: str) -> None:
        """A theme chosen here (the palette's "Change theme") is the one the next launch opens with."""
        try:
            config.save_theme(theme, self.file_theme)
        except OSError as e:
            self.notify(f"the theme is not kept for the next launch: cannot write {config.state_path()} "
                        f"({e.strerror})", title="Theme", severity="warning", timeout=6)

    def poll(self) -> None:
        """Ask, on the reader thread, whether another commit happened, and re-read the screen only then.

        It is one cheap call when nothing changed (SQLite's data_version pragma; on PostgreSQL, one round trip for the
        server's snapshot). A database that cannot be read just now (the server away, the file locked) is said once in
        a toast and asked again at the next poll, never a crash: the reader opens its connection again by itself."""
        self.session.read(self, "poll", partial(_look, last=self._version, cursor=self.notice_cursor), self._polled)

    def _polled(self, found: tuple[int, list[dict]]) -> None:
        version, fresh = found
        if self.session.unreadable:
            self.session.unreadable = False
            self.notify("the database answers again", title="Database", timeout=4)
            self._version = None   # whatever happened meanwhile: read it all again
        if version != self._version:
            self._version = version
            self.screen.post_message(DataChanged())
            self.call_you(fresh)

    def on_loaded(self, message: Loaded) -> None:
        self.session.delivered(message)

    def call_you(self, fresh: list[dict]) -> None:
        """Call the person for each run that came to need one, or is reminded of, since the last look.

        The notices are `fresh`, read with the poll. Each gets the bell, a desktop notification where the platform
        has one, and a toast, once per notice; none is given for a notice whose need has passed by now (decided,
        resumed, ended)."""
        for notice in fresh:
            if notice["id"] <= self.notice_cursor:    # an earlier poll's answer told it already
                continue
            self.notice_cursor = notice["id"]
            if notice["superseded"]:
                continue
            self.bell()
            self.desktop(notice)
            self.notify(f"{notify.state_of(notice)}: {one_line(notice['message'], 160)} "
                        f"({notify.command_for(notice)})", title=notify.headline(notice), severity="warning",
                        timeout=10)

    def notify(self, message: str, *, title: str = "", markup: bool = False, **kwargs: Any) -> None:
        """Show a toast from any screen, never read as markup and with what a terminal would act on made visible.

        A toast says what a run, a refusal or the database said, so `markup`, which Textual's widgets pass on, is
        ignored, and the text goes through safe_text.visible."""
        super().notify(visible(message), title=visible(title), markup=False, **kwargs)

    def action_help(self) -> None:
        from .screens.help import HelpScreen

        self.push_screen(HelpScreen(type(self.screen)))     # that screen's keys come first

    def action_simulator(self) -> None:
        """The Simulator, at the document's defaults the first time, then as it was left (escape goes back)."""
        from .screens.simulator import SimulatorScreen

        if not self.is_screen_installed("simulator"):
            self.install_screen(SimulatorScreen(), "simulator")
        if self.get_screen("simulator") not in self.screen_stack:
            self.push_screen("simulator")

    def on_unmount(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
        for process in self.session.spawned:
            if process.poll() is None:
                process.terminate()
        for process in self.session.spawned:  # each finishes its current step first, as long as its grace period allows
            try:
                process.wait(timeout=GRACE_S + 5)
            except subprocess.TimeoutExpired:
                process.kill()
        self.session.close()
