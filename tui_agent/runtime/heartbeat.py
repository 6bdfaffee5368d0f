"""One heartbeat thread per worker process: every third of the lease it renews each lease the
worker holds, carrying that run's fence. A refused renewal means another worker or a person took
the run, so that run's code is told to stop at its next journaled call."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from ..store import Claim, open_store
from ..store.workers import beat, register, stopped
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
        self._thread = threading.Thread(target=self._run, args=(db_path, durability, concurrency),
                                        name=f"heartbeat-{worker}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def hold(self, claim: Claim) -> RunControl:
        control = RunControl()
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
            register(store, self.worker, os.getpid(), socket.gethostname(), concurrency, self.lease_s, now())
        except BaseException as e:
            self._failure = e
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.wait(self.lease_s / 3):
                with self._lock:
                    held = [(run_id, fence) for run_id, (fence, _) in self._held.items()]
                for run_id in beat(store, self.worker, held, self.lease_s, now()):
                    with self._lock:
                        entry = self._held.pop(run_id, None)
                    if entry is not None:
                        entry[1].lost(run_id)
            stopped(store, self.worker, now())
        finally:
            store.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
