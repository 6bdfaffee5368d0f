"""Whether a worker is alive: one rule for `tui-agent workers` and the TUI's Workers screen, so they never disagree.

How long ago a heartbeat was, format.ago says for both. On one host processes share one clock, so an instant in
the future means a clock that runs ahead (only `TUI_AGENT_NOW`, a testing aid, does that): it reads "clock
ahead 23h", never a negative age, and such a worker is not called alive.
Why: docs/architecture.md, section 7.2 (One clock)."""

from __future__ import annotations

from ..states import WorkerState, ahead_s
from ..states import worker_state as state_of
from ..store.host import on_this_host as on_this_host  # for the Workers screen, which never imports the store
from ..store.host import process_alive

STATES = tuple(WorkerState)  # also the order the Workers screen sorts by


def worker_state(worker: dict, at: float) -> WorkerState:
    """A worker's state as `states.worker_state` judges it, given whether its process is gone. Only this host can tell
    that: a worker on another host, by its host id, is never called dead; its lease decides. A row read from a server
    carries the server's clock at the read (`judged_at`) and the heartbeat's instant by it (`server_heartbeat_at`), and
    it is judged by those, not by this reader's clock; a live worker whose own clock runs ahead of the server's is
    `clock_ahead` there too."""
    gone = on_this_host(worker) and not process_alive(worker["pid"], worker.get("pid_started"))
    if "judged_at" not in worker:
        return state_of(worker, at, gone=gone)
    state = state_of(worker | {"heartbeat_at": worker["server_heartbeat_at"]}, worker["judged_at"], gone=gone)
    if state == WorkerState.ALIVE and ahead_s(worker["heartbeat_at"], worker["server_heartbeat_at"]) is not None:
        return WorkerState.CLOCK_AHEAD   # beating, but by a clock that runs ahead of the server's
    return state


def ahead_by(worker: dict, at: float) -> float | None:
    """How far a worker's heartbeat is stamped ahead of the clock that judges it, or None when it is not.

    The clock is the one worker_state judges by: the server's for a row read from a server, else `at`. So it is
    never None for a worker that worker_state calls `clock_ahead`, even when this reader's clock runs ahead too."""
    if "judged_at" not in worker:
        return ahead_s(worker["heartbeat_at"], at)
    own = ahead_s(worker["heartbeat_at"], worker["server_heartbeat_at"])
    return own if own is not None else ahead_s(worker["server_heartbeat_at"], worker["judged_at"])


def label(state: str) -> str:
    """A state as a person reads it: clock_ahead is "clock ahead"."""
    return state.replace("_", " ")
