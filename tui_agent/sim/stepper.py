"""The scenario one stop at a time, for a teacher at the keyboard: it runs in a thread of its own (its
store's connection lives there) and waits at every stop until told what to do next."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

from .scenario import Outcome, Row, Scenario, Stop
from .settings import Settings

STEP, RUN, CRASH, HAPPENED, NOT_DONE, LEAVE = "step", "run", "crash", "happened", "not-done", "leave"


class Abandoned(BaseException):
    """The teacher reset the screen: the scenario's thread stops where it stands."""


@dataclass(frozen=True)
class View:
    """The scenario as it stands at a stop, copied in its own thread so the screen never reads it mid-write."""

    stop: Stop | None
    workers: tuple[tuple[Row, ...], tuple[Row, ...]]
    counts: dict[str, int]
    asks: dict | None = None        # the effect a person must decide on, while the run waits for one
    outcome: Outcome | None = None  # once the scenario has ended
    error: str | None = None        # the scenario itself failed (a bug): said, never swallowed

    @property
    def can_crash(self) -> bool:
        return self.stop is not None and self.stop.worker == 1 and self.stop.boundary is not None


class Stepper:
    def __init__(self, settings: Settings, seed: int = 0) -> None:
        self.settings = settings
        self.scenario = Scenario(settings, pause=self._pause, decide=self._decide, seed=seed)
        self._commands: queue.Queue[str] = queue.Queue()
        self._views: queue.Queue[View] = queue.Queue()
        self._to_end = False
        self._thread = threading.Thread(target=self._main, name="simulator", daemon=True)

    def start(self) -> View:
        """Begin: the scenario runs to its first stop (worker 1 before its first fetch)."""
        self._thread.start()
        return self._views.get()

    def command(self, what: str) -> View:
        """Go on from the stop: `step` to the next one, `run` to the end, `crash` worker 1 here; or, while a
        person is asked, `happened`, `not-done` or `leave` (it stays waiting). Returns the next view."""
        self._commands.put(what)
        return self._views.get()

    def close(self) -> None:
        """Stop the scenario's thread wherever it waits (its throw-away store is removed on the way out)."""
        if self._thread.is_alive():
            self._commands.put("abandon")
            self._thread.join(timeout=5)

    def _view(self, stop: Stop | None = None, **extra) -> View:
        first, second = self.scenario.timelines()
        return View(stop, (tuple(first), tuple(second)), self.scenario.world.counts(), **extra)

    def _wait(self) -> str:
        what = self._commands.get()
        if what == "abandon":
            raise Abandoned()
        return what

    def _pause(self, stop: Stop) -> bool:
        crash_as_set = stop.worker == 1 and stop.boundary == self.settings.crash_at
        if self._to_end:
            return crash_as_set
        self._views.put(self._view(stop))
        what = self._wait()
        if what == RUN:
            self._to_end = True
        return what == CRASH or crash_as_set

    def _decide(self, effect: dict) -> str | None:
        self._views.put(self._view(asks=effect))
        what = self._wait()
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
            if self._commands.get() == "abandon":
                return
