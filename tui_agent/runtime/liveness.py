"""Whether a worker is alive and how long ago something happened: one rule for `tui-agent workers` and the
TUI's Workers screen, so the two never disagree.

Leases and heartbeats compare instants written by different processes. On one host they share one clock, so
an instant in the future means a process whose clock runs ahead (only `TUI_AGENT_NOW`, a testing aid, does
that). Such an instant reads "clock ahead 23h", never as a negative age, and such a worker is not called
alive: its heartbeat says nothing about whether it beats now.
"""

from __future__ import annotations

import socket

from ..states import WorkerState, ahead_s
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


def span(seconds: float) -> str:
    """0.8s, 14s, 75s, 3m, 2h, 4d: short enough for a narrow column, precise where it matters."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 100:
        return f"{int(seconds)}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def ago(then: float, at: float) -> str:
    """"12s ago", or "clock ahead 23h" for an instant in the future: never a negative age."""
    ahead = ahead_s(then, at)
    return f"clock ahead {span(ahead)}" if ahead is not None else f"{span(at - then)} ago"
