"""The one clock behind every timestamp, lease and wake time.

Tests move it in-process (`CLOCK.set`, `CLOCK.advance`, `CLOCK.freeze`) inside `with CLOCK.restored():`,
which puts it back afterwards; `TUI_AGENT_NOW` starts a subprocess's clock at an instant and lets it run on
from there, so schedules and leases can be tested across processes without waiting.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import overload


def parse_instant(text: str) -> float:
    """An ISO-8601 instant as epoch seconds; a naive one is taken as UTC."""
    when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


@overload
def iso(ts: float) -> str: ...
@overload
def iso(ts: float | None) -> str | None: ...


def iso(ts: float | None) -> str | None:
    """Epoch seconds as an ISO-8601 UTC instant (milliseconds), for output."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clock_time(at: float) -> str:
    """A local time for a person: the time alone when it was today (by this process's clock), else the date too."""
    when = datetime.fromtimestamp(at)
    today = datetime.fromtimestamp(now()).date()
    return when.strftime("%H:%M:%S" if when.date() == today else "%Y-%m-%d %H:%M:%S")


class Clock:
    """Wall time plus an offset; the offset is the only thing tests change. A frozen clock (snapshot
    tests) stands still, and so do the durations measured with `perf()`."""

    def __init__(self, start: float | None = None) -> None:
        self._offset = 0.0 if start is None else start - time.time()
        self._frozen: float | None = None

    def now(self) -> float:
        return time.time() + self._offset if self._frozen is None else self._frozen

    def perf(self) -> float:
        """A monotonic reading for durations."""
        return time.perf_counter() if self._frozen is None else 0.0

    def set(self, ts: float) -> None:
        self._offset = ts - time.time()
        if self._frozen is not None:
            self._frozen = ts

    def advance(self, seconds: float) -> None:
        self._offset += seconds
        if self._frozen is not None:
            self._frozen += seconds

    def freeze(self, ts: float | None) -> None:
        """Stand still at `ts` (None: run again)."""
        self._frozen = ts
        if ts is not None:
            self._offset = ts - time.time()

    @contextmanager
    def restored(self) -> Iterator[Clock]:
        """Yield this clock to move, and put it back as it was on the way out. It is for tests and the simulator: they
        move it with `set`, `advance` and `freeze`, and its offset and whether it was frozen are restored."""
        saved = self._offset, self._frozen
        try:
            yield self
        finally:
            self._offset, self._frozen = saved


def _from_env() -> Clock:
    text = os.environ.get("TUI_AGENT_NOW")
    if not text:
        return Clock()
    try:
        return Clock(parse_instant(text))
    except ValueError:
        print(f"tui-agent: TUI_AGENT_NOW={text!r} is not an ISO-8601 instant (such as 2026-11-29T02:00:00Z)",
              file=sys.stderr)
        raise SystemExit(2) from None


CLOCK = _from_env()


def now() -> float:
    return CLOCK.now()
