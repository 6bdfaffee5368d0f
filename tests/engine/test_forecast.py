"""Budgets that see ahead (tui_agent/services/forecast.py): the burn rate, the step where a ceiling is reached at
that rate and what the run will have used at its declared end; in `show`, `show --json` and the runs table's
bounded cost window."""

import json

import pytest
from helpers import on_sqlite, registry_of, start_and_work, work

from tui_agent import Agent, Budget, operate
from tui_agent.report import budget_of, run_report
from tui_agent.services.forecast import forecast, projection_parts, sentence, sparkline
from tui_agent.store.journal import checkpoint_for, cost_window, journal_for
from tui_agent.store.runs import claim_run, get_run

# claude-haiku-4-5, the scripted model: 100 input tokens (400 characters) at $1 / M and a one-token reply at
# $5 / M: $0.000105 a call. max_tokens=1 makes the reservation (the worst case) the real cost, so the runtime
# refuses exactly the call that would pass the ceiling: the run parks where the rate says it would.
PER_CALL = 0.000105
TOTAL = 60


def _budget(dimensions: dict[str, tuple[float, float | None]]) -> dict:
    """budget_of's shape for `forecast`: {name: (used, limit)}."""
    return {"dimensions": {name: {"used": used, "limit": limit} for name, (used, limit) in dimensions.items()}}


# -- the arithmetic ---------------------------------------------------------------------------------


def test_nothing_is_projected_before_the_first_step():
    assert forecast(_budget({"cost_usd": (0, 1.0)}), steps_done=0, position=0, total_steps=60,
                    running_s=0) is None
    assert sentence(None) == "" and projection_parts(None) == []


def test_rates_ceiling_step_and_finish_from_a_declared_total():
    fc = forecast(_budget({"cost_usd": (1.0, 2.5), "output_tokens": (3000, None), "steps": (10, None),
                           "effects": (0, None)}),
                  steps_done=10, position=10, total_steps=60, running_s=120.0)
    cost = fc["dimensions"]["cost_usd"]
    assert cost["per_step"] == pytest.approx(0.1)
    assert cost["per_minute"] == pytest.approx(0.5)               # $1 in 2 minutes of running time
    assert cost["ceiling_step"] == 25                              # 10 + ceil(1.5 / 0.1)
    assert cost["at_finish"] == pytest.approx(6.0)                 # 1 + 0.1 x 50
    assert cost["at_ceiling"] is False
    assert fc["dimensions"]["output_tokens"]["at_finish"] == pytest.approx(18000)
    assert fc["dimensions"]["output_tokens"]["ceiling_step"] is None     # no ceiling
    assert "effects" not in fc["dimensions"]                         # neither used nor limited
    assert (fc["remaining_steps"], fc["per_step_s"], fc["remaining_s"]) == (50, 12.0, 600.0)
    assert fc["first_ceiling"] == {"dimension": "cost_usd", "step": 25}
    assert sentence(fc) == ("at this rate: cost ceiling at step 25 of 60 · finish ≈ $6.00 in 10m 00s"
                            " · burn $0.10/step · $0.50/min · 12.0s/step")


def test_the_ceiling_step_is_the_first_step_that_reaches_it_even_on_an_exact_multiple():
    # (3.0 - 0.3) / 0.3 is 9.000000000000002 in floating point: yet the 10th step reaches the ceiling exactly
    assert (3.0 - 0.3) / 0.3 > 9
    fc = forecast(_budget({"cost_usd": (0.3, 3.0)}), steps_done=1, position=1, total_steps=None, running_s=1.0)
    assert fc["dimensions"]["cost_usd"]["ceiling_step"] == 10
    assert projection_parts(fc) == ["cost ceiling at step 10"]      # no total declared: no "of", no finish
    assert fc["remaining_steps"] is None and fc["dimensions"]["cost_usd"]["at_finish"] is None


