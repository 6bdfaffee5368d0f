"""The TUI reads and acts off its event loop (tui_agent/session.py): a key is answered while a slow re-read or a
slow decision is in flight, and a decision pressed twice while pending is made once."""

from __future__ import annotations

import functools

import pytest
from helpers import key, open_run, screen_of, settled, slowed, tui, work

from tui_agent import operate
from tui_agent.messages import DataChanged
from tui_agent.runtime.registry import load_registry
from tui_agent.session import pending_label
from tui_agent.store import open_store
from tui_agent.store.runs import get_run
from tui_agent.widgets.pending import Pending
from tui_agent.widgets.timeline import Timeline


def _queued(db_path, count: int) -> list[str]:
    store = open_store(db_path)
    ids = [operate.start(store, load_registry(), agent_name="hello",
                         request={"name": f"n{i}"})[0] for i in range(count)]
    store.close()
    return ids


async def test_a_key_on_the_runs_screen_is_answered_while_a_slow_reload_is_in_flight(db_path):
    _queued(db_path, 3)
    async with tui(db_path) as (app, pilot):
        runs = screen_of(app)
        slowed(app.session.loader.store)               # every read of the reader thread: 300 ms more
        before = runs.table.cursor_row
        runs.post_message(DataChanged())
        await pilot.pause()
        assert app.session.loader.busy()               # the reload is in flight
        await pilot.press("j")
        await pilot.pause()
        assert runs.table.cursor_row == before + 1     # answered meanwhile
        assert app.session.loader.busy()               # and the reload still is
        await settled(pilot)
        assert runs.table.cursor_row == before + 1     # its paint kept the cursor where the key put it


async def test_a_key_on_the_run_screen_is_answered_while_a_slow_reload_is_in_flight(db_path):
    store = open_store(db_path)
    run_id, _ = operate.start(store, load_registry(), agent_name="hello", request={"name": "slow"})
    work(store, load_registry(), run_id)
    store.close()
    async with tui(db_path) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        timeline = screen.query_one(Timeline)
        await key(pilot, "home")
        at = timeline.highlighted
        slowed(app.session.loader.store)
        screen.post_message(DataChanged())
        await pilot.pause()
        await pilot.press("j")
        await pilot.pause()
        assert app.session.loader.busy()
        assert timeline.highlighted == at + 1
        await settled(pilot)
        assert timeline.highlighted == at + 1


async def test_a_decision_in_flight_shows_pending_and_a_second_press_does_not_act_twice(db_path, monkeypatch):
    run_id = _queued(db_path, 1)[0]
    parked = []
    park = operate.park

    @functools.wraps(park)
    def counted(store, *args, **kwargs):
        parked.append(args)
        return park(store, *args, **kwargs)

    monkeypatch.setattr(operate, "park", counted)
    toasts: list[str] = []
    async with tui(db_path, toasts=toasts) as (app, pilot):
        slowed(app.session.actor.store)                 # the park's statements: 300 ms each
        await pilot.press("p")
        await pilot.pause()
        pending = screen_of(app).query_one(Pending)
        assert pending.display and f"park {run_id}" in str(pending.render())
        await pilot.press("p")                          # again, while the first is pending
        await pilot.pause()
        assert any("still being done" in t for t in toasts), toasts
        await settled(pilot)
        assert not pending.display
        assert parked == [(run_id,)]                    # once
        assert get_run(app.reader, run_id)["status"] == "parked"
        assert f"{run_id} parked" in toasts


@pytest.mark.postgres
async def test_a_read_past_the_statement_timeout_is_a_notice_and_the_tui_keeps_answering(pg_url, monkeypatch):
    monkeypatch.setattr("tui_agent.app.READ_TIMEOUT_S", 0.2)
    store = open_store(pg_url)
    _ = [operate.start(store, load_registry(), agent_name="hello", request={"name": f"n{i}"}) for i in range(2)]
    store.close()
    app_toasts: list[str] = []
    async with tui(pg_url, toasts=app_toasts) as (app, pilot):
        runs = screen_of(app)
        painted = []
        app.session.read(runs, "slow", lambda store: store.conn.execute("SELECT pg_sleep(2)").fetchone(),
                         painted.append)
        await settled(pilot)
        assert painted == []
        assert len(app_toasts) == 1 and "statement timeout of 0.2 s" in app_toasts[0], app_toasts
        assert "\n" not in app_toasts[0]
        before = runs.table.cursor_row
        await key(pilot, "j")
        assert app.is_running and runs.table.cursor_row == before + 1


def test_a_pending_action_is_named_and_keyed_by_its_plain_arguments_given_by_position_or_keyword():
    registry = load_registry()
    key, what = pending_label(operate.start, (registry,), {"agent_name": "hello", "request": {"name": "x"}})
    assert (key, what) == (("start", "hello"), "start hello")
    one = pending_label(operate.reconcile_happened, ("r1",), {"effect_ref": "send", "result": None, "note": ""})
    other = pending_label(operate.reconcile_happened, ("r1",), {"effect_ref": "charge", "result": None, "note": ""})
    assert one[1] == "reconcile happened r1" and one[0] != other[0]   # two effects of one run: two decisions
