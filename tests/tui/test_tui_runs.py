"""The Runs (home) screen through Pilot, over a database built by EXECUTING real nightly-report runs
(tui_agent.demo): each key acts through operate.py, so each test asserts on the database."""

from __future__ import annotations

import json

import pytest
from helpers import (
    SIZE,
    click,
    key,
    rendered,
    screen_of,
    select,
    selected,
    shown_ids,
    strip,
    tui,
)

from tui_agent.app import TuiAgentApp
from tui_agent.report import run_report
from tui_agent.screens.modals import (
    ApproveModal,
    BudgetModal,
    ConfirmModal,
    NewRunModal,
    ReconcileModal,
)
from tui_agent.screens.runs import RunsScreen
from tui_agent.store.effects import effects_for
from tui_agent.store.runs import get_run, list_runs

pytestmark = pytest.mark.demo_on_both   # what the TUI shows, on the SQLite demo and on PostgreSQL

NEEDS_YOU = ("parked on cost", "waiting for approval", "outcome unknown", "patch waiting for approval")


def run(app, run_id: str) -> dict:
    return get_run(app.reader, run_id)


async def test_needs_you_runs_come_first_and_o_sorts_newest_first(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        ids = shown_ids(app)
        assert len(ids) == len(roles)
        assert set(ids[:len(NEEDS_YOU)]) == {roles[r] for r in NEEDS_YOU}
        assert f"needs you {len(NEEDS_YOU)}" in str(screen_of(app).query_one("#summary").content)

        await pilot.press("o")
        ids = shown_ids(app)
        assert ids[0] == roles["running"]         # queued last: the newest
        assert [run(app, i)["created_at"] for i in ids] == sorted((run(app, i)["created_at"] for i in ids),
                                                                  reverse=True)
        await pilot.press("o")
        assert set(shown_ids(app)[:len(NEEDS_YOU)]) == {roles[r] for r in NEEDS_YOU}


async def test_the_situation_strip_names_the_selected_run(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        for role in ("outcome unknown", "waiting for approval", "parked on cost", "failed", "sleeping until tomorrow"):
            await select(pilot, roles[role])
            assert roles[role] in strip(app)
        await select(pilot, roles["outcome unknown"])
        assert "may or may not" in strip(app)
        assert "c reconciles" in strip(app)
        await select(pilot, roles["waiting for approval"])
        assert "a approves" in strip(app)
        await select(pilot, roles["parked on cost"])
        assert "raise it with b" in strip(app)


@pytest.mark.layout_only
async def test_the_strip_keeps_its_key_on_screen_whatever_the_question(demo):
    """Patch's question runs to several lines (the commit and its diff stat): the key that answers it stays
    inside the strip's rows at 80x24, where a hint after the question would be cut off."""
    db, roles = demo
    async with tui(db, size=(80, 24)) as (app, pilot):
        await select(pilot, roles["patch waiting for approval"])
        assert "\n" in strip(app).split("asks", 1)[1], "the question itself takes several lines"
        assert any("a approves or denies" in line for line in rendered(app))


async def test_p_parks_and_r_resumes_with_the_cursor_on_the_same_run(demo):
    async with selected(demo, "running") as (app, pilot, queued):
        before = shown_ids(app).index(queued)
        await key(pilot, "p")
        assert (run(app, queued)["status"], run(app, queued)["reason"]) == ("parked", "person")
        assert shown_ids(app).index(queued) < before          # a parked run needs you: it moved up
        assert screen_of(app).selected_id() == queued
        assert queued in strip(app)

        await key(pilot, "r")
        assert (run(app, queued)["status"], run(app, queued)["reason"]) == ("queued", "resumed")
        assert screen_of(app).selected_id() == queued

        await pilot.press("r")                 # not parked any more: refused, nothing written
        await pilot.pause()
        assert run(app, queued)["status"] == "queued"


async def test_x_asks_then_cancels(demo):
    async with selected(demo, "sleeping until tomorrow") as (app, pilot, sleeping):
        await key(pilot, "x")
        assert isinstance(app.screen, ConfirmModal)
        await pilot.press("escape")            # asked once: escape leaves it alone
        await pilot.pause()
        assert run(app, sleeping)["status"] == "waiting"

        await key(pilot, "x")
        await click(pilot, "#confirm")
        assert (run(app, sleeping)["status"], run(app, sleeping)["reason"]) == ("cancelled", "person")
        assert screen_of(app).selected_id() == sleeping


async def test_a_approves_the_run_waiting_for_approval(demo):
    db, roles = demo
    waiting = roles["waiting for approval"]
    async with tui(db) as (app, pilot):
        await select(pilot, waiting)
        await key(pilot, "a")
        assert isinstance(app.screen, ApproveModal)
        await click(pilot, "#confirm")
        assert (run(app, waiting)["status"], run(app, waiting)["reason"]) == ("queued", "resumed")
        assert [a["decision"] for a in run_report(app.reader, waiting)["approvals"]] == ["approved"]
        assert screen_of(app).selected_id() == waiting        # it left the needs-you group; the cursor followed

        await select(pilot, roles["failed"])
        await pilot.press("a")                 # nothing to approve: no modal, nothing written
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)


async def test_c_it_happened_confirms_the_unknown_effect_and_queues_the_run(demo):
    db, roles = demo
    unknown = roles["outcome unknown"]
    app = TuiAgentApp(db, poll_s=None)          # not `tui`: it reads through the app before the app starts
    doubtful = [e for e in effects_for(app.reader, unknown) if e["state"] == "unknown"]
    assert len(doubtful) == 1
    async with app.run_test(size=SIZE) as pilot:
        await select(pilot, unknown)
        await key(pilot, "c")
        assert isinstance(app.screen, ReconcileModal)
        await pilot.click("#confirm")          # no choice made yet: the modal stays
        await pilot.pause()
        assert isinstance(app.screen, ReconcileModal)
        await pilot.click("#happened")
        await click(pilot, "#confirm")
        assert isinstance(app.screen, RunsScreen)
        effect = next(e for e in effects_for(app.reader, unknown) if e["id"] == doubtful[0]["id"])
        assert effect["state"] == "confirmed"
        assert effect["decided_by"]
        assert (run(app, unknown)["status"], run(app, unknown)["reason"]) == ("queued", "resumed")
        assert screen_of(app).selected_id() == unknown


async def test_b_raises_the_cost_ceiling_and_queues_the_parked_run(demo):
    db, roles = demo
    parked = roles["parked on cost"]
    async with tui(db) as (app, pilot):
        assert run(app, parked)["reason"] == "budget:cost_usd"
        await select(pilot, parked)
        await key(pilot, "b")
        assert isinstance(app.screen, BudgetModal)
        assert app.screen.query_one("#dimension").value == "cost_usd"     # the one in its reason, preselected
        await pilot.click("#value")
        await pilot.press(*"0.5")
        await click(pilot, "#confirm")
        row = run(app, parked)
        assert json.loads(row["budget"])["cost_usd"] == 0.5
        assert (row["status"], row["reason"]) == ("queued", "resumed")
        assert run_report(app.reader, parked)["budget"]["dimensions"]["cost_usd"]["limit"] == 0.5
        assert screen_of(app).selected_id() == parked


async def test_n_starts_a_new_run(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        before = {r["id"] for r in list_runs(app.reader)}
        await key(pilot, "n")
        assert isinstance(app.screen, NewRunModal)
        app.screen.query_one("#agent").value = "hello"
        box = app.screen.query_one("#input")
        box.value = ""
        await pilot.click("#input")
        await pilot.press(*'{"name": "tui"}')
        await click(pilot, "#confirm")
        new = [r for r in list_runs(app.reader) if r["id"] not in before]
        assert len(new) == 1
        row = run(app, new[0]["id"])
        assert (row["agent"], row["status"], json.loads(row["request"])) == ("hello", "queued", {"name": "tui"})
        assert new[0]["id"] in shown_ids(app)


async def test_slash_filters_by_status_and_escape_clears(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        await pilot.press("slash")
        await pilot.press(*"status:failed", "enter")
        await pilot.pause()
        assert shown_ids(app) == [roles["failed"]]
        assert "filter: status:failed" in str(screen_of(app).query_one("#summary").content)
        assert roles["failed"] in strip(app)
        await key(pilot, "escape")
        assert len(shown_ids(app)) == len(roles)



@pytest.mark.layout_only   # keys and layout: the reads are the module's other tests', on both stores
async def test_escape_while_typing_a_filter_clears_it(demo):
    db, roles = demo
    async with tui(db, size=(80, 24)) as (app, pilot):
        await pilot.press("slash", *"status:succeeded", "enter")
        await pilot.pause()
        assert shown_ids(app) == [roles["succeeded"]]
        await pilot.press("slash", "backspace", "escape")
        await pilot.pause()
        assert len(shown_ids(app)) == len(roles)
        assert screen_of(app).query_one("DataTable").has_focus


async def test_the_command_palette_offers_the_selected_runs_actions(demo):
    from tui_agent.screens.palette import RunCommands

    db, roles = demo
    async with tui(db) as (app, pilot):
        await pilot.pause()
        selected = app.screen.selected_id()
        provider = RunCommands(app.screen)
        hits = [hit async for hit in provider.search("park")]
        assert [str(hit.text) for hit in hits] == [f"Park {selected}"]
        hits[0].command()
        await pilot.pause()
        assert get_run(app.store, selected)["status"] == "parked"


async def test_a_refresh_with_the_same_runs_updates_cells_in_place(demo, monkeypatch):
    from tui_agent import operate
    from tui_agent.messages import DataChanged

    db, roles = demo
    async with tui(db, size=(140, 40)) as (app, pilot):     # wide enough for the ATT column
        await pilot.pause()
        screen = screen_of(app)
        table = screen.query_one("DataTable")
        rebuilds = []
        clear = type(table).clear

        def counted_clear(self, *args, **kwargs):
            rebuilds.append(1)
            return clear(self, *args, **kwargs)

        monkeypatch.setattr(type(table), "clear", counted_clear)
        sleeping = roles["sleeping until tomorrow"]
        operate.park(app.store, sleeping)            # the needs-you section grows: the order changes
        screen.post_message(DataChanged())
        await pilot.pause()
        assert rebuilds == [1]
        failed = roles["failed"]
        with app.store.write() as conn:            # a run's row changes, the order does not
            conn.execute("UPDATE runs SET attempt = 7 WHERE id = ?", (failed,))
        screen.post_message(DataChanged())
        await pilot.pause()
        assert rebuilds == [1], "no rebuild: the changed cell was updated in place"
        assert str(table.get_cell(failed, "att")) == "7"


async def test_the_palette_offers_only_the_actions_that_apply_to_the_selected_run(demo):
    from tui_agent.screens.palette import RunCommands
    from tui_agent.screens.run_actions import RUN_ACTIONS

    titles = [action.title for action in RUN_ACTIONS.values() if action.name != "fork"]  # fork: its own test

    db, roles = demo
    async with tui(db) as (app, pilot):
        offered = {}
        for role in ("succeeded", "waiting for approval", "parked on cost", "outcome unknown"):
            await select(pilot, roles[role])
            provider = RunCommands(app.screen)
            hits = [str(hit.text) for label in titles async for hit in provider.search(label)]
            offered[role] = {text.removesuffix(f" {roles[role]}") for text in hits if text.endswith(roles[role])}
        assert offered["succeeded"] == set()       # an ended run: nothing to resume, park or cancel
        assert offered["waiting for approval"] == {"Park", "Cancel", "Approve or deny"}
        assert offered["parked on cost"] == {"Resume", "Cancel", "Raise a budget ceiling"}
        assert offered["outcome unknown"] == {"Park", "Cancel", "Reconcile an effect"}


async def test_a_key_that_does_not_apply_says_operates_rule_and_writes_nothing(demo):
    from tui_agent import operate

    toasts: list[str] = []
    async with selected(demo, "succeeded", toasts=toasts) as (app, pilot, done):
        before = run_report(app.store, done)
        for name in ("x", "a", "p"):
            await key(pilot, name)
            assert not isinstance(app.screen, (ConfirmModal, ApproveModal)), name
        row = get_run(app.store, done)
        assert toasts == [f"{done}: {operate.why_not_cancel(row)}",
                          f"{done}: {operate.why_not_approve(row, None)}",
                          f"{done}: {operate.why_not_park(row)}"]
        assert run_report(app.store, done) == before


@pytest.mark.sqlite_only   # a damaged page is a file's trouble
async def test_a_read_that_fails_before_an_action_is_a_toast_too(demo, monkeypatch):
    import sqlite3

    from tui_agent.screens import run_actions

    db, roles = demo
    waiting = roles["waiting for approval"]
    toasts: list[str] = []
    async with tui(db, toasts=toasts) as (app, pilot):
        await select(pilot, waiting)

        def damaged(*args):
            raise sqlite3.DatabaseError("database disk image is malformed")

        monkeypatch.setattr(run_actions, "get_run", damaged)  # the read each action makes first
        for name in ("a", "p"):
            await key(pilot, name)
        assert app.is_running
        assert len(toasts) == 2, toasts
        assert all("damaged" in t and str(db) in t for t in toasts), toasts
        monkeypatch.undo()
        assert run(app, waiting)["status"] == "waiting"


async def test_a_database_that_refuses_writes_is_a_toast_not_a_traceback(demo):
    db, roles = demo
    queued = roles["running"]
    toasts: list[str] = []
    async with tui(db, toasts=toasts) as (app, pilot):
        await select(pilot, queued)
        app.store.read_only()   # the store refuses every write, as a read-only file or role does
        await key(pilot, "p")
        assert app.is_running
        assert screen_of(app).selected_id() == queued
        assert len(toasts) == 1, toasts
        assert str(db) in toasts[0], toasts
        assert "read-only" in toasts[0], toasts
        assert run(app, queued)["status"] == "queued"
