"""What the screens use of the TUI: its stores, the registry, the reader and the actor, `guard` and `act`.

Screens hold this, never the App (tests/docs/test_layering.py). Reads a screen makes after a change, and the App's
change poll, run on the reader, a thread with a connection of its own; actions run on the actor, a thread that
owns the writing connection. Each posts what it got back as a `Loaded` message, and the screen paints in its
handler, so a slow database never holds a key (docs/architecture.md, "The TUI").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App
from textual.message_pump import MessagePump

from .errors import TuiAgentError
from .messages import DataChanged, Loaded
from .runtime.registry import Registry
from .store import DatabaseError, EnvironmentStop, Store

READ_TIMEOUT_S = 10.0    # the statement timeout of the TUI's PostgreSQL sessions
CLOSE_WAIT_S = 20.0      # how long quitting waits for an action in flight to commit


def pending_label(action: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Hashable, str]:
    """The key that tells an action asked twice from another, and the words the screen shows while it runs.

    Both are made of the action's name and its plain (text or number) arguments, by position or by keyword, in
    the order given: "start hello" for `act(operate.start, registry, agent_name="hello", ...)`."""
    named = [str(a) for a in (*args, *kwargs.values()) if isinstance(a, (str, int))]
    return (action.__name__, *named), " ".join([action.__name__.replace("_", " "), *named[:1]])


@dataclass
class _Asked:
    work: Callable[[Store], Any]
    answer: Callable[[Any, Exception | None], None]


class Lane:
    """A long-lived daemon thread that owns `store` and runs what it is asked, one at a time, oldest key first.

    Only the newest ask of each key waits: a screen that asks again while its read runs gets one more read with
    its newest request, not a queue. `answer(value, error)` is called on the thread: it posts, never paints."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self._wanted: dict[Hashable, _Asked] = {}
        self._running: Hashable | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def ask(self, key: Hashable, work: Callable[[Store], Any], answer: Callable[[Any, Exception | None], None],
            ) -> None:
        with self._changed:
            self._wanted.pop(key, None)
            self._wanted[key] = _Asked(work, answer)
            self._changed.notify()

    def busy(self) -> bool:
        """Something asked has not been answered yet."""
        with self._changed:
            return bool(self._wanted) or self._running is not None

    def close(self) -> None:
        """Stop after the work in hand (what waits is dropped), then close the store."""
        with self._changed:
            self._closed = True
            self._wanted.clear()
            self._changed.notify()
        self._thread.join(CLOSE_WAIT_S)
        if not self._thread.is_alive():
            self.store.close()

    def _serve(self) -> None:
        while True:
            with self._changed:
                while not self._wanted and not self._closed:
                    self._changed.wait()
                if self._closed:
                    return
                self._running = key = next(iter(self._wanted))
                asked = self._wanted.pop(key)
            value, error = None, None
            try:
                value = asked.work(self.store)
            except Exception as e:   # passed to the loop: a database's stop is said there, anything else raised
                error = e
            try:
                asked.answer(value, error)
            finally:
                with self._changed:
                    self._running = None


