"""The TUI's refresh on PostgreSQL (issues 24 and 43): `data_version()` asks the server for its snapshot (which
transactions have ended), one round trip, and moves when it moved: whenever a transaction that wrote something
committed, so a change is never missed, and not when nothing was committed. Writers send nothing for it: a NOTIFY
in every commit would serialise their commits (bench/notify_cost.py)."""

from __future__ import annotations

import time

import psycopg
import pytest
from helpers import polled, registry_of, shown_ids, tui, work

from tui_agent import operate
from tui_agent.runtime.registry import load_registry
from tui_agent.store import open_store
from tui_agent.store.runs import data_version

pytestmark = pytest.mark.postgres


@pytest.fixture
def stores(pg_url):
    reader, writer = open_store(pg_url), open_store(pg_url)
    yield reader, writer
    reader.close()
    writer.close()


def test_data_version_moves_with_every_commit_and_not_without_one(stores, pg_url):
    reader, writer = stores
    registry = load_registry()
    before = data_version(reader)
    assert data_version(reader) == before, "nothing committed: nothing moved"
    with writer.write() as conn:   # a writer's transaction that changes no row
        conn.execute("UPDATE runs SET status = status WHERE id = 'r-none'")
    assert data_version(reader) == before, "a transaction that wrote nothing moves nothing"

    for write in (lambda: operate.start(writer, registry, agent_name="hello", request={}),        # a command's write
                  lambda: work(writer, registry,
                               operate.start(writer, registry, agent_name="hello", request={})[0])):   # a run
        seen = data_version(reader)
        write()
        assert data_version(reader) != seen, "a commit is seen at the next poll, without waiting"

    # a reader whose connection the server dropped opens another and goes on
    seen = data_version(reader)
    with psycopg.connect(pg_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                      (pg_url.rsplit("/", 1)[1],))
    time.sleep(0.2)
    assert data_version(reader) == seen
    operate.start(writer, registry, agent_name="hello", request={})   # the writer's connection is opened again too
    assert data_version(reader) != seen


def test_a_poll_is_one_statement_and_writers_send_no_notice(stores):
    reader, writer = stores
    data_version(reader)
    polled: list[str] = []
    reader.conn.set_trace_callback(polled.append)
    for _ in range(3):
        data_version(reader)
    assert polled == ["SELECT pg_current_snapshot()::text"] * 3
    written: list[str] = []
    writer.conn.set_trace_callback(written.append)
    operate.start(writer, load_registry(), agent_name="hello", request={})
    assert written and not [s for s in written if "notify" in s.lower() or "LISTEN" in s], written


async def test_a_run_worked_elsewhere_appears_at_the_next_poll(pg_url):
    from fixtures import notify_agents

    registry = registry_of(notify_agents.NAPPING)
    elsewhere = open_store(pg_url)
    try:
        async with tui(pg_url) as (app, pilot):
            await polled(pilot)
            await pilot.pause()
            assert shown_ids(app) == []

            run_id, _ = operate.start(elsewhere, registry, agent_name="napping", request={"sleep_s": 60})
            work(elsewhere, registry, run_id)
            await pilot.pause()
            assert shown_ids(app) == [], "nothing re-reads before the poll"
            await polled(pilot)
            await pilot.pause()
            assert shown_ids(app) == [run_id]

            seen = app._version
            await polled(pilot)   # nothing new: the same version, no re-read
            await pilot.pause()
            assert app._version == seen
    finally:
        elsewhere.close()


def _connections(url: str, allowed: bool) -> None:
    """Let the database take connections, or refuse new ones and drop those it has (the server going away for
    this database, as a restart or an administrator would)."""
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


@pytest.mark.parametrize("where", ["runs", "run"])
async def test_a_server_gone_between_the_poll_and_the_re_read_is_a_toast_and_the_screen_keeps_what_it_shows(
        pg_url, where):
    from helpers import open_run

    from tui_agent.messages import DataChanged

    run_id = start_and_finish(pg_url)
    toasts: list[str] = []
    try:
        async with tui(pg_url, toasts=toasts) as (app, pilot):
            if where == "run":
                await open_run(app, pilot, run_id)
            await polled(pilot)
            await pilot.pause()
            assert shown_ids(app) == [run_id] if where == "runs" else app.screen.view["run"]["id"] == run_id
            _connections(pg_url, allowed=False)
            app.screen.post_message(DataChanged())   # a change heard just before the server went away
            await pilot.pause()
            assert app.is_running and any("trying again" in t for t in toasts), toasts
            assert shown_ids(app) == [run_id] if where == "runs" else app.screen.view["run"]["id"] == run_id
            app.screen.post_message(DataChanged())
            await pilot.pause()
            assert sum("trying again" in t for t in toasts) == 1, "said once, not at every re-read"
            _connections(pg_url, allowed=True)
            await polled(pilot)
            await pilot.pause()
            assert any("answers again" in t for t in toasts), toasts
    finally:
        _connections(pg_url, allowed=True)


def start_and_finish(url: str) -> str:
    store = open_store(url)
    try:
        registry = load_registry()
        run_id, _ = operate.start(store, registry, agent_name="hello", request={})
        work(store, registry, run_id)
        return run_id
    finally:
        store.close()
