"""Whether a worker is alive and how long ago something happened: one rule for `tui-agent workers` and the
TUI's Workers screen, so the two never disagree.

Leases and heartbeats compare instants written by different processes. On one host they share one clock, so
an instant in the future means a process whose clock runs ahead (only `TUI_AGENT_NOW`, a testing aid, does
that). Such an instant reads "clock ahead 23h", never as a negative age, and such a worker is not called
alive: its heartbeat says nothing about whether it beats now.
"""

from __future__ import annotations

import socket

from ..store.workers import process_alive

HOST = socket.gethostname()
SLACK_S = 1.0  # a wall-clock step smaller than this (an NTP adjustment) reads as now, not as a clock ahead
STATES = ("alive", "clock_ahead", "silent", "dead", "stopped")  # also the order the Workers screen sorts by


def ahead_s(then: float | None, at: float) -> float | None:
    """How far `then` lies in the future of `at`, or None when it does not (by more than SLACK_S)."""
    if then is None or then - at <= SLACK_S:
        return None
    return then - at


def worker_state(worker: dict, at: float) -> str:
    """stopped (it said goodbye); dead (its process is gone from this host without a goodbye: killed);
    clock_ahead (its heartbeat lies in the future); alive (its heartbeat is inside its lease); else silent."""
    if worker["stopped_at"] is not None:
        return "stopped"
    if worker["host"] == HOST and not process_alive(worker["pid"], worker.get("pid_started")):
        return "dead"
    if ahead_s(worker["heartbeat_at"], at) is not None:
        return "clock_ahead"
    return "alive" if at - worker["heartbeat_at"] < worker["lease_s"] else "silent"


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
