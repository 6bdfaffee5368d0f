"""The run screen (Pilot): what it shows for the demo's executed runs, and that each key acts on the
store through the shared actions (asserted on the database, not on the screen)."""

from __future__ import annotations

import json

import pytest
from helpers import (
    click,
    key,
    open_run,
    opened,
    recorded_toasts,
    registry_of,
    run_screen,
    timeline_of,
    timeline_rows,
    tui,
    work,
)
from textual.widgets import Input, RadioButton, Select, Tabs

from tui_agent import Agent, operate
from tui_agent.messages import DataChanged
from tui_agent.report import run_report
from tui_agent.runtime.clock import now
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.modals import (
    ApproveModal,
    BudgetModal,
    ConfirmModal,
    ReconcileModal,
)
from tui_agent.screens.run import RunScreen
from tui_agent.store import open_store
from tui_agent.store.approvals import approvals_for
from tui_agent.store.effects import effects_for
from tui_agent.store.runs import claim_run, get_run, list_runs
from tui_agent.widgets.events import EventsLog
from tui_agent.widgets.gauges import BudgetGauges, gauge_line
from tui_agent.widgets.journal import JournalViewer
from tui_agent.widgets.ledger import EffectLedger
from tui_agent.widgets.timeline import Timeline

pytestmark = pytest.mark.demo_on_both   # what the TUI shows, on the SQLite demo and on PostgreSQL


def viewer(app) -> JournalViewer:
    return app.screen.query_one(JournalViewer)


def timeline(app) -> Timeline:
    return app.screen.query_one(Timeline)


async def select(pilot, app, position: int) -> None:
    """Go to a position as a person does: g, the position, enter."""
    await pilot.press("g", *str(position), "enter")
    await pilot.pause()
    assert timeline(app).selected.position == position


# -- what it shows --------------------------------------------------------------------------------


