"""The Textual app: screens over one database, a cheap poll for changes, and every action through
operate.py so a keystroke and a command can never disagree."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.binding import Binding

from . import config, notify
from .errors import TuiAgentError
from .messages import DataChanged
from .runtime.registry import Registry, load_registry
from .runtime.serve import GRACE_S
from .safe_text import one_line, visible
from .screens.palette import RunCommands
from .store import DatabaseError, EnvironmentStop, Store, notices, open_store
from .store.runs import data_version

POLL_S = 0.5
STOP_SIGNALS = [s for s in (getattr(signal, "SIGHUP", None), signal.SIGTERM) if s is not None]


class TuiAgentApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "tui-agent"
    COMMANDS = App.COMMANDS | {RunCommands}
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("m", "simulator", "Simulator: crash it yourself", show=False),   # the Runs footer shows it
    ]

    def __init__(self, db_path: Path, durability: str = "full", registry: Registry | None = None,
                 agent_modules: list[str] = (), poll_s: float | None = POLL_S, theme: str | None = None) -> None:
        """`theme`: the config file's (config.start_theme says which theme the app opens with)."""
        super().__init__()
        self.file_theme = theme
        self.durability, self.agent_modules = durability, list(agent_modules)
        self.store: Store = open_store(db_path, durability)     # actions write through this one
        self.db_path = self.store.path                           # what reopens it: a file, or a URL
        self.reader: Store = open_store(db_path, durability)    # reads and the change poll use this one
        self.registry = registry or load_registry(self.agent_modules)
        self.spawned: list[subprocess.Popen] = []                # workers this app started: stopped on quit
        self._poll_s = poll_s
        self._version: int | None = None
        self._unreadable = False                                 # the last poll could not read the database
        # The runner calls you: every notice after this one rings the bell and posts a desktop notification
        # (`desktop`, which tests replace). A display's own cursor: it never claims what --notify delivers.
        self.notice_cursor = notices.last_id(self.reader)
        self.desktop: Callable[[dict], Any] = notify.notify_desktop

    def on_mount(self) -> None:
        from .screens.runs import RunsScreen

        self.sub_title = self.store.label
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
        """One cheap call when nothing changed (SQLite's data_version pragma; on PostgreSQL, one round trip for
        the server's snapshot); the screen re-reads only when another commit happened.
        A database that cannot be read just now (the server away, the file locked) is said once in a toast and
        asked again at the next poll, never a crash: the reader opens its connection again by itself."""
        readable, version = self.reread(data_version, self.reader)
        if not readable:
            return
        if self._unreadable:
            self._unreadable = False
            self.notify("the database answers again", title="Database", timeout=4)
            self._version = None   # whatever happened meanwhile: read it all again
        if version != self._version:
            self._version = version
            self.screen.post_message(DataChanged())
            self.call_you()

    def reread(self, work: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        """(True, what `work` returned), or (False, None) when the database cannot be read just now: said once in
        a toast until a poll reads it again. A screen re-reading after a change goes through here too, as the
        server may go away between the poll and the re-read; the screen keeps what it shows."""
        try:
            return True, work(*args)
        except (DatabaseError, EnvironmentStop) as e:
            stop = self.reader.stopped(e) if isinstance(e, DatabaseError) else e
            if stop is None:
                raise
            if not self._unreadable:
                self._unreadable = True
                self.notify(f"{stop}; trying again", title="Database", severity="error", timeout=10)
            return False, None

    def call_you(self) -> None:
        """Each run that came to need a person (or is reminded of) since the last look: the bell, a desktop
        notification where the platform has one, and a toast, once per notice; none for a notice whose need has
        passed by now (decided, resumed, ended)."""
        for notice in notices.after(self.reader, self.notice_cursor):
            self.notice_cursor = notice["id"]
            if notice["superseded"]:
                continue
            self.bell()
            self.desktop(notice)
            self.notify(f"{notify.state_of(notice)}: {one_line(notice['message'], 160)} "
                        f"({notify.command_for(notice)})", title=notify.headline(notice), severity="warning",
                        timeout=10)

    def notify(self, message: str, *, title: str = "", markup: bool = False, **kwargs: Any) -> None:
        """Every toast, from any screen: what a run, a refusal or the database said, so its text is never read as
        markup (`markup`, which Textual's widgets pass on, is ignored) and what a terminal would act on in it is
        made visible (safe_text.visible)."""
        super().notify(visible(message), title=visible(title), markup=False, **kwargs)

    def changed(self) -> None:
        """After an action: refresh now rather than at the next poll."""
        self.screen.post_message(DataChanged())

    def guard(self, work: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """(True, result), or (False, None) after a toast says in one line why not: what the CLI would print
        and exit with (a refusal, a run that is gone, the database busy, read-only, full or damaged), for
        the reads before an action as much as for its write."""
        try:
            return True, work(*args, **kwargs)
        except TuiAgentError as e:
            said = str(e)
        except DatabaseError as e:
            stop = self.reader.stopped(e)
            if stop is None:
                raise
            said = str(stop)
        self.notify(said, title="Not done", severity="error", timeout=6)
        return False, None

    def act(self, action: Callable[..., Any], *args: Any, done: str | Callable[[Any], str] | None = None,
            **kwargs: Any) -> Any:
        """Run an operate.py action; a toast says what happened (or, one line, why it could not)."""
        acted, result = self.guard(action, *args, **kwargs)
        if not acted:
            return None
        if done:
            self.notify(done(result) if callable(done) else done, timeout=4)
        self.changed()
        return result

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
        for process in self.spawned:
            if process.poll() is None:
                process.terminate()
        for process in self.spawned:  # each finishes its current step first, as long as its grace period allows
            try:
                process.wait(timeout=GRACE_S + 5)
            except subprocess.TimeoutExpired:
                process.kill()
        self.store.close()
        self.reader.close()
