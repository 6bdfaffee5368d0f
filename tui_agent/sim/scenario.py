"""One execution of the scenario: worker 1 crashes where the settings say, worker 2 carries on from what it left.

Both work the nightly report on the real runtime, in a throw-away store on a clock of its own; worker 2 starts
after the chosen delay. The timeline rows are what the runtime and the world reported: the fault points
(`faults.watching`), the step observer, the services' counters, and the email's ledger row as the store
recorded each state (a trigger, so a state a crash rolled back never shows). Nothing is looked up."""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

from .. import operate
from ..runtime import faults
from ..runtime.clock import Clock, parse_instant
from ..runtime.faults import SimulatedCrash
from ..runtime.registry import Registry
from ..runtime.worker import Outcome as TurnOutcome
from ..runtime.worker import execute
from ..states import Reason, RunStatus
from ..store import Store, open_store
from ..store.effects import effects_for, find_effect
from ..store.runs import claim_run, create_run, get_run
from ..store.sim_ledger import ledger_moves, trace_ledger
from ..store.workers import let_go, release
from . import agent as job
from .explain import why
from .settings import CRASH_AT, RESTART_S, SOURCES, Settings
from .world import World

T0 = parse_instant("2026-11-28T02:00:00Z")   # the night the report is for
REQUEST = {"date": "2026-11-28", "team": "team"}
LEASE_S = 60.0
STEP_LABELS = {**{f"fetch:{s}": f"fetch {s}" for s in SOURCES}, job.MODEL_REPLY: "model reply",
               job.SUMMARIZE: "summarize", job.REPORT: "write report", job.MAKE_KEY: "make key", job.SEND: "send"}
PERSON_ANSWERS = ("happened", "not-done")


@dataclass(frozen=True)
class Row:
    """One line of a worker's timeline: the step, its fate, and a few words on it."""

    step: str
    # done | again | recorded | crashed | sent | deduplicated | looked-up | waits | decided, and for the email's
    # ledger row: ledger (it moved to the state in `detail`) | found (worker 2 found it in that state)
    fate: str
    detail: str = ""
    key: str | None = None   # a ledger row's key, None when it holds no usable one (no key, or made at send time)


@dataclass(frozen=True)
class Stop:
    """Where a worker stands when the scenario pauses.

    That is at one of worker 1's boundaries, where it may crash, or at another moment worth a key press: a
    replayed entry, or the end of a worker."""

    worker: int
    boundary: str | None
    label: str


Pause = Callable[[Stop], bool]          # True: crash here (worker 1, at a boundary)
Decide = Callable[[dict], str | None]   # the effect in doubt -> "happened" | "not-done" | None (it stays waiting)


def boundary(saving: str, point: str, name: str) -> str | None:
    """The scenario's name for a runtime fault point passed in a named call, or None when it is not one."""
    if name.startswith("fetch:"):
        i = SOURCES.index(name[6:]) + 1
        return {"before-step": f"before-fetch-{i}", "after-step-commit": f"after-fetch-{i}"}.get(point)
    if saving == "journal":
        table = {("in-model-call", job.MODEL_REPLY): "before-summary",
                 ("after-model-commit", job.MODEL_REPLY): "mid-summary"}
    else:
        table = {("before-step", job.SUMMARIZE): "before-summary", ("after-step", job.SUMMARIZE): "mid-summary"}
    table.update({("after-step-commit", job.SUMMARIZE): "after-summary", ("before-step", job.REPORT): "before-report",
                  ("after-step-commit", job.REPORT): "after-report", ("after-attempted", job.SEND): "after-attempted",
                  ("after-do", job.SEND): "after-send"})
    return table.get((point, name))


@dataclass
class Outcome:
    settings: Settings
    counts: dict[str, int]
    fetches_by_source: dict[str, int]
    workers: tuple[list[Row], list[Row]]
    status: str
    effect_state: str | None
    crashed_at: str | None
    person: str | None = None
    waits_because: str | None = None

    @property
    def waiting(self) -> bool:
        return self.status == RunStatus.WAITING

    @property
    def found(self) -> Row | None:
        """The email's ledger row as worker 2 found it on disk, if it found one."""
        return next((row for row in self.workers[1] if row.fate == "found"), None)

    def as_json(self) -> dict:
        return {"settings": self.settings.as_dict(), "counts": self.counts,
                "fetches_by_source": self.fetches_by_source,
                "workers": [{"worker": n, "timeline": [asdict(row) for row in rows],
                             "effect_states": [{"state": row.detail, "key": row.key} for row in rows
                                               if row.fate == "ledger"]}
                            for n, rows in enumerate(self.workers, 1)],
                "status": self.status, "effect_state": self.effect_state, "crashed_at": self.crashed_at,
                "person": self.person, "waits_because": self.waits_because, "why": why(self)}


_TEMPLATE: list[Path] = []
_MEMORY = "/dev/shm"   # a scratch store in memory where the system has one: closing it syncs nothing


