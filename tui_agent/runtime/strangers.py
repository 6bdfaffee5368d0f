"""What a worker says of the due runs it leaves because it does not know their agent: one line per agent, once,
so that an operator never reads a worker's silence as an empty queue (`worker --once` then exits 4: the
environment lacks what those runs need)."""

from __future__ import annotations

from collections.abc import Callable

from ..store import Store
from ..store.runs import due_of_others


def line(worker: str, agent: str, due: int, queued: int) -> str:
    """`tui-agent: w-1: 1 queued run of 'triage', which this worker does not know: start it with --agents MODULE`."""
    kind = "queued" if queued == due else "due"
    return (f"tui-agent: {worker}: {due} {kind} run{'s' * (due != 1)} of {agent!r}, which this worker does not "
            "know: start it with --agents MODULE")


class Strangers:
    """The agents of due runs that `known` leaves out, each said once to `say` (`look`, at each idle poll)."""

    def __init__(self, worker: str, known: list[str], say: Callable[[str], None]) -> None:
        self.worker, self.known, self.say = worker, known, say
        self.said: set[str] = set()

    def look(self, store: Store, at: float) -> None:
        for agent, due, queued in due_of_others(store, [*self.known, *self.said], at):   # the said are not counted
            self.said.add(agent)
            self.say(line(self.worker, agent, due, queued))
