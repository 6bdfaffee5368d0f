"""One heartbeat thread per worker process: every third of the lease it renews each lease the
worker holds, carrying that run's fence. A refused renewal means another worker or a person took
the run, so that run's code is told to stop at its next journaled call."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from ..store import Claim, open_store
from ..store.workers import beat, register, stopped, this_host
from .clock import now
from .control import RunControl


class Heartbeat:
    def __init__(self, db_path: Path, durability: str, worker: str, lease_s: float, concurrency: int = 1) -> None:
        self.worker, self.lease_s = worker, lease_s
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

    @property
    def healthy(self) -> bool:
        """A worker whose heartbeat thread has died must not claim: nothing would keep its leases."""
        return self._thread.is_alive() and not self._stop.is_set()

    def hold(self, claim: Claim) -> RunControl:
        control = RunControl(claim.claimed_at + claim.lease_s)
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
            register(store, self.worker, os.getpid(), this_host(), concurrency, self.lease_s, now())
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
        """One renewal of every held lease. It survives any error: it says so once, tries again next time,
        and lets go of each run whose lease ends before another renewal could land (the run's code stops at
        its next journaled call, as if the run were taken; the next claimer repeats the step in flight)."""
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
            self._let_go(ending, "its lease could not be renewed in time; dropped (the next claimer repeats its step)")
            return
        self._complained = False
        with self._lock:
            for run_id, (_, control) in self._held.items():
                control.renewed(at + self.lease_s)
        self._let_go(lost)

    def _let_go(self, runs: list[str], why: str | None = None) -> None:
        with self._lock:
            entries = [(run_id, self._held.pop(run_id)) for run_id in runs if run_id in self._held]
        for run_id, (_, control) in entries:
            control.lost(run_id, *([why] if why else []))

    def _complain(self, error: BaseException) -> None:
        if not self._complained:
            print(f"tui-agent: {self.worker}: the heartbeat could not renew its leases ({error}); trying again",
                  file=sys.stderr, flush=True)
            self._complained = True

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
