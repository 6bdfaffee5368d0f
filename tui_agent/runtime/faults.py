"""Fault points: named places where a crash hurts most, armed from the environment or in-process.

`TUI_AGENT_CRASH_AT=POINT[:N]` kills the worker the Nth time it passes POINT, as `kill -9` would;
`TUI_AGENT_PAUSE_AT=POINT[:N]` stops it there with SIGSTOP. In-process `arm()` makes the point raise
`SimulatedCrash`, a BaseException, and `watching(fn)` lets one thread see every point it passes.
Disarmed and unwatched, a point is two cheap tests. Why: docs/architecture.md, section 6.3 (Crash points)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

POINTS = {
    "before-step": "before a step's function is called",
    "after-step": "after a step's function returned, before its result is committed",
    "after-step-commit": "after a step's result is committed",
    "after-intended": "after an effect's intended row is committed, before it is attempted",
    "after-attempted": "after an effect's attempted row is committed, before do(key) is called",
    "after-do": "after do(key) returned, before confirmed is written",
    "in-model-call": "after a model call's attempt is committed, before its request is sent",
    "after-model-commit": "after a model call's reply is committed",
    "after-tool-commit": "after an agent loop's tool result is committed",
    "command-gated": "after a program run_command starts is held at its gate, before its process group is recorded",
    "mid-write": "after a file's new content is written to its temporary copy, before the rename over the original",
}


class SimulatedCrash(BaseException):
    """An in-process crash: the worker drops its connection and stops, as if killed."""

    def __init__(self, point: str) -> None:
        super().__init__(f"simulated crash at {point}")
        self.point = point


@dataclass
class _Arm:
    point: str
    nth: int
    action: str  # kill | pause | raise
    passes: int = 0


_ARMS: list[_Arm] = []
_WATCHED = threading.local()  # .fn: this thread's watcher, called at every point with the call's name
_WATCHERS: list[Callable] = []  # every thread's watcher: while none, a point skips the thread-local lookup


def parse(spec: str, variable: str) -> tuple[str, int]:
    point, _, count = spec.partition(":")
    if point not in POINTS:
        known = ", ".join(POINTS)
        raise ValueError(f"{variable} names no fault point {point!r}; known points: {known}")
    if count and not (count.isdigit() and int(count) >= 1):
        raise ValueError(f"{variable}={spec!r}: the count after ':' must be a whole number >= 1")
    return point, int(count or 1)


def arm(point: str, nth: int = 1, action: str = "raise") -> None:
    if point not in POINTS:
        raise ValueError(f"no fault point {point!r}")
    _ARMS.append(_Arm(point, nth, action))


def disarm() -> None:
    _ARMS.clear()


@contextmanager
def watching(fn: Callable[[str, str | None], None]) -> Iterator[None]:
    """Call `fn(point, name)` at every point this thread passes; other threads are not watched.

    `fn` may block (a stepper) or raise `SimulatedCrash` (a crash chosen where it stands)."""
    _WATCHED.fn = fn
    _WATCHERS.append(fn)
    try:
        yield
    finally:
        _WATCHED.fn = None
        _WATCHERS.remove(fn)


def crash_point(point: str, name: str | None = None) -> None:
    """Act here if an armed point is passed for its Nth time; free when nothing is armed or watching."""
    if not _ARMS and not _WATCHERS:
        return
    watcher = getattr(_WATCHED, "fn", None)
    if watcher is not None:
        watcher(point, name)
    for armed in _ARMS:
        if armed.point != point:
            continue
        armed.passes += 1
        if armed.passes != armed.nth:
            continue
        # Signalled to this thread, not the process: a process-directed signal may be taken by
        # another thread while this one runs on into its next commit.
        if armed.action == "kill":
            signal.pthread_kill(threading.get_ident(), signal.SIGKILL)
        elif armed.action == "pause":
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        else:
            raise SimulatedCrash(point)


def _arm_from_env() -> None:
    for variable, action in (("TUI_AGENT_CRASH_AT", "kill"), ("TUI_AGENT_PAUSE_AT", "pause")):
        spec = os.environ.get(variable)
        if not spec:
            continue
        try:
            point, nth = parse(spec, variable)
        except ValueError as e:
            print(f"tui-agent: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        arm(point, nth, action)


_arm_from_env()