def test_a_ceiling_past_the_declared_total_is_not_named_and_one_already_reached_is_said_so():
    fc = forecast(_budget({"cost_usd": (1.0, 100.0), "steps": (10, 10), "model_calls": (10, 12)}),
                  steps_done=10, position=10, total_steps=60, running_s=0.0)
    assert fc["dimensions"]["cost_usd"]["ceiling_step"] is None     # at step 1000: after the run's end at 60
    assert fc["dimensions"]["steps"]["at_ceiling"] is True
    assert fc["dimensions"]["steps"]["ceiling_step"] is None
    assert fc["dimensions"]["model_calls"]["ceiling_step"] == 12
    assert fc["dimensions"]["cost_usd"]["per_minute"] is None       # no running time yet: no per-minute rate
    assert sentence(fc) == ("at this rate: step ceiling reached · model-call ceiling at step 12 of 60"
                            " · finish ≈ $6.00 · burn $0.10/step")   # no running time: no pace, no time left


def test_a_dimension_not_growing_never_reaches_its_ceiling_and_an_ended_run_projects_nothing():
    growing = _budget({"cost_usd": (0.5, 1.0), "tool_calls": (0, 5)})
    fc = forecast(growing, steps_done=5, position=5, total_steps=None, running_s=10.0)
    assert fc["dimensions"]["tool_calls"]["ceiling_step"] is None
    assert fc["dimensions"]["cost_usd"]["ceiling_step"] == 10
    ended = forecast(growing, steps_done=5, position=5, total_steps=60, running_s=10.0, ended=True)
    assert ended["dimensions"]["cost_usd"]["ceiling_step"] is None
    assert ended["remaining_steps"] is None and ended["first_ceiling"] is None
    assert projection_parts(ended) == []
    assert sentence(ended).startswith("burn $0.10/step")            # its rate is still worth saying


def test_the_sparkline_scales_to_the_windows_largest_and_says_zero_as_a_low_line():
    assert sparkline([0, 1, 2, 4, 8]) == "▁▂▃▅█"
    assert sparkline([0.0001, 0.1]) == "▂█"          # any cost at all stands above a step that cost nothing
    assert sparkline([0, 0, 0]) == "▁▁▁"             # steps that cost nothing: a flat low line
    assert sparkline([]) == ""


# -- a real run: projected mid-way, then let run to its ceiling ----------------------------------------------


def _paced(budget: Budget):
    """Plans TOTAL steps and makes one model call per step, each costing PER_CALL."""
    def paced(ctx, request):
        ctx.plan(total_steps=TOTAL)
        for i in range(TOTAL):
            ctx.model(f"ask{i}", messages=[{"role": "user", "content": "x" * 400}], max_tokens=1)
        return {}

    return registry_of(Agent(name="paced", run=paced, budget=budget,
                             script=lambda messages, max_tokens, index: "ok"))