@pytest.mark.layout_only   # keys and layout: the reads are the module's other tests', on both stores
async def test_enter_on_the_runs_table_opens_the_run(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        await pilot.pause()
        runs = app.screen
        await key(pilot, "enter")
        assert isinstance(app.screen, RunScreen)
        assert app.screen.run_id == runs.selected_id()
        await key(pilot, "escape")
        assert app.screen is runs


async def test_timeline_header_and_panes_of_the_doubtful_run(demo):
    db, roles = demo
    run_id = roles["outcome unknown"]
    async with tui(db) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        header = str(screen.query_one("#run-header").render())
        assert run_id in header
        assert "nightly-report v1" in header
        assert "needs you: reconcile" in header
        assert "attempt 2" in header
        assert '"team":"support"' in header
        items = timeline(app).items
        assert [i.name for i in items] == ["settings", "fetch:sales", "fetch:incidents", "fetch:deploys",
                                          "summarize", "write-report", "send-report"]
        assert [i.mark for i in items] == ["✓"] * 6 + ["?"]
        assert items[4].kind == "model"
        assert items[4].cost_usd
        # the pending position is selected first: the effect in doubt with its ledger row
        assert timeline(app).selected_key == "p6"
        shown = viewer(app).plain
        key = effects_for(app.reader, run_id)[0]["key"]
        assert "state    unknown" in shown
        assert f"key      {key}" in shown
        assert "outbox" in shown
        assert "does not deduplicate" in shown
        assert "attempts 1" in shown
        assert "fence 1" in shown
        assert "w-demo" in shown
        ledger = screen.query_one(EffectLedger)
        assert ledger.row_count == 1
        row = [str(c) for c in ledger.get_row_at(0)]
        assert row[:3] == ["send-report", "unknown", "1"]
        assert row[4:] == ["no dedupe", key]
        events = screen.query_one(EventsLog).plain
        assert "queued (nightly-report v1)" in events
        assert events.strip().splitlines()[-1].count("needs a person")
        gauges = screen.query_one(BudgetGauges).plain
        assert "steps" in gauges
        assert "6/50" in gauges
        assert "$0.50" in gauges
        assert "soft 70%" in gauges
        checkpoint = str(screen.query_one("#checkpoint").render())
        assert "6 of 7" in checkpoint
        assert "plan revision 0" in checkpoint
        assert "v1" in checkpoint


async def test_a_model_reply_shows_its_text_usage_and_cost_and_v_shows_raw_json(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        await open_run(app, pilot, roles["succeeded"])
        await select(pilot, app, 4)
        shown = viewer(app).plain
        assert "Nightly summary" in shown
        assert "needs attention" in shown
        assert "usage 115 in · 68 out · cost $0.0005" in shown
        assert '"type": "message"' not in shown
        await pilot.press("v")
        assert '"type": "message"' in viewer(app).plain
        assert '"input_tokens": 115' in viewer(app).plain
        await pilot.press("k")                       # the raw view follows the selection
        await pilot.pause()
        assert timeline(app).selected_key == "p3"
        assert '"source": "deploys"' in viewer(app).plain
        await pilot.press("v", "j")
        await pilot.pause()
        assert "Nightly summary" in viewer(app).plain
        assert '"type"' not in viewer(app).plain


async def test_a_step_result_is_pretty_json_and_an_effect_shows_its_ledger_row(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        await open_run(app, pilot, roles["succeeded"])
        assert timeline(app).selected_key == "p6"     # no pending position: the last entry
        shown = viewer(app).plain
        assert "confirmed" in shown
        assert "dedupes keys 24h" in shown
        assert "remembers this key 23h" in shown
        assert '"message_id"' in shown
        assert "lookup available" in shown
        window = str(app.screen.query_one(EffectLedger).get_row_at(0)[4])
        assert window.startswith("23h")
        assert window.endswith("left")
        await select(pilot, app, 1)
        assert '"source": "sales"' in viewer(app).plain
        assert '\n  "rows": [' in viewer(app).plain


async def test_progress_bar_and_gauges(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        screen = await open_run(app, pilot, roles["waiting for approval"])
        bar = screen.query_one("#step-bar")
        assert (bar.total, bar.done) == (8, 6)
        assert bar.render().plain.count("█") == bar.size.width * 6 // 8
        assert timeline(app).items[-1].name == "approve"
        assert timeline(app).items[-1].mark == "◔"
        assert "Send the nightly report for leads" in viewer(app).plain


async def test_retries_and_kinds_are_marked_in_the_timeline(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        await open_run(app, pilot, roles["succeeded"])
        _, rows = timeline_rows(app.reader, roles["succeeded"])
        rows[1]["step"]["attempts"] = 3                  # as a step that succeeded on its third attempt
        items = timeline_of(app.reader, roles["succeeded"], rows)
        timeline(app).set_items(items)
        await pilot.pause()
        rows = [str(timeline(app).get_option_at_index(i).prompt) for i in range(len(items))]
        assert "↺3" in rows[1]
        assert "↺" not in rows[0]
        assert "scripted" in rows[4]  # a call names its model
        assert "$.0005" in rows[4]
        assert "effect" in rows[6]


def test_gauge_colours_change_at_soft_and_hard():
    calm = gauge_line("cost", 0.1, limit=0.5, soft=0.7, width=50, name="cost_usd")
    soft = gauge_line("cost", 0.4, limit=0.5, soft=0.7, width=50, name="cost_usd")
    hard = gauge_line("cost", 0.5, limit=0.5, soft=0.7, width=50, name="cost_usd")
    assert len(calm.plain) == 50
    assert "│" in calm.plain
    assert calm.plain.endswith("$0.10/$0.50  20%")
    assert calm.plain.index("│") == 8 + round(0.7 * (50 - 8 - 17))
    assert not any("#ffb000" in str(s.style) or "#ff5f5f" in str(s.style) for s in calm.spans)
    assert any("#ffb000" in str(s.style) for s in soft.spans)
    assert any("#ff5f5f" in str(s.style) for s in hard.spans)
    assert hard.plain.endswith("100%")


# -- actions, asserted on the store --------------------------------------------------------------


async def test_p_parks_a_waiting_run_and_r_resumes_it(demo, demo_store):
    db, roles = demo
    run_id = roles["sleeping until tomorrow"]
    async with tui(db) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        await key(pilot, "p")
        assert get_run(demo_store, run_id)["status"] == "parked"
        assert "parked" in str(screen.query_one("#run-header").render())
        await key(pilot, "r")
        run = get_run(demo_store, run_id)
        assert (run["status"], run["reason"]) == ("queued", "resumed")


async def test_r_resumes_the_parked_run(demo, demo_store):
    async with opened(demo, "parked on cost") as (app, pilot, run_id):
        assert timeline(app).items[-1].mark == "■"
        await key(pilot, "r")
        assert get_run(demo_store, run_id)["status"] == "queued"


async def test_x_asks_then_cancels(demo, demo_store):
    async with opened(demo, "waiting for approval") as (app, pilot, run_id):
        await key(pilot, "x")
        assert isinstance(app.screen, ConfirmModal)
        assert get_run(demo_store, run_id)["status"] == "waiting"      # nothing before the answer
        await click(pilot, "#confirm")
        assert isinstance(app.screen, RunScreen)
        assert (get_run(demo_store, run_id)["status"], get_run(demo_store, run_id)["reason"]) == ("cancelled", "person")


async def test_a_approves_with_a_note(demo, demo_store):
    async with opened(demo, "waiting for approval") as (app, pilot, run_id):
        await key(pilot, "a")
        modal = app.screen
        assert isinstance(modal, ApproveModal)
        assert modal.query_one("#approve", RadioButton).value
        modal.query_one("#note", Input).value = "looks right"
        await click(pilot, "#confirm")
        run = get_run(demo_store, run_id)
        assert run["status"] == "queued"
        decided = approvals_for(demo_store, run_id)[-1]
        assert decided["decision"] == "approved"
        assert decided["note"] == "looks right"
        assert decided["decided_at"]
        assert "queued" in str(app.screen.query_one("#run-header").render())


async def test_c_reconciles_the_effect_in_doubt_as_happened(demo, demo_store):
    async with opened(demo, "outcome unknown") as (app, pilot, run_id):
        await select(pilot, app, 2)          # not an effect: the run's doubtful effect is the one decided
        await key(pilot, "c")
        modal = app.screen
        assert isinstance(modal, ReconcileModal)
        assert modal.effect["name"] == "send-report"
        await pilot.click("#happened")
        await click(pilot, "#confirm")
        effect = effects_for(demo_store, run_id)[-1]
        assert effect["state"] == "confirmed"
        assert effect["decided_by"]
        assert get_run(demo_store, run_id)["status"] == "queued"
        assert timeline(app).items[-1].mark == "✓"      # repainted from the store


async def test_c_on_the_selected_effect_in_doubt(demo, demo_store):
    async with opened(demo, "outcome unknown") as (app, pilot, run_id):
        await key(pilot, "c")
        assert isinstance(app.screen, ReconcileModal)
        await pilot.click("#not-done")
        await click(pilot, "#confirm")
        question = app.screen   # the outbox does not deduplicate: sending again may send twice, so it asks
        assert isinstance(question, ConfirmModal), question
        assert question.focused.id == "cancel"
        assert effects_for(demo_store, run_id)[-1]["state"] != "not_done"
        await click(pilot, "#confirm")
        assert effects_for(demo_store, run_id)[-1]["state"] == "not_done"
        assert get_run(demo_store, run_id)["status"] == "queued"


async def test_b_raises_the_cost_ceiling(demo, demo_store):
    async with opened(demo, "parked on cost") as (app, pilot, run_id):
        await key(pilot, "b")
        modal = app.screen
        assert isinstance(modal, BudgetModal)
        modal.query_one("#dimension", Select).value = "cost_usd"
        modal.query_one("#value", Input).value = "1.5"
        await click(pilot, "#confirm")
        run = get_run(demo_store, run_id)
        assert json.loads(run["budget"])["cost_usd"] == 1.5
        assert run["status"] == "queued"
        assert "$1.50" in app.screen.query_one(BudgetGauges).plain


async def test_b_with_unbounded_drops_the_default_ceilings_and_keeps_the_agents_own(demo, demo_store):
    toasts: list[str] = []
    async with opened(demo, "parked on cost") as (app, pilot, run_id):
        recorded_toasts(app, into=toasts)
        before = json.loads(get_run(demo_store, run_id)["budget"])
        assert {"wall_s", "input_tokens"} <= set(before["defaults"])
        await key(pilot, "b")
        app.screen.query_one("#value", Input).value = "unbounded"
        await click(pilot, "#confirm")
        run = get_run(demo_store, run_id)
        after = json.loads(run["budget"])
        assert after["unbounded"] is True and after["defaults"] == []
        assert after.get("wall_s") is None and after.get("input_tokens") is None
        assert (after["cost_usd"], after["steps"]) == (before["cost_usd"], before["steps"]), "nightly-report's own"
        assert run["status"] == "queued"
        assert f"{run_id}: unbounded (no default ceilings); resumed" in toasts


async def test_f_forks_from_the_selected_position_and_opens_the_new_run(demo, demo_store):
    async with opened(demo, "succeeded") as (app, pilot, run_id):
        await pilot.press("k", "k")                   # from #6 to #4 (summarize)
        await pilot.pause()
        assert timeline(app).selected_key == "p4"
        await key(pilot, "f")
        assert isinstance(app.screen, ConfirmModal)
        await click(pilot, "#confirm")
        children = [r for r in (get_run(demo_store, row["id"]) for row in list_runs(demo_store)) if r["parent_id"] == run_id]
        assert len(children) == 1
        assert children[0]["fork_step"] == 4
        assert isinstance(app.screen, RunScreen)
        assert app.screen.run_id == children[0]["id"]
        assert [i.name for i in timeline(app).items][:4] == ["settings", "fetch:sales", "fetch:incidents",
                                                             "fetch:deploys"]
        assert len(run_report(demo_store, children[0]["id"])["steps"]) == 4


async def test_escape_on_the_fork_confirmation_forks_nothing(demo, demo_store):
    db, roles = demo
    async with tui(db) as (app, pilot):
        await open_run(app, pilot, roles["succeeded"])
        before = len(list_runs(demo_store))
        await pilot.press("f", "escape")
        await pilot.pause()
        assert len(list_runs(demo_store)) == before
        assert isinstance(app.screen, RunScreen)


# -- live refresh and layout ---------------------------------------------------------------------


async def test_data_changed_repaints_in_place_keeping_the_selection(demo, demo_store):
    db, roles = demo
    run_id = roles["sleeping until tomorrow"]
    async with tui(db) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        await select(pilot, app, 3)
        operate.park(demo_store, run_id, "from the CLI")      # another connection commits
        screen.post_message(DataChanged())
        await pilot.pause()
        assert "parked" in str(screen.query_one("#run-header").render())
        assert timeline(app).selected_key == "p3"
        assert "parked by" in screen.query_one(EventsLog).plain


@pytest.mark.layout_only   # keys and layout: the reads are the module's other tests', on both stores
async def test_small_terminal_shows_lower_panes_as_tabs(demo):
    db, roles = demo
    async with tui(db, size=(80, 24)) as (app, pilot):
        screen = await open_run(app, pilot, roles["outcome unknown"])
        assert screen.has_class("-compact")
        assert screen.query_one(Tabs).display
        assert screen.query_one("#budget-pane").display
        assert not screen.query_one("#events-pane").display
        await key(pilot, "t")
        assert screen.query_one("#events-pane").display
        assert not screen.query_one("#budget-pane").display
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert screen.has_class("-wide")
        assert not screen.query_one(Tabs).display
        assert all(screen.query_one(f"#{p}-pane").display for p in ("budget", "events", "ledger", "checkpoint"))


async def test_on_the_last_row_the_selection_follows_the_run(demo, demo_store):
    db, _ = demo
    registry = load_registry()
    run_id, _ = operate.start(demo_store, registry, agent_name="nightly-report",
                              request={"date": "2026-11-20", "team": "quick"})
    async with tui(db) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        assert [(i.name, i.mark) for i in timeline(app).items] == [("next step", "○")]
        work(demo_store, registry, run_id)                    # a worker runs it to the end meanwhile
        screen.post_message(DataChanged())
        await pilot.pause()
        items = timeline(app).items
        assert get_run(demo_store, run_id)["status"] == "succeeded"
        assert items[-1].name == "send-report"
        assert timeline(app).selected_key == items[-1].key
        assert "confirmed" in viewer(app).plain


@pytest.mark.layout_only   # keys and layout: the reads are the module's other tests', on both stores
async def test_j_k_move_and_enter_on_a_ledger_row_selects_its_entry(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        screen = await open_run(app, pilot, roles["succeeded"])
        await pilot.press("k", "k", "k", "j")
        await pilot.pause()
        assert timeline(app).selected_key == "p4"
        screen.query_one(EffectLedger).focus()
        await key(pilot, "enter")
        assert timeline(app).selected_key == "p6"
        assert timeline(app).has_focus


async def test_a_file_step_shows_its_change_as_a_unified_diff_and_v_shows_raw_json(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        await open_run(app, pilot, roles["refactor crashed"])
        await select(pilot, app, 3)                  # settings, worktree, find-files, then the first file
        shown = viewer(app).plain
        assert "status   rewritten" in shown and "imports  1" in shown
        assert "--- a/src/components/group00/Widget000.tsx" in shown
        assert '-import { cn } from "@/utils/cn";' in shown
        assert '+import { cn } from "~/lib/cn";' in shown
        await pilot.press("v")
        await pilot.pause()
        assert '"diff":' in viewer(app).plain and "--- a/src" in viewer(app).plain


async def test_the_pending_row_of_a_running_run_says_how_long_its_step_has_been_in_flight(db_path, clock):
    store = open_store(db_path)
    registry = registry_of(Agent(name="idle", run=lambda ctx, r: {}))
    run_id, _ = operate.start(store, registry, agent_name="idle", request={})
    claim_run(store, run_id, "w-hung", 60.0, now())   # its step started then, and never returned
    store.close()
    clock.advance(3 * 3600 + 12 * 60 + 5)
    async with run_screen(db_path, run_id) as (app, pilot):
        pending = timeline(app).items[-1]
        assert (pending.pending, pending.note) == (True, "in flight for 3h 12m on w-hung"), pending
        assert "in flight for 3h 12m" in "\n".join(str(line) for line in timeline(app)._prompts())
