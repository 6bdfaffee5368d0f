"""Budgets that see ahead, on screen (Pilot): the forecast under the run screen's gauges, and the runs table's
BURN sparkline of a running run's cost per step, read from a bounded window."""

from __future__ import annotations

import pytest
from helpers import open_run, registry_of, screen_of, settled, start_and_work, tui, work

from tui_agent import Agent, Budget, operate
from tui_agent.messages import DataChanged
from tui_agent.services.forecast import sparkline
from tui_agent.store.journal import journal_for
from tui_agent.store.runs import claim_run, get_run
from tui_agent.widgets.gauges import BudgetGauges

TOTAL = 60


def _paced(budget: Budget, cost_of=lambda index: 1):
    """Plans TOTAL steps, one model call each; call i's reply is `cost_of(i)` words (a word costs $0.000025,
    its hundred input tokens $0.0001)."""
    def paced(ctx, request):
        ctx.plan(total_steps=TOTAL)
        for i in range(TOTAL):
            ctx.model(f"ask{i}", messages=[{"role": "user", "content": "x" * 400}], max_tokens=50)
        return {}

    return registry_of(Agent(name="paced", run=paced, budget=budget,
                             script=lambda messages, max_tokens, index: " ".join(["word"] * cost_of(index))))


async def test_the_gauges_say_where_the_rate_leads_once_a_step_is_done(store):
    registry = _paced(Budget(steps=10, cost_usd=0.01, on_exhaust="park"))
    run_id, _ = operate.start(store, registry, agent_name="paced", request={})
    async with tui(store.path) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        gauges = screen.query_one(BudgetGauges)
        assert "at this rate" not in gauges.plain and "burn" not in gauges.plain   # no step yet: nothing to say
        before = gauges.size.height

        assert work(store, registry, run_id).reason == "budget:steps"         # 10 steps done, then parked
        screen.post_message(DataChanged())
        await pilot.pause()
        await pilot.pause()
        shown = gauges.plain
        # a step costs $0.000105 (a one-word reply; its reservation, 50 output tokens, is larger): the cost
        # ceiling of $0.01 is reached at step 10 + ceil(0.00895 / 0.000105) = 96, after the run's declared end
        assert "at this rate: step ceiling reached" in shown
        assert "cost ceiling" not in shown
        assert "finish ≈ $0.0063 in " in shown
        assert "burn $0.00011/step" in shown                   # $0.000105, said to two figures
        lines = gauges.lines(gauges.content_size.width)
        assert gauges.size.height == len(lines) > before       # the pane grew to show the forecast
        assert any(line.plain.startswith("at this rate:") and line.style == "dim" for line in lines)


async def test_the_gauges_name_the_step_where_the_cost_ceiling_is_reached(store):
    registry = _paced(Budget(steps=10, cost_usd=0.0025, on_exhaust="park"))
    run_id = start_and_work(store, registry, "paced", {}).run_id
    async with tui(store.path) as (app, pilot):
        gauges = (await open_run(app, pilot, run_id)).query_one(BudgetGauges)
        # at $0.000105 a step, 0.0025 - 0.00105 lasts 14 more steps: the 24th reaches the ceiling
        assert "cost ceiling at step 24 of 60" in gauges.plain


@pytest.mark.sqlite_only   # it runs again the statement SQLite's trace wrote out with its values
async def test_the_burn_column_sparks_each_running_runs_last_twenty_steps_in_one_bounded_read(store):
    # one run parked part-way, one run claimed by a worker (running), both with costs that vary
    registry = _paced(Budget(steps=45, on_exhaust="park"), cost_of=lambda index: 1 + (index * 7) % 11)
    parked = start_and_work(store, registry, "paced", {}).run_id
    running = start_and_work(store, registry, "paced", {}).run_id
    operate.resume(store, running)
    assert claim_run(store, running, "w-test", 600, get_run(store, running)["updated_at"] + 1) is not None
    assert get_run(store, running)["status"] == "running"
    costs = [entry["cost_usd"] for entry in journal_for(store, running)]
    assert len(costs) == 45 and len(set(costs[-20:])) > 3

    async with tui(store.path) as (app, pilot):
        await pilot.pause()
        runs = screen_of(app)
        table = runs.query_one("DataTable")
        assert "burn" in [column.key.value for column in table.columns.values()]
        burn = table.get_cell(running, "burn")
        assert burn.plain == sparkline(costs[-20:])        # the last twenty, oldest left
        assert len(burn.plain) == 20 and len(set(burn.plain)) > 3
        assert table.get_cell(parked, "burn") == ""       # not running: no sparkline, and nothing read for it

        statements: list[str] = []
        loading = app.session.loader.store      # a reload reads on the reader thread's connection
        loading.conn.set_trace_callback(statements.append)
        try:
            runs.reload()
            await settled(pilot)
        finally:
            loading.conn.set_trace_callback(None)
        journal_reads = [s for s in statements if "journal" in s and "checkpoints_now" not in s
                         and "runs r" not in s]
        assert len(journal_reads) == 1, journal_reads        # one read, for the one running run
        assert running in journal_reads[0] and parked not in journal_reads[0]
        assert "ORDER BY position DESC LIMIT 20" in journal_reads[0]
        rows = app.reader.conn.execute(journal_reads[0]).fetchall()
        assert len(rows) == 20                               # of the run's 45 entries