def test_the_ceiling_step_projected_mid_way_is_where_the_run_parks_when_let_run_on(store, invoke):
    registry = _paced(Budget(steps=10, cost_usd=0.0025, on_exhaust="park"))
    stopped = start_and_work(store, registry, "paced", {})        # the step ceiling stops it after 10 steps
    assert (stopped.status, stopped.reason) == ("parked", "budget:steps")
    run_id = stopped.run_id

    report = json.loads(invoke("show", run_id, "--json").stdout)
    fc = report["budget"]["forecast"]
    checkpoint = checkpoint_for(store, run_id)
    assert (fc["steps_done"], fc["position"], fc["total_steps"], fc["remaining_steps"]) == (10, 10, TOTAL, 50)
    cost = fc["dimensions"]["cost_usd"]
    assert cost["per_step"] == pytest.approx(PER_CALL)
    assert cost["per_minute"] == pytest.approx(checkpoint["used_cost_usd"] / (checkpoint["used_wall_s"] / 60))
    assert cost["at_finish"] == pytest.approx(TOTAL * PER_CALL)
    assert fc["remaining_s"] == pytest.approx(checkpoint["used_wall_s"] / 10 * 50)
    assert fc["dimensions"]["steps"]["at_ceiling"] is True
    predicted = cost["ceiling_step"]
    assert predicted == 24                              # ceil(0.0025 / 0.000105): the 24th call would cross it
    assert fc["first_ceiling"] == {"dimension": "cost_usd", "step": predicted}

    shown = invoke("show", run_id).stdout.splitlines()
    budget_line = next(i for i, line in enumerate(shown) if line.startswith("budget "))
    assert shown[budget_line + 1].startswith(
        f"forecast  at this rate: step ceiling reached · cost ceiling at step {predicted} of {TOTAL}"
        " · finish ≈ $0.0063 in ")

    operate.resume(store, run_id, budget={"steps": 1000})    # let it run on to its cost ceiling
    parked = work(store, registry, run_id)
    assert (parked.status, parked.reason) == ("parked", "budget:cost_usd")
    position = checkpoint_for(store, run_id)["current_step"]   # steps 1..position done; the next one refused
    assert abs(predicted - (position + 1)) <= 1, (predicted, position)
    assert len(journal_for(store, run_id)) == position


def test_show_json_has_no_forecast_before_the_first_step_and_an_ended_run_projects_nothing(store, invoke):
    run_id, _ = operate.start(store, _paced(Budget(cost_usd=1.0)), agent_name="paced", request={})
    assert json.loads(invoke("show", run_id, "--json").stdout)["budget"]["forecast"] is None
    assert "forecast " not in invoke("show", run_id).stdout

    done = work(store, _paced(Budget(cost_usd=1.0)), run_id)
    assert done.status == "succeeded"
    fc = run_report(store, run_id)["budget"]["forecast"]
    assert fc["dimensions"]["cost_usd"]["per_step"] == pytest.approx(PER_CALL)
    assert fc["remaining_steps"] is None and fc["first_ceiling"] is None
    assert budget_of(get_run(store, run_id), checkpoint_for(store, run_id))["forecast"] == fc


# -- the runs table's window -----------------------------------------------------------------------------


def _varied(calls: int):
    """Model calls whose replies grow and shrink, so each step costs something different."""
    def varied(ctx, request):
        for i in range(calls):
            ctx.model(f"ask{i}", messages=[{"role": "user", "content": "x" * 40}], max_tokens=50)
            if i % 7 == 3:
                ctx.step(f"plain{i}", lambda: None)          # no cost: counts as 0
        return {}

    return registry_of(Agent(name="varied", run=varied, budget=Budget(steps=60),
                             script=lambda messages, max_tokens, index: "word " * (1 + index % 5)))


def test_the_cost_window_is_the_last_twenty_entries_oldest_first_read_in_bounded_statements(store):
    registry = _varied(80)
    run_id = start_and_work(store, registry, "varied", {}).run_id           # parked at 60 steps
    costs = [entry["cost_usd"] or 0 for entry in journal_for(store, run_id)]
    assert len(costs) == 60 and 0 in costs[-20:] and len(set(costs[-20:])) > 2

    statements = []
    store.conn.set_trace_callback(statements.append)
    try:
        window = cost_window(store, run_id)
    finally:
        store.conn.set_trace_callback(None)
    assert window == costs[-20:]
    # a seek for the run's generation, then the window: the last 20 of each journal table's keys, merged
    assert len(statements) == 2 and "LIMIT" in statements[-1]
    if on_sqlite(store):
        plan = " ".join(row[-1] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {statements[-1]}"))
        assert plan.count("USING PRIMARY KEY") == 2 and "TEMP B-TREE" not in plan, plan

    operate.resume(store, run_id, restart=True)               # a new generation: its own window, empty so far
    assert claim_run(store, run_id, "w-test", 60, get_run(store, run_id)["updated_at"] + 1) is not None
    assert cost_window(store, run_id) == []
