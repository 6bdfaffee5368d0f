"""One heartbeat thread per worker process: every third of the lease it renews each lease the
worker holds, carrying that run's fence. A refused renewal means another worker or a person took
the run, so that run's code is told to stop at its next journaled call (and a run inside a call is
given up: runtime/control.py). The heartbeat also starts the process's deadline watcher
(runtime/deadlines.py), which watches the same runs. `Waiting` is the one line a worker says while
the database holds it up."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from ..store import Claim, EnvironmentStop, open_store
from ..store.environment import BUSY, UNREACHABLE
from ..store.host import this_host
from ..store.workers import beat, register, stopped
from .clock import now
from .control import RunControl
from .deadlines import Deadlines


class Waiting:
    """What a worker says while the database holds it up: one line on stderr per spell.

    The database holds it up when it is busy past the timeout or its server is away. The line comes from
    whichever of its threads meets it first (the loop that claims; the heartbeat and the notices thread for a
    server that is away), then nothing until one of them gets through again (`over`)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._said = False
        self._lock = threading.Lock()

    def away(self, error: BaseException) -> bool:
        """Whether `error` is the database's server being away; if so, it is said (once per spell)."""
        if not (isinstance(error, EnvironmentStop) and error.kind == UNREACHABLE):
            return False
        self.say(error)
        return True

    def say(self, stop: EnvironmentStop) -> None:
        with self._lock:
            if self._said:
                return
            self._said = True
        line = (f"{stop.what}; waiting for the server: the runs in hand go on when it is back (a run whose lease "
                "runs out first is claimed anew); nothing committed is lost" if stop.kind == UNREACHABLE
                else f"{stop}; waiting")
        print(f"tui-agent: {self.worker}: {line}", file=sys.stderr, flush=True)

    def over(self) -> None:
        self._said = False


class Heartbeat:
    def __init__(self, db_path: Path, durability: str, *, worker: str, lease_s: float, concurrency: int = 1,
                 waiting: Waiting | None = None, agents: list[str] | None = None, log: str | None = None) -> None:
        """`agents`: the agents whose runs this worker claims, and `log`, the file it writes its log to, kept with its
        row (store.workers.register)."""
        self.worker, self.lease_s, self.agents, self.log = worker, lease_s, agents, log
        self.waiting = waiting or Waiting(worker)
        self._held: dict[str, tuple[int, RunControl]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._complained = False
        self._thread = threading.Thread(target=self._run, args=(db_path, durability, concurrency),
                                        name=f"heartbeat-{worker}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure
        self._deadlines = Deadlines(db_path, durability, self.controls, self.drop)

    @property
    def healthy(self) -> bool:
        """A worker whose heartbeat thread has died must not claim: nothing would keep its leases."""
        return self._thread.is_alive() and not self._stop.is_set()

    def hold(self, claim: Claim) -> RunControl:
        control = RunControl(claim.claimed_at + claim.lease_s, claim)
        with self._lock:
            self._held[claim.run_id] = (claim.fence, control)
        return control

    def drop(self, claim: Claim) -> None:
        with self._lock:
            self._held.pop(claim.run_id, None)

    def controls(self) -> list[RunControl]:
        with self._lock:
            return [control for _, control in self._held.values()]

    def _run(self, db_path: Path, durability: str, concurrency: int) -> None:
        """The thread: its own connection (SQLite's Python objects stay in the thread that made them)."""
        try:
            store = open_store(db_path, durability)
            register(store, self.worker, pid=os.getpid(), host=this_host(), concurrency=concurrency,
                     lease_s=self.lease_s, now=now(), agents=self.agents, log=self.log)
        except BaseException as e:
            self._failure = e
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.wait(self.lease_s / 3):
                self._beat(store)
            stopped(store, self.worker, now())
        except Exception:  # saying goodbye failed (the database is busy, full or gone): the leases just expire
            pass
        finally:
            store.close()

    def _beat(self, store) -> None:
        """One renewal of every held lease. It survives any error: it says so once (a server that is away as
        `waiting` says it), tries again next time, and lets go of each run whose lease ends before another
        renewal could land (the run's code stops at its next journaled call and the worker drops it; the next
        claimer repeats the step in flight)."""
        with self._lock:
            held = [(run_id, fence) for run_id, (fence, _) in self._held.items()]
        at = now()
        try:
            lost = beat(store, self.worker, held, self.lease_s, at)
        except Exception as e:
            self._complain(e)
            soon = now() + self.lease_s / 3
            with self._lock:
                ending = [run_id for run_id, (_, control) in self._held.items() if control.lease_until <= soon]
            for run_id, control in self._let_go(ending):
                control.lapsed(run_id, "its lease could not be renewed in time; dropped (the next claimer repeats "
                               "its step)", getattr(e, "kind", BUSY))
            return
        self._complained = False
        self.waiting.over()
        with self._lock:
            for _, control in self._held.values():
                control.renewed(at + self.lease_s)
        for run_id, control in self._let_go(lost):
            control.lost(run_id)

    def _let_go(self, runs: list[str]) -> list[tuple[str, RunControl]]:
        """The controls of `runs`, held no more by this heartbeat."""
        with self._lock:
            return [(run_id, self._held.pop(run_id)[1]) for run_id in runs if run_id in self._held]

    def _complain(self, error: BaseException) -> None:
        if not self.waiting.away(error) and not self._complained:
            print(f"tui-agent: {self.worker}: the heartbeat could not renew its leases ({error}); trying again",
                  file=sys.stderr, flush=True)
            self._complained = True

    def close(self) -> None:
        self._deadlines.close()
        self._stop.set()
        self._thread.join()
