"""What a worker says of the due runs it leaves because it does not know their agent: one line per agent, once,
so that an operator never reads a worker's silence as an empty queue (`worker --once` then exits 4: the
environment lacks what those runs need)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..store import Store
from ..store.runs import due_of_others

LOOK_EVERY_S = 5.0   # the read touches every due run (5 ms for 1,000 of them): not at every poll of a busy worker


def line(worker: str, agent: str, due: int, queued: int) -> str:
    """The line said about due runs of an agent this worker does not know. For example: `tui-agent: w-1: 1 queued run of
    'triage', which this worker does not know: start it with --agents MODULE`."""
    kind = "queued" if queued == due else "due"
    return (f"tui-agent: {worker}: {due} {kind} run{'s' * (due != 1)} of {agent!r}, which this worker does not "
            "know: start it with --agents MODULE")


class Strangers:
    """The agents of due runs that `known` leaves out, each said once to `say`. `look` is called when a poll claims
    nothing, at most every LOOK_EVERY_S unless `force`d, as by the last poll of `worker --once`."""

    def __init__(self, worker: str, known: list[str], say: Callable[[str], None]) -> None:
        self.worker, self.known, self.say = worker, known, say
        self.said: set[str] = set()
        self._looked_at: float | None = None

    def look(self, store: Store, at: float, force: bool = False) -> None:
        started = time.monotonic()
        if not force and self._looked_at is not None and started - self._looked_at < LOOK_EVERY_S:
            return
        self._looked_at = started
        for agent, due, queued in due_of_others(store, [*self.known, *self.said], at):   # the said are not counted
            self.said.add(agent)
            self.say(line(self.worker, agent, due, queued))
