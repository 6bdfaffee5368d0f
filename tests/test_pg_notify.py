"""The TUI's refresh on PostgreSQL (issue 24): every writer's transaction that changed something sends
`NOTIFY tui_agent` as it commits; the reader LISTENs, and `data_version()` counts what has arrived without a
round trip. It moves when another connection commits here, and only then: not for a transaction that wrote
nothing, not for a write to another database of the same server (the WAL position, the fallback, moves for
both)."""

from __future__ import annotations

import time

import psycopg
import pytest
from helpers import registry_of, shown_ids, tui, work

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


def _settled(store, quiet_s: float = 0.2) -> int:
    """data_version once nothing has arrived for `quiet_s` (a notification is in flight for a moment)."""
    version = data_version(store)
    while True:
        time.sleep(quiet_s)
        again = data_version(store)
        if again == version:
            return version
        version = again


def test_data_version_moves_when_another_connection_commits_and_only_then(stores, pg_server, pg_url):
    reader, writer = stores
    registry = load_registry()
    before = _settled(reader)
    assert reader._listening is True

    assert _settled(reader) == before, "nothing committed: nothing heard"
    with writer.write() as conn:   # a writer's transaction that changes no row
        conn.execute("UPDATE runs SET status = status WHERE id = 'r-none'")
    assert _settled(reader) == before, "a transaction that wrote nothing says nothing"
    wal = reader._wal_position()
    other = pg_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(other, autocommit=True) as conn:   # another database of the same server
        conn.execute("CREATE TABLE IF NOT EXISTS elsewhere (i int)")
        conn.execute("INSERT INTO elsewhere VALUES (1)")
    assert reader._wal_position() != wal, "the WAL fallback moves for any write on the server"
    assert _settled(reader) == before, "the notifications do not"

    started = time.perf_counter()
    operate.start(writer, registry, "hello", {})
    while data_version(reader) == before:
        assert time.perf_counter() - started < 5, "no notification arrived"
    assert _settled(reader) != before

    # a reader whose connection the server dropped opens another and counts that as a change
    seen = _settled(reader)
    with psycopg.connect(other, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                      (pg_url.rsplit("/", 1)[1],))
    time.sleep(0.2)
    moved = data_version(reader)
    moved = moved if moved != seen else data_version(reader)
    assert moved != seen
    calm = _settled(reader)
    operate.start(writer, registry, "hello", {})   # the writer's connection is opened again too
    until_moved = time.perf_counter() + 5
    while data_version(reader) == calm:
        assert time.perf_counter() < until_moved, "the new connection does not LISTEN"


def test_a_poll_costs_no_round_trip(stores):
    reader, _ = stores
    data_version(reader)
    sent: list[str] = []
    reader.conn.set_trace_callback(sent.append)
    for _ in range(100):
        data_version(reader)
    assert sent == []


def test_without_listen_the_wal_position_serves(stores):
    reader, writer = stores
    reader._listening = False
    before = data_version(reader)
    operate.start(writer, load_registry(), "hello", {})
    assert data_version(reader) != before


async def test_a_run_worked_elsewhere_appears_after_a_poll_because_a_notification_arrived(pg_url):
    from fixtures import notify_agents

    registry = registry_of(notify_agents.NAPPING)
    elsewhere = open_store(pg_url)
    try:
        async with tui(pg_url) as (app, pilot):
            app.poll()
            await pilot.pause()
            assert shown_ids(app) == []
            heard = data_version(app.reader)
            assert app.reader._listening is True

            run_id, _ = operate.start(elsewhere, registry, "napping", {"sleep_s": 60})
            work(elsewhere, registry, run_id)
            await pilot.pause()
            assert shown_ids(app) == [], "nothing re-reads before the poll"
            deadline = time.monotonic() + 5
            while data_version(app.reader) == heard:   # the notification is on its way
                assert time.monotonic() < deadline, "no notification arrived"
                time.sleep(0.01)
            app.poll()
            await pilot.pause()
            assert shown_ids(app) == [run_id]

            app.poll()   # nothing new: no notification, no re-read
            before = app.reader._heard
            await pilot.pause()
            assert app.reader._heard == before
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
            app.poll()
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
            app.poll()
            await pilot.pause()
            assert any("answers again" in t for t in toasts), toasts
    finally:
        _connections(pg_url, allowed=True)


def start_and_finish(url: str) -> str:
    store = open_store(url)
    try:
        registry = load_registry()
        run_id, _ = operate.start(store, registry, "hello", {})
        work(store, registry, run_id)
        return run_id
    finally:
        store.close()
