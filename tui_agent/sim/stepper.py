"""The scenario one stop at a time, for a teacher at the keyboard: it runs in a thread of its own (its
store's connection lives there) and waits at every stop until told what to do next.

Every stop takes one command, and the stepper keeps them (`presses`): a scenario is the same every time it
runs, so a new stepper given a list of them goes through those stops again without showing them and waits
at the next one. That is how a teacher steps back: the same presses less the last one."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .scenario import Outcome, Row, Scenario, Stop
from .settings import Settings

STEP, RUN, CRASH, HAPPENED, NOT_DONE, LEAVE = "step", "run", "crash", "happened", "not-done", "leave"
_ABANDON = "abandon"


class Abandoned(BaseException):
    """The teacher reset the screen: the scenario's thread stops where it stands."""


@dataclass(frozen=True)
class View:
    """The scenario as it stands at a stop, copied in its own thread so the screen never reads it mid-write."""

    stop: Stop | None
    workers: tuple[tuple[Row, ...], tuple[Row, ...]]
    counts: dict[str, int]
    presses: tuple[str, ...] = ()   # the command each stop before this one took (none: where it starts)
    asks: dict | None = None        # the effect a person must decide on, while the run waits for one
    outcome: Outcome | None = None  # once the scenario has ended
    error: str | None = None        # the scenario itself failed (a bug): said, never swallowed

    @property
    def can_crash(self) -> bool:
        return self.stop is not None and self.stop.worker == 1 and self.stop.boundary is not None


class Stepper:
    """The scenario run one stop at a time, for the simulator screen.

    Call `start()`, then `command()` at each stop; `close()` whenever the screen lets go, started or not."""

    def __init__(self, settings: Settings, presses: Sequence[str] = (), seed: int = 0) -> None:
        self.settings = settings
        self.scenario = Scenario(settings, pause=self._pause, decide=self._decide, seed=seed)
        self.presses: list[str] = []          # the command each stop passed took (`run` counts as `step`)
        self._script = list(reversed(presses))  # the stops to pass again without showing them, last first
        self._commands: queue.Queue[str] = queue.Queue()
        self._views: queue.Queue[View | None] = queue.Queue()
        self._to_end = False
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._main, name="simulator", daemon=True)

    def start(self) -> View | None:
        """Begin: the scenario runs to its first stop (worker 1 before its first fetch), or past the presses it
        was given to the stop after them. None when it was closed first."""
        with self._lock:
            if self._closed:
                return None
            self._thread.start()
        return self._views.get()

    def command(self, what: str) -> View | None:
        """Go on from the stop as `what` says.

        `step` goes to the next stop, `run` to the end, and `crash` crashes worker 1 here. While a person is
        asked, it is `happened`, `not-done` or `leave` (the run stays waiting). Returns the next view (None once
        closed)."""
        if self._closed:
            return None
        self._commands.put(what)
        return self._views.get()

    def close(self) -> None:
        """Stop the scenario's thread wherever it waits, or keep it from ever starting.

        Its throw-away store is removed on the way out. A caller still waiting for a view gets None."""
        with self._lock:
            self._closed = True
            started = self._thread.ident is not None
        if started:
            self._commands.put(_ABANDON)
            self._thread.join(timeout=5)
        self._views.put(None)

    def _view(self, stop: Stop | None = None, **extra) -> View:
        first, second = self.scenario.timelines()
        return View(stop, (tuple(first), tuple(second)), self.scenario.world.counts(), tuple(self.presses),
                    **extra)

    def _next(self, view: Callable[[], View]) -> str:
        """The command for this stop: the next of the presses given, or (shown first) the screen's."""
        if self._script:
            what = self._script.pop()
        else:
            self._views.put(view())
            what = self._commands.get()
            if what == _ABANDON:
                raise Abandoned()
        self.presses.append(STEP if what == RUN else what)
        return what

    def _pause(self, stop: Stop) -> bool:
        crash_as_set = stop.worker == 1 and stop.boundary == self.settings.crash_at
        if self._to_end:
            self.presses.append(STEP)
            return crash_as_set
        what = self._next(lambda: self._view(stop))
        if what == RUN:
            self._to_end = True
        return what == CRASH or crash_as_set

    def _decide(self, effect: dict) -> str | None:
        what = self._next(lambda: self._view(asks=effect))
        return what if what in (HAPPENED, NOT_DONE) else None

    def _main(self) -> None:
        try:
            outcome = self.scenario.run()
        except Abandoned:
            return
        except Exception as e:   # a bug in the simulator: the screen says it instead of hanging on a queue
            self._views.put(self._view(error=f"{type(e).__name__}: {e}"))
            return
        while True:   # any command after the end gets the end again, until the screen lets go
            self._views.put(self._view(outcome=outcome))
            if self._commands.get() == _ABANDON:
                return
