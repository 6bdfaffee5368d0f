"""Pilot drivers of the Workers screen: open it, start a real worker process with `+` and wait for its row, and
kill what the app started (tests/tui/test_tui_workers.py, tests/processes/test_config.py)."""

from __future__ import annotations

import asyncio
import time

from helpers import key, polled

from tui_agent.app import TuiAgentApp
from tui_agent.screens.workers import WorkersScreen
from tui_agent.store.workers import workers_listing


async def until(pilot, what: str, check, deadline_s: float = 20.0):
    """Poll `check` (the app re-reads as its change poll would) until it returns something truthy: the Pilot
    counterpart of helpers.until."""
    deadline = time.monotonic() + deadline_s
    while True:
        await polled(pilot)
        await pilot.pause()
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def worker_row(app: TuiAgentApp, pid: int) -> dict | None:
    """The workers table's row of the process `pid`, as the app reads it (None before it registers)."""
    return next((w for w in workers_listing(app.reader) if w["pid"] == pid), None)


def kill_all(app: TuiAgentApp) -> None:
    """Every worker process the app started, killed and reaped: a `tui(cleanup=...)`."""
    for process in app.spawned:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


async def open_workers(pilot) -> WorkersScreen:
    await key(pilot, "w")
    assert isinstance(pilot.app.screen, WorkersScreen)
    return pilot.app.screen


async def start_one(pilot) -> tuple:
    """`+`: a real worker process, registered in the database under the pid of the Popen."""
    app = pilot.app
    before = len(app.spawned)
    await pilot.press("plus")
    assert len(app.spawned) == before + 1
    process = app.spawned[-1]
    row = await until(pilot, f"worker pid {process.pid} to register", lambda: worker_row(app, process.pid))
    assert row["stopped_at"] is None
    screen = app.screen
    await until(pilot, "the screen to select the new worker", lambda: (screen.selected_worker() or {}).get("pid")
                == process.pid)
    return process, row
