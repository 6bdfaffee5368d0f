"""The decisions a person makes in the TUI (issue 13, items 6, 9, 10, 11, 12 and 15), through Pilot:
each dialog says what its buttons do and refuses what cannot help, a denial ends the run, the schedule
screen shows before it fires, and the events tab opens at the newest event."""

from __future__ import annotations

import pytest
from helpers import click, key, opened, recorded_toasts, run_screen, tui, work
from textual.widgets import Button, Input, RadioButton, Select

from tui_agent import operate
from tui_agent.messages import DataChanged
from tui_agent.report import run_report
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.modals import (
    ApproveModal,
    BudgetModal,
    ConfirmModal,
    NewRunModal,
    ReconcileModal,
)
from tui_agent.screens.run import RunScreen
from tui_agent.screens.schedules import ScheduleDetail, SchedulesScreen
from tui_agent.store import open_store
from tui_agent.store.approvals import approvals_for
from tui_agent.store.effects import effects_for
from tui_agent.store.runs import get_run, list_runs
from tui_agent.widgets.events import EventsLog
from tui_agent.widgets.status import badge

pytestmark = pytest.mark.demo_on_both   # the operator's decisions, on the SQLite demo and on PostgreSQL


def labels(screen) -> list[str]:
    return [str(b.label) for b in screen.query(Button)]


# -- 6. a ceiling below what is spent --------------------------------------------------------------


async def test_b_refuses_a_ceiling_at_or_below_what_the_run_already_spent(demo, demo_store):
    db, roles = demo
    run_id = roles["sleeping until tomorrow"]          # its model call is paid for
    operate.park(demo_store, run_id)
    spent = run_report(demo_store, run_id)["budget"]["dimensions"]["cost_usd"]["used"]
    assert spent > 0
    before = get_run(demo_store, run_id)["budget"]
    async with run_screen(db, run_id) as (app, pilot):
        toasts = recorded_toasts(app)
        await key(pilot, "b")
        modal = app.screen
        assert isinstance(modal, BudgetModal)
        modal.query_one("#dimension", Select).value = "cost_usd"
        modal.query_one("#value", Input).focus()
        for below in (f"{spent / 2:.6f}", f"{spent}"):
            modal.query_one("#value", Input).value = below
            await key(pilot, "enter")            # (the toasts cover the buttons: enter in the box submits)
            assert app.screen is modal, "refused in the modal"
            assert toasts[-1] == f"cost_usd: already spent ${spent:.4f}; enter more than that"
        assert len(toasts) == 2
        assert get_run(demo_store, run_id)["budget"] == before
        assert get_run(demo_store, run_id)["status"] == "parked"

        modal.query_one("#dimension", Select).value = "steps"
        modal.query_one("#value", Input).value = "3"
        await key(pilot, "enter")
        assert toasts[-1].startswith("steps: already used ")
        assert toasts[-1].endswith("; enter more than that")

        modal.query_one("#value", Input).value = "40"
        await key(pilot, "enter")
        assert isinstance(app.screen, RunScreen)
        assert (get_run(demo_store, run_id)["status"], get_run(demo_store, run_id)["reason"]) == ("queued", "resumed")


# -- 9. a denied approval ends the run --------------------------------------------------------------


async def test_denying_the_send_ends_nightly_report_cancelled_denied_with_the_note(demo, demo_store):
    async with opened(demo, "waiting for approval") as (app, pilot, run_id):
        await key(pilot, "a")
        assert isinstance(app.screen, ApproveModal)
        await pilot.click("#deny")
        app.screen.query_one("#note", Input).value = "the numbers look wrong"
        await click(pilot, "#confirm")
        assert isinstance(app.screen, ConfirmModal)                # a denial ends the run: asked first
        assert labels(app.screen) == ["Deny it", "Don't deny"]
        assert approvals_for(demo_store, run_id)[-1]["decision"] is None
        await click(pilot, "#confirm")
        assert approvals_for(demo_store, run_id)[-1]["decision"] == "denied"

        outcome = work(demo_store, load_registry(), run_id)       # a worker goes on with the answer
        assert (outcome.status, outcome.reason) == ("cancelled", "denied")
        app.screen.post_message(DataChanged())
        await pilot.pause()
        run = get_run(demo_store, run_id)
        assert (run["status"], run["reason"], run["result"]) == ("cancelled", "denied", None)
        assert effects_for(demo_store, run_id) == []               # nothing was sent
        assert "cancelled: denied" in str(app.screen.query_one("#run-header").render())
        assert app.screen.query_one(EventsLog).plain.splitlines()[-1].endswith("the numbers look wrong")
    shown = badge("cancelled", "denied")
    assert shown.plain == "– cancelled: denied"  # dim like every cancelled run
    assert str(shown.style) == "dim"


# -- 10. buttons named by what they do, focus on the harmless one ------------------------------------


async def test_the_cancel_dialog_says_cancel_the_run_or_keep_it_and_enter_keeps_it(demo, demo_store):
    async with opened(demo, "waiting for approval") as (app, pilot, run_id):
        await key(pilot, "x")
        assert isinstance(app.screen, ConfirmModal)
        assert labels(app.screen) == ["Cancel the run", "Keep it"]
        assert app.screen.focused.id == "cancel"
        await key(pilot, "enter")                                  # a reflex enter changes nothing
        assert isinstance(app.screen, RunScreen)
        assert get_run(demo_store, run_id)["status"] == "waiting"

        await key(pilot, "f")
        assert isinstance(app.screen, ConfirmModal)
        assert labels(app.screen) == ["Fork it", "Don't fork"]
        assert app.screen.focused.id == "cancel"
        before = len(list_runs(demo_store))
        await key(pilot, "enter")
        assert isinstance(app.screen, RunScreen)
        assert len(list_runs(demo_store)) == before


