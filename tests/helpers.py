"""Small drivers shared by the tests: in-process work, a worker process paused at a fault point, Pilot keys."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlite_utils
from conftest import ROOT

from tui_agent.operate import start
from tui_agent.runtime.clock import now
from tui_agent.runtime.registry import Registry
from tui_agent.runtime.worker import execute
from tui_agent.store import schema
from tui_agent.store.runs import claim_run


def later(seconds: float) -> str:
    """An ISO instant `seconds` from now, for TUI_AGENT_NOW: a worker whose clock is past the leases."""
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).isoformat()


def ok(done: subprocess.CompletedProcess, code: int = 0) -> subprocess.CompletedProcess:
    """A finished command, asserting its exit code (and showing its output when it is not the one expected)."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return done


def registry_of(*agents) -> Registry:
    registry = Registry()
    for agent in agents:
        registry.add(agent, "test")
    return registry


def database_at_version(db_path: Path, version: int, *statements: str) -> None:
    """A database as an older tui-agent left it: its first `version` migrations, then `statements`, in one
    transaction; opening it migrates the rest."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN")
    db = sqlite_utils.Database(conn)
    for migrate in schema.MIGRATIONS[:version]:
        migrate(db)
    db["meta"].insert({"key": "schema_version", "value": str(version)})
    for statement in statements:
        conn.execute(statement)
    conn.execute("COMMIT")
    conn.close()


def start_and_work(store, registry, agent_name, request, worker="w-test", lease_s=60.0):
    run_id, _ = start(store, registry, agent_name, request)
    return work(store, registry, run_id, worker, lease_s)


def work(store, registry, run_id, worker="w-test", lease_s=60.0):
    claim = claim_run(store, run_id, worker, lease_s, now())
    assert claim is not None, f"{run_id} was not claimable"
    return execute(store, registry, claim)


async def key(pilot, name: str) -> None:
    """Press a key in a Pilot test and let the app settle."""
    await pilot.press(name)
    await pilot.pause()


async def click(pilot, selector: str) -> None:
    await pilot.click(selector)
    await pilot.pause()


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process: `T` when it is stopped."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@contextmanager
def paused_worker(*args: str, pause_at: str) -> Iterator[subprocess.Popen]:
    """`tui-agent ARGS worker --once ...` run until it stops itself at `pause_at` (TUI_AGENT_PAUSE_AT);
    the caller continues it with SIGCONT. Killed on the way out if it is still alive."""
    worker = subprocess.Popen([sys.executable, "-m", "tui_agent", *args], cwd=ROOT, text=True,
                              env={**os.environ, "TUI_AGENT_PAUSE_AT": pause_at},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while process_state(worker.pid) != "T" and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert process_state(worker.pid) == "T", "the worker did not stop itself"
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def until(what: str, check, deadline_s: float = 20, every_s: float = 0.02, why=lambda: ""):
    """Poll `check` until it returns something truthy; fail naming `what` (and `why()`) at the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what} {why()}"
        time.sleep(every_s)


def recorded_toasts(app) -> list[str]:
    """Every toast the app shows from now on, in order (the app still shows them)."""
    toasts = []
    notify = app.notify
    app.notify = lambda message, *args, **kwargs: (toasts.append(message), notify(message, *args, **kwargs))
    return toasts
