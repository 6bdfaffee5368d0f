"""Crash points: `TUI_AGENT_CRASH_AT=POINT[:N]` kills the worker process the Nth time
it passes POINT, as `kill -9` would (no cleanup, no commit), so tests and the
simulator can put a crash exactly where a real one would hurt.
"""

from __future__ import annotations

import os
import signal
import sys

POINTS = {
    "before-step": "before a step's function is called",
    "after-step": "after a step's function returned, before its result is committed",
    "after-step-commit": "after a step's result is committed",
}


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    point, _, count = spec.partition(":")
    if point not in POINTS:
        known = ", ".join(sorted(POINTS))
        print(f"tui-agent: TUI_AGENT_CRASH_AT names no crash point {point!r}; known points: {known}",
              file=sys.stderr)
        raise SystemExit(2)
    try:
        nth = int(count) if count else 1
    except ValueError:
        nth = 0
    if nth < 1:
        print(f"tui-agent: TUI_AGENT_CRASH_AT={spec!r}: the count after ':' must be a whole number >= 1",
              file=sys.stderr)
        raise SystemExit(2)
    return point, nth


_ARMED = _parse(os.environ.get("TUI_AGENT_CRASH_AT"))
_passes = 0


def crash_point(point: str) -> None:
    """Die here if this is the armed point's Nth pass; free when nothing is armed."""
    global _passes
    if _ARMED is None or _ARMED[0] != point:
        return
    _passes += 1
    if _passes == _ARMED[1]:
        os.kill(os.getpid(), signal.SIGKILL)