def _scratch() -> str | None:
    return _MEMORY if os.access(_MEMORY, os.W_OK) else None


def _template() -> Path:
    """An empty store made once per process: copying it is a tenth of what creating one costs."""
    if not _TEMPLATE:
        folder = Path(tempfile.mkdtemp(prefix="tui-agent-sim-template-", dir=_scratch()))
        atexit.register(shutil.rmtree, folder, True)
        store = open_store(folder / "empty.db", "normal")
        trace_ledger(cast(sqlite3.Connection, store.conn))   # a file path, not a URL: a SQLite store
        store.close()
        _TEMPLATE.append(folder / "empty.db")
    return _TEMPLATE[0]


def _usable(key: str | None) -> str | None:
    """The key a ledger row holds, or None where it holds only the scenario's words for having none."""
    return None if key in (job.NO_KEY, job.AT_SEND) else key


class Scenario:
    """A simulated run, run once with `run()`.

    `pause` is asked at every stop (by default: crash worker 1 where the settings say), `decide` whenever the
    run waits for a person (by default nobody answers)."""

    def __init__(self, settings: Settings, pause: Pause | None = None, decide: Decide | None = None,
                 seed: int = 0) -> None:
        self.settings = settings
        self.clock = Clock(T0)
        self.clock.freeze(T0)
        self.world = World(settings.service, self.clock, seed)
        self.world.on_touch = self._touched
        self.rows: tuple[list[Row], list[Row]] = ([], [])
        self.worker = 1
        self.crashed_at: str | None = None
        self.person: str | None = None
        self.waits_because: str | None = None
        self.folder: Path | None = None   # the throw-away store's folder while the scenario runs
        self.store: Store | None = None   # the store the worker at work uses
        self._ledger_at = 0               # the last of its ledger rows already in the timeline
        self._found: Row | None = None    # the email's row as worker 2 found it, shown when it first moves
        self._pause = pause or self._as_set
        self._decide = decide or (lambda effect: None)
        self._quiet = False   # worker 2 replaying its own entries after a person's answer: not news

    def timelines(self) -> tuple[list[Row], list[Row]]:
        """Both workers' rows as they stand, worker 2's work that worker 1 had done marked `again`."""
        first = {row.step for row in self.rows[0] if row.fate == "done"}
        return list(self.rows[0]), [Row(r.step, "again", r.detail) if r.fate == "done" and r.step in first else r
                                    for r in self.rows[1]]

    def _as_set(self, stop: Stop) -> bool:
        return stop.worker == 1 and stop.boundary == self.settings.crash_at

    def _row(self, step: str, fate: str, detail: str = "", key: str | None = None) -> None:
        self.rows[self.worker - 1].append(Row(step, fate, detail, key))

    def _catch_up(self) -> None:
        """Add the states the email's ledger row moved to since the last look, each as a row of the timeline."""
        assert self.store is not None   # the runtime calls back only while `run` works a run in its store
        moved = ledger_moves(self.store.conn, self._ledger_at, job.SEND)
        for seq, state, key in moved:
            if self._found is not None:
                self.rows[1].append(self._found)
                self._found = None
            self._row("email", "ledger", state, _usable(key))
            self._ledger_at = seq

    def _touched(self, fate: str, detail: str) -> None:
        self._catch_up()
        if fate == "looked-up":
            self._row("send", fate, detail)
        else:
            self._row("send", fate, f"key {detail}" if detail else "no key")

    def _watch(self, point: str, name: str | None) -> None:
        self._catch_up()
        if name is None:   # every boundary is in a named call
            return
        where = boundary(self.settings.saving, point, name)
        if where is None:
            return
        if self._pause(Stop(self.worker, where, CRASH_AT[where])) and self.worker == 1:
            self.crashed_at = where
            self._row(STEP_LABELS[name], "crashed", CRASH_AT[where])
            raise SimulatedCrash(point)

    def _observe(self, ctx, position: int, name: str, recorded: bool) -> None:
        self._catch_up()
        label = STEP_LABELS.get(name, name)
        if recorded:
            if not self._quiet:
                self._row(label, "recorded")
                self._pause(Stop(self.worker, None, f"{label}: recorded, not done again"))
        elif name != job.SEND:   # the email's rows come from the service, which saw what was sent
            self._row(label, "done")

    def run(self) -> Outcome:
        with (tempfile.TemporaryDirectory(prefix="tui-agent-sim-", dir=_scratch()) as scratch,
              faults.watching(self._watch)):
            self.folder = Path(scratch)
            registry = Registry()
            registry.add(job.build(self.settings, self.world), "the simulator")
            store, run_id = self._new_run(Path(scratch) / "worker-1.db", registry)
            try:
                try:
                    self._turn(store, registry, run_id)
                    self._pause(Stop(1, None, "worker 1 finished"))
                except SimulatedCrash:
                    assert self.crashed_at is not None   # `_watch` names the boundary, then raises the crash
                    store = self.store = open_store(store.path, "normal")
                    self._let_go(store, run_id)
                    self._pause(Stop(1, None, f"worker 1 crashed: {CRASH_AT[self.crashed_at]}"))
                self.clock.advance(RESTART_S[self.settings.restart_after])
                self.worker = self.world.worker = 2
                if self.crashed_at and self.settings.saving == "nothing":   # nothing worker 1 wrote survives
                    store.close()
                    store, run_id = self._new_run(Path(scratch) / "worker-2.db", registry)
                elif self.crashed_at:
                    self._found = self._as_found(store, run_id)
                self._finish(store, registry, run_id)
                return self._outcome(store, run_id)
            finally:
                store.close()

    def _new_run(self, path: Path, registry: Registry) -> tuple[Store, str]:
        shutil.copyfile(_template(), path)
        store = self.store = open_store(path, "normal")
        self._ledger_at = 0
        run_id, _ = create_run(store, now=self.clock.now(),
                               **registry.run_fields(job.NAME, REQUEST, model="scripted"))
        return store, run_id

    def _turn(self, store: Store, registry: Registry, run_id: str) -> TurnOutcome | None:
        claim = claim_run(store, run_id, f"worker-{self.worker}", LEASE_S, self.clock.now)
        return None if claim is None else execute(store, registry, claim=claim, on_step=self._observe, clock=self.clock)

    def _as_found(self, store: Store, run_id: str) -> Row | None:
        """The email's ledger row as worker 1 left it on disk, as a row of worker 2's timeline."""
        rows = [r for r in effects_for(store, run_id) if r["name"] == job.SEND]
        return Row("email", "found", rows[-1]["state"], _usable(rows[-1]["key"])) if rows else None

    def _let_go(self, store: Store, run_id: str) -> None:
        """End worker 1 after its crash, in the scenario's terms.

        Its claim lets go of the run, so nothing it began can still go out, and the run is claimable at once, as
        a worker that saw it die would find it."""
        fence, at = get_run(store, run_id)["fence"], self.clock.now()
        let_go(store, run_id, fence, "worker-1", at)
        release(store, run_id, fence=fence, worker="worker-1", why="it crashed", now=at)

    def _finish(self, store: Store, registry: Registry, run_id: str) -> None:
        """Worker 2's turns: the first, then one more after each answer a person gives."""
        turn = self._turn(store, registry, run_id)
        while turn is not None and (turn.status, turn.reason) == (RunStatus.WAITING, Reason.RECONCILE):
            self._catch_up()
            self.waits_because = _because(self.settings, turn.message)
            self._row("send", "waits", self.waits_because)
            effect = self._effect(store, run_id)
            answer = self._decide(effect)
            if answer not in PERSON_ANSWERS:
                return
            decide = operate.reconcile_happened if answer == "happened" else operate.reconcile_not_done
            decide(store, run_id, effect_ref=job.SEND, note="the simulator's person", at=self.clock.now())
            self._catch_up()
            self.person = answer
            self._row("send", "decided", "it happened" if answer == "happened" else "not done")
            self._quiet = True
            turn = self._turn(store, registry, run_id)

    def _effect(self, store: Store, run_id: str) -> dict:
        """The email effect for a person to decide on, with what the service does with keys (the runtime
        was told less than that under `ask-person`, so that it asks)."""
        row = find_effect(store, run_id, get_run(store, run_id)["generation"], job.SEND)
        return {**row, "dedupe_ttl_s": self.world.email.window_s if self.settings.service == "dedupe" else None}

    def _outcome(self, store: Store, run_id: str) -> Outcome:
        if self._found is not None:   # worker 2 never moved the row it found
            self.rows[1].append(self._found)
        run = get_run(store, run_id)
        state = find_effect(store, run_id, run["generation"], job.SEND)["state"]
        return Outcome(self.settings, self.world.counts(), {s: self.world.fetches[s] for s in SOURCES},
                       self.timelines(), run["status"], state, self.crashed_at,
                       self.person, self.waits_because if run["status"] == RunStatus.WAITING else None)


def _because(settings: Settings, message: str | None) -> str:
    """Why the run waits.

    Where the runtime was told nothing (the setting chose that), it is the setting's reason; else the runtime's
    own words, without the command it suggests (the simulator has its own keys)."""
    if settings.after_crash == "ask-person":
        return "the policy after a crash is to ask a person"
    if settings.after_crash == "ask-service" and settings.key in ("none", "at-send"):
        return "no saved key, so there is nothing to look up"
    text = (message or "").removeprefix("needs a person: ").removeprefix(f"{job.SEND} ").removeprefix("is unknown: ")
    return text.split("; decide with", 1)[0]


def simulate(settings: Settings, person: str | None = None, seed: int = 0) -> Outcome:
    """The scenario run to its end headless; `person` answers for the person whenever the run waits for one."""
    return Scenario(settings, decide=lambda effect: person, seed=seed).run()
