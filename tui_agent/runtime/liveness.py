"""Whether a worker is alive: one rule for `tui-agent workers` and the TUI's Workers screen, so the two never
disagree (how long ago a heartbeat was, format.ago says for both).

Leases and heartbeats compare instants written by different processes. On one host they share one clock, so
an instant in the future means a process whose clock runs ahead (only `TUI_AGENT_NOW`, a testing aid, does
that). Such an instant reads "clock ahead 23h", never as a negative age, and such a worker is not called
alive: its heartbeat says nothing about whether it beats now.
"""

from __future__ import annotations

import socket

from ..states import WorkerState
from ..states import worker_state as state_of
from ..store.workers import process_alive

HOST = socket.gethostname()
STATES = tuple(WorkerState)  # also the order the Workers screen sorts by


def worker_state(worker: dict, at: float) -> WorkerState:
    """states.worker_state with the one fact only this host can supply: whether the worker's process is gone
    (a worker on another host is never called dead; its lease decides)."""
    gone = worker["host"] == HOST and not process_alive(worker["pid"], worker.get("pid_started"))
    return state_of(worker, at, gone=gone)


def label(state: str) -> str:
    """A state as a person reads it: clock_ahead is "clock ahead"."""
    return state.replace("_", " ")
