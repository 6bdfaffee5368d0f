"""The Workers and Schedules screens through Pilot: every key acts through operate.py, so each test
asserts on the database (and on the real worker processes), never on pixels."""

from __future__ import annotations

import os
import socket
import time

import pytest
from helpers import SIZE, key, polled, tui
from worker_pilot import kill_all, open_workers, start_one, until, worker_row

from tui_agent import operate
from tui_agent.app import TuiAgentApp
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.modals import ConfirmModal
from tui_agent.screens.schedules import SchedulesScreen
from tui_agent.screens.workers import WorkersScreen
from tui_agent.store import open_store
from tui_agent.store import schedules as schedules_table
from tui_agent.store.runs import get_run, list_runs
from tui_agent.store.workers import register, workers_listing


def cell(screen, row_key: str, column: str) -> str | None:
    """What the table shows in one cell now (None when there is no such row)."""
    table = screen.query_one("DataTable")
    if row_key not in {key.value for key in table.rows}:
        return None
    return table.get_cell(row_key, column).plain


def exited(process):
    return lambda: process.poll() is not None


async def test_plus_starts_a_worker_process_and_t_stops_it(db_path):
    toasts: list[str] = []
    async with tui(db_path, toasts=toasts, cleanup=kill_all) as (app, pilot):
        screen = await open_workers(pilot)
        process, row = await start_one(pilot)
        assert row["name"].startswith("w-")
        assert process.args[-1] == row["name"]
        assert cell(screen, f"{row['name']}/", "pid") == str(process.pid)
        assert f"{row['name']} started (pid {process.pid})" in toasts
        assert row["log"] == str(app.store.data_dir.absolute() / "logs" / f"{row['name']}.log")
        assert f" · log {row['log']}" in str(screen.query_one("#worker-strip").content)   # where to read it

        await pilot.press("t")
        await until(pilot, "the worker to exit after SIGTERM", exited(process))
        assert process.returncode == 0
        stopped = await until(pilot, "stopped_at", lambda: (worker_row(app, process.pid) or {}).get("stopped_at"))
        assert stopped > 0
        await until(pilot, "the row to say stopped", lambda: cell(screen, f"{row['name']}/", "state") == "stopped")


async def test_a_worker_holding_a_run_shows_the_run_lease_and_fence(db_path):
    registry = load_registry()
    store = open_store(db_path)
    run_id, _ = operate.start(store, registry, agent_name="nightly-report",
                              request={"date": "2026-11-28", "delay_s": 3})
    store.close()
    async with tui(db_path, cleanup=kill_all) as (app, pilot):
        screen = await open_workers(pilot)
        process, row = await start_one(pilot)
        await until(pilot, "the worker to claim the run",
                    lambda: get_run(app.reader, run_id)["status"] == "running")
        key = f"{row['name']}/{run_id}"
        await until(pilot, "a row for the held run", lambda: cell(screen, key, "run"))
        run = get_run(app.reader, run_id)
        assert cell(screen, key, "run") == f"{run_id} nightly-report"
        assert cell(screen, key, "fence") == str(run["fence"])
        assert cell(screen, key, "lease").endswith("s")
        assert cell(screen, key, "state") == "alive"
        first = cell(screen, key, "heartbeat")
        await until(pilot, "the heartbeat age to tick with no write",
                    lambda: cell(screen, key, "heartbeat") != first, deadline_s=3)


async def test_K_asks_then_kills_the_worker_with_sigkill(db_path):
    async with tui(db_path, cleanup=kill_all) as (app, pilot):
        screen = await open_workers(pilot)
        process, row = await start_one(pilot)

        await key(pilot, "K")
        assert isinstance(app.screen, ConfirmModal)
        assert [str(b.label) for b in app.screen.query("Button")] == ["Kill it (SIGKILL)", "Keep it running"]
        assert app.screen.focused.id == "cancel"          # the harmless button has the focus
        await pilot.click("#cancel")          # asked once; cancel leaves it running
        await pilot.pause()
        assert isinstance(app.screen, WorkersScreen)
        assert process.poll() is None

        await key(pilot, "K")
        assert isinstance(app.screen, ConfirmModal)
        assert "SIGKILL" in str(app.screen.question)
        assert row["name"] in str(app.screen.question)
        await pilot.click("#confirm")
        await until(pilot, "the worker to die", exited(process))
        assert process.returncode == -9
        assert worker_row(app, process.pid)["stopped_at"] is None     # a crash says no goodbye
        await until(pilot, "the row to say dead", lambda: cell(screen, f"{row['name']}/", "state") == "dead")


async def test_quitting_the_app_stops_the_workers_it_started(db_path):
    app = TuiAgentApp(db_path, poll_s=None)     # not `tui`: it asserts after the app quit, before kill_all
    try:
        async with app.run_test(size=SIZE) as pilot:
            await open_workers(pilot)
            first, _ = await start_one(pilot)
            second, _ = await start_one(pilot)
            await pilot.press("q")
        assert first.poll() == 0
        assert second.poll() == 0
        store = open_store(db_path)
        try:
            assert all(w["stopped_at"] for w in workers_listing(store))
            assert len(workers_listing(store)) == 2
        finally:
            store.close()
    finally:
        kill_all(app)