@pytest.mark.layout_only   # keys and layout: the reads are the module's other tests', on both stores
async def test_every_form_dialog_names_its_buttons(demo):
    db, roles = demo
    for role, press, expected in (("outcome unknown", "c", "Record the decision"),
                                  ("waiting for approval", "a", "Record the decision"),
                                  ("parked on cost", "b", "Raise and resume")):
        async with run_screen(db, roles[role]) as (app, pilot):
            await key(pilot, press)
            assert labels(app.screen) == [expected, "Close"], role
    async with tui(db) as (app, pilot):
        await pilot.pause()
        await key(pilot, "n")
        assert isinstance(app.screen, NewRunModal)
        assert labels(app.screen) == ["Start the run", "Close"]


# -- 11. the reconcile dialog's disabled choice and its cursor ---------------------------------------


async def test_ask_the_service_without_a_lookup_is_marked_and_the_cursor_does_not_wrap(demo):
    db, roles = demo
    run_id = roles["outcome unknown"]           # its outbox was asked for with lookup off
    async with run_screen(db, run_id) as (app, pilot):
        await key(pilot, "c")
        modal = app.screen
        assert isinstance(modal, ReconcileModal)
        assert not modal.effect["has_lookup"]
        ask = modal.query_one("#ask", RadioButton)
        assert ask.disabled  # said in words
        assert "not available: no lookup" in ask.label.plain
        assert ask.label.spans
        assert all("dim" in str(span.style) for span in ask.label.spans)
        choices = modal.query_one("#decision")
        choices.focus()
        await pilot.pause()

        def cursor() -> str:
            return next(b.id for b in choices.query(RadioButton) if b.has_class("-selected"))

        assert cursor() == "happened"
        await key(pilot, "up")                   # the first choice it can take: up stays there
        assert cursor() == "happened"
        for _ in range(4):
            await key(pilot, "down")
        assert cursor() == "abandon"             # and down stops at the last one
        await key(pilot, "up")
        assert cursor() == "not-done"


# -- 12. the schedules screen: enter shows, F fires after asking --------------------------------------


@pytest.fixture
def schedule_with_a_run(db_path):
    store = open_store(db_path)
    registry = load_registry()
    operate.schedule_add(store, registry, name="nightly-hello", agent="hello", cron="0 2 * * *", tz="Europe/Berlin",
                         overlap="wait")
    (run_id,) = operate.schedule_fire(store, registry, "nightly-hello").started
    store.close()
    return "nightly-hello", run_id


async def test_enter_opens_the_schedule_and_fires_nothing(db_path, schedule_with_a_run):
    name, run_id = schedule_with_a_run
    async with tui(db_path) as (app, pilot):
        await key(pilot, "s")
        assert isinstance(app.screen, SchedulesScreen)
        await key(pilot, "enter")
        assert isinstance(app.screen, ScheduleDetail)
        assert len(list_runs(app.reader)) == 1, "enter fires nothing"
        shown = str(app.screen.query_one("#schedule-detail-text").content)
        assert "Next fires (Europe/Berlin)" in shown
        assert shown.count(" 02:00 CE") == ScheduleDetail.FIRES             # 02:00 in Berlin, not in UTC
        assert f"{run_id}  ○ queued" in shown                               # its recent runs
        assert f"started {run_id} (fired by hand)" in shown                 # its events
        await key(pilot, "escape")
        assert isinstance(app.screen, SchedulesScreen)


async def test_F_asks_first_and_says_what_the_overlap_policy_did(db_path, schedule_with_a_run):
    name, run_id = schedule_with_a_run
    toasts: list[str] = []
    async with tui(db_path, toasts=toasts) as (app, pilot):
        await key(pilot, "s")
        await key(pilot, "F")
        assert isinstance(app.screen, ConfirmModal)
        assert labels(app.screen) == ["Fire it now", "Don't fire"]
        assert app.screen.focused.id == "cancel"
        await key(pilot, "enter")
        assert isinstance(app.screen, SchedulesScreen)
        assert len(list_runs(app.reader)) == 1

        await key(pilot, "enter")                # from the detail too: F asks, then fires
        await key(pilot, "F")
        assert isinstance(app.screen, ConfirmModal)
        await click(pilot, "#confirm")
        assert len(list_runs(app.reader)) == 1
        assert toasts[-1] == f"{name}: held until {run_id} ends (overlap=wait: it starts then)"


# -- 15. the events tab opens at the newest event ------------------------------------------------------


async def test_the_events_tab_opens_at_the_newest_event(demo):
    db, roles = demo
    async with run_screen(db, roles["outcome unknown"], size=(80, 24)) as (app, pilot):
        assert app.screen.compact
        await key(pilot, "t")                    # budget -> events
        await pilot.pause()
        log = app.screen.query_one(EventsLog)
        assert log.max_scroll_y > 0, "the fixture run has more events than the tab shows"
        assert log.scroll_y == log.max_scroll_y