@dataclass
class Session:
    """The TUI's stores and threads, as the screens use them. `reader` reads on the event loop (a screen's
    first paint, a page the cursor reached); `read` hands a re-read to the reader thread; `act` an action to
    the actor. `app` is where toasts go and what shows the actions pending (its `pending` reactive)."""

    app: App
    store: Store                  # the actor's: actions write through it, on the actor's thread
    reader: Store                 # the event loop's own reads
    loading: Store                # the reader thread's
    registry: Registry
    durability: str = "full"
    agent_modules: list[str] = field(default_factory=list)
    spawned: list = field(default_factory=list)     # worker processes this app started: stopped on quit

    def __post_init__(self) -> None:
        self.db_path: Path | str = self.store.path     # what reopens it: a file, or a URL
        self.loader = Lane(self.loading, "tui-agent reader")
        self.actor = Lane(self.store, "tui-agent actor")
        self.pending: dict[Hashable, str] = {}         # the actions in flight, by key: what they are
        self.unreadable = False                          # the last read could not reach the database
        self._undelivered = 0                            # answers posted and not yet handled
        self._counting = threading.Lock()

    # -- reads ------------------------------------------------------------------------------------

    def read(self, target: MessagePump, key: Hashable, work: Callable[[Store], Any],
             paint: Callable[[Any], None]) -> None:
        """Run `work(store)` on the reader thread, then `paint(what it returned)` in `target`'s Loaded handler.

        A newer read of the same `key` from `target` while this one waits replaces it."""
        self.loader.ask((id(target), key), work, partial(self._post, target, paint))

    def _post(self, target: MessagePump, paint: Callable[[Any], None], value: Any, error: Exception | None) -> None:
        with self._counting:
            if target.post_message(Loaded(paint, value, error)):
                self._undelivered += 1

    def delivered(self, message: Loaded) -> None:
        """A `Loaded` handler's body: paint, or say in a toast why the database could not be read (a real bug
        is raised)."""
        with self._counting:
            self._undelivered -= 1
        if message.error is None:
            message.paint(message.value)
        elif isinstance(message.error, (DatabaseError, EnvironmentStop)):
            self.cannot_read(message.error)
        elif isinstance(message.error, TuiAgentError):
            self.app.notify(str(message.error), severity="error")
        else:
            raise message.error

    def cannot_read(self, error: DatabaseError | EnvironmentStop) -> None:
        """Say once in a toast that the database cannot be read just now, until a poll reads it again.

        The server may be away, a statement timed out, or the file locked. The screen keeps what it shows."""
        stop = self.reader.stopped(error) if isinstance(error, DatabaseError) else error
        if stop is None:
            raise error
        if not self.unreadable:
            self.unreadable = True
            self.app.notify(f"{stop}; trying again", title="Database", severity="error", timeout=10)

    def busy(self) -> bool:
        """A read or an action asked and not yet painted (what a test waits for)."""
        with self._counting:
            undelivered = self._undelivered
        return bool(undelivered) or self.loader.busy() or self.actor.busy()

    # -- actions ----------------------------------------------------------------------------------

    def guard(self, work: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """Run `work` and return (True, result), or (False, None) after a toast says why not.

        The toast's one line is what the CLI would print and exit with (a refusal, a run that is gone, the database
        busy, read-only, full or damaged), for the reads before an action as much as for its write."""
        try:
            return True, work(*args, **kwargs)
        except (TuiAgentError, DatabaseError) as e:
            self._refused(e)
            return False, None

    def _refused(self, error: Exception) -> None:
        if isinstance(error, TuiAgentError):
            said = str(error)
        elif isinstance(error, DatabaseError) and (stop := self.reader.stopped(error)) is not None:
            said = str(stop)
        else:
            raise error
        self.app.notify(said, title="Not done", severity="error", timeout=6)

    def act(self, action: Callable[..., Any], *args: Any, done: str | Callable[[Any], str] | None = None,
            then: Callable[[Any], None] | None = None, **kwargs: Any) -> None:
        """Run an operate.py action on the actor's thread: `action(store, *args, **kwargs)`. While it runs the
        screen shows it pending, and the same action on the same run asked again is refused; then a toast says
        what happened (or, one line, why it could not), the screen re-reads, and `then(result)` follows."""
        key, what = pending_label(action, args, kwargs)
        if key in self.pending:
            self.app.notify(f"{what}: still being done; it answers in a moment", severity="warning", timeout=4)
            return
        self.pending[key] = what
        self._show_pending()

        def run(store: Store) -> tuple[Any, Exception | None]:
            try:
                return action(store, *args, **kwargs), None
            except (TuiAgentError, DatabaseError) as e:   # a refusal, said by _acted; a bug is raised on the loop
                return None, e

        self.actor.ask(key, run, partial(self._post, self.app, partial(self._acted, key, done, then)))

    def _acted(self, key: Hashable, done: str | Callable[[Any], str] | None, then: Callable[[Any], None] | None,
               answer: tuple[Any, Exception | None]) -> None:
        del self.pending[key]
        self._show_pending()
        result, error = answer
        if error is not None:
            self._refused(error)
            return
        if done:
            self.app.notify(done(result) if callable(done) else done, timeout=4)
        self.changed()
        if then is not None:
            then(result)

    def _show_pending(self) -> None:
        self.app.pending = tuple(self.pending.values())  # type: ignore[attr-defined]  # app.py's TuiAgentApp has it

    def changed(self) -> None:
        """After an action: the screen shown re-reads now rather than at the next poll."""
        self.app.screen.post_message(DataChanged())

    @property
    def label(self) -> str:
        return self.store.label

    def close(self) -> None:
        """The threads stopped (an action in flight commits first), then every store closed."""
        self.actor.close()
        self.loader.close()
        self.reader.close()


class Reads:
    """For a screen (or the App) that hands reads to the session: it paints in its `Loaded` handler."""

    @property
    def session(self) -> Session:
        return self.app.session  # type: ignore[attr-defined]  # mixed into a Screen or the App

    def on_loaded(self, message: Loaded) -> None:
        message.stop()
        self.session.delivered(message)