async def test_t_on_a_stopped_worker_is_refused_without_a_signal(db_path):
    async with tui(db_path, cleanup=kill_all) as (app, pilot):
        await open_workers(pilot)
        process, row = await start_one(pilot)
        await pilot.press("t")
        await until(pilot, "the worker to stop", lambda: (worker_row(app, process.pid) or {}).get("stopped_at"))
        await pilot.press("t", "K")
        await pilot.pause()
        assert isinstance(app.screen, WorkersScreen)      # no confirmation for a worker that is gone


async def test_a_heartbeat_in_the_future_reads_clock_ahead_never_a_negative_age(db_path):
    """Leases assume one clock: a worker whose clock runs a day ahead (TUI_AGENT_NOW) is not shown alive."""
    store = open_store(db_path)
    register(store, "w-ahead", pid=os.getpid(), host=socket.gethostname(), concurrency=1, lease_s=60,
             now=time.time() + 86400)   # this process
    store.close()
    async with tui(db_path) as (app, pilot):
        screen = await open_workers(pilot)
        assert cell(screen, "w-ahead/", "state") == "clock ahead"
        assert cell(screen, "w-ahead/", "heartbeat") == "clock ahead 23h"
        strip = str(screen.query_one("#worker-strip").content)
        assert "23h ahead of this clock" in strip, strip
        assert "-8" not in strip, strip
        assert "1 clock ahead" in str(screen.query_one("#summary").content)


# -- schedules ----------------------------------------------------------------------------------


@pytest.fixture
def scheduled(db_path):
    store = open_store(db_path)
    operate.schedule_add(store, load_registry(), name="nightly-hello", agent="hello", cron="0 2 * * *")
    store.close()
    return "nightly-hello"


def schedule(app: TuiAgentApp, name: str) -> dict:
    return next(r for r in schedules_table.listing(app.reader) if r["name"] == name)


async def open_schedules(pilot) -> SchedulesScreen:
    await key(pilot, "s")
    assert isinstance(pilot.app.screen, SchedulesScreen)
    return pilot.app.screen


async def test_d_disables_and_e_enables_a_schedule(db_path, scheduled):
    async with tui(db_path) as (app, pilot):
        screen = await open_schedules(pilot)
        assert screen.selected_key() == scheduled
        await key(pilot, "d")
        assert schedule(app, scheduled)["enabled"] == 0
        assert "disabled" in str(screen.query_one("#schedule-strip").content)
        await key(pilot, "e")
        row = schedule(app, scheduled)
        assert row["enabled"] == 1
        assert row["next_fire_at"] > time.time()
        await key(pilot, "escape")
        assert not isinstance(app.screen, SchedulesScreen)


async def test_fire_now_starts_a_run_keyed_by_the_schedule(db_path, scheduled):
    toasts: list[str] = []
    async with tui(db_path, toasts=toasts) as (app, pilot):
        await open_schedules(pilot)
        assert list_runs(app.reader) == []
        await key(pilot, "F")
        assert isinstance(app.screen, ConfirmModal)  # asked first
        assert list_runs(app.reader) == []
        await pilot.click("#confirm")
        await pilot.pause()
        runs = list_runs(app.reader)
        assert len(runs) == 1
        assert runs[0]["agent"] == "hello"
        run = get_run(app.reader, runs[0]["id"])
        assert run["run_key"].startswith(f"schedule:{scheduled}:")
        assert schedule(app, scheduled)["last_run_id"] == run["id"]

        assert run["id"] in toasts[-1]
        await key(pilot, "F")             # the previous run is unfinished: overlap=skip holds the fire back
        await pilot.click("#confirm")
        await pilot.pause()
        assert len(list_runs(app.reader)) == 1
        assert toasts[-1] == f"{scheduled}: skipped because {run['id']} is queued (overlap=skip)"


async def test_a_change_from_elsewhere_shows_on_the_next_poll(db_path, scheduled):
    async with tui(db_path) as (app, pilot):
        screen = await open_schedules(pilot)
        await polled(pilot)
        store = open_store(db_path)
        operate.schedule_add(store, load_registry(), name="another", agent="hello", cron="*/5 * * * *",
                             tz="Europe/Berlin")
        store.close()
        await until(pilot, "the new schedule's row", lambda: screen.query_one("DataTable").row_count == 2)
        assert screen.selected_key() == scheduled          # "another" sorts above; the cursor stays put
        await pilot.press("k")
        assert screen.selected_key() == "another"


async def test_both_screens_read_at_80x24_with_rows_and_when_empty(db_path, scheduled):
    async with tui(db_path, size=(80, 24), cleanup=kill_all) as (app, pilot):
        screen = await open_workers(pilot)
        assert "No workers yet" in str(screen.query_one("#worker-strip").content)
        await pilot.press("t")                      # nothing selected: a warning, no signal, no modal
        await key(pilot, "K")
        assert isinstance(app.screen, WorkersScreen)
        process, row = await start_one(pilot)
        assert row["name"] in str(screen.query_one("#worker-strip").content)
        await pilot.press("escape")
        schedules = await open_schedules(pilot)
        assert scheduled in str(schedules.query_one("#schedule-strip").content)
        assert "running workers fire them" in str(schedules.query_one("#summary").content)
