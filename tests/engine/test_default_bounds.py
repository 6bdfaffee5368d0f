"""Every run bounded by default (issue 23): the default ceilings of the dimensions an agent leaves unset,
recorded on the run when it is made; where they show (show, show --json, the gauges); what stops a run at
one; the opt-out (`Budget(unbounded=True)`, `--budget unbounded`); runs made before defaults existed; and
the default plateau."""

import json

import pytest
from fixtures.bounds_agents import LOOPING, LOOPING_UNBOUNDED
from helpers import open_run, registry_of, start_and_work, stdout_ok, tui, work

from tui_agent import Agent, Budget, Plateau, operate
from tui_agent.errors import UserError
from tui_agent.runtime.agent import DEFAULT_CEILINGS
from tui_agent.runtime.clock import parse_instant
from tui_agent.runtime.schedule import tick
from tui_agent.services.forecast import forecast
from tui_agent.store import open_store
from tui_agent.store.journal import checkpoint_for, journal_for
from tui_agent.store.runs import events_for, get_run
from tui_agent.widgets.gauges import CEILING, BudgetGauges
from tui_agent.widgets.theme import palette, style

AGENTS = ("--agents", "bounds_agents")
STEPS_MESSAGE = ("budget steps exhausted: 10000 used of the default 10000, the next call needs 1 (park); "
                 "raise it with tui-agent resume RUN --budget steps=VALUE, or set Budget(steps=...) on the agent")


@pytest.fixture
def store(db_path, monkeypatch):
    """The database at synchronous NORMAL, here and for the CLI, as tests/tui/test_long_runs.py builds its long run:
    these runs take 10,000 steps, each a commit, and what is tested is where they stop, not fsync."""
    monkeypatch.setenv("TUI_AGENT_DURABILITY", "normal")
    opened = open_store(db_path, durability="normal")
    yield opened
    opened.close()


def _budget(store, run_id) -> dict:
    return json.loads(get_run(store, run_id)["budget"])


def _loops():
    return registry_of(LOOPING, LOOPING_UNBOUNDED)


def _budget_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith("budget ")]
    return line


# -- defaults per unset dimension ------------------------------------------------------------------

def test_the_dimensions_an_agent_leaves_unset_get_the_defaults_and_its_own_ceiling_stays(store):
    registry = registry_of(Agent(name="capped", run=LOOPING.run, budget=Budget(cost_usd=1)))
    run_id, _ = operate.start(store, registry, agent_name="capped", request={})
    budget = _budget(store, run_id)
    assert DEFAULT_CEILINGS == {"steps": 10_000, "wall_s": 86_400, "cost_usd": 5.0, "input_tokens": 2_000_000}
    assert (budget["steps"], budget["wall_s"], budget["input_tokens"]) == (10_000, 86_400, 2_000_000)
    assert budget["cost_usd"] == 1, "the agent's own cost ceiling, not the default $5"
    assert budget["defaults"] == ["steps", "wall_s", "input_tokens"]
    assert budget["unbounded"] is False
    assert (budget["model_calls"], budget["output_tokens"], budget["tool_calls"], budget["effects"]) == (None,) * 4

    overridden, _ = operate.start(store, registry, agent_name="capped", request={},
                                  budget={"steps": 50})   # --budget steps=50
    assert _budget(store, overridden)["steps"] == 50
    assert _budget(store, overridden)["defaults"] == ["wall_s", "input_tokens"]


def test_a_scheduled_run_and_a_fork_get_the_same_bounds(store, clock):
    registry = registry_of(Agent(name="job", run=LOOPING.run, budget=Budget(steps=20)))
    clock.set(parse_instant("2026-11-27T12:00:00Z"))
    operate.schedule_add(store, registry, name="nightly", agent="job", cron="0 2 * * *")
    clock.set(parse_instant("2026-11-28T02:01:00Z"))
    (fired,) = tick(store, registry)
    budget = _budget(store, fired)
    assert budget["steps"] == 20 and budget["defaults"] == ["wall_s", "cost_usd", "input_tokens"]
    work(store, registry, fired)
    assert _budget(store, operate.fork(store, fired, 1)) == budget, "a fork keeps its parent's bounds"


def test_show_and_show_json_say_which_ceilings_are_defaults(store, invoke):
    registry = registry_of(Agent(name="capped", run=LOOPING.run, budget=Budget(cost_usd=1)))
    run_id = start_and_work(store, registry, "capped", {"n": 3}).run_id
    budget = json.loads(stdout_ok(invoke("show", run_id, "--json")))["budget"]
    dims = budget["dimensions"]
    assert (dims["steps"]["limit"], dims["steps"]["default"]) == (10_000, True)
    assert (dims["wall_s"]["limit"], dims["wall_s"]["default"]) == (86_400, True)
    assert (dims["input_tokens"]["limit"], dims["input_tokens"]["default"]) == (2_000_000, True)
    assert (dims["cost_usd"]["limit"], dims["cost_usd"]["default"]) == (1, False)
    assert (dims["model_calls"]["limit"], dims["model_calls"]["default"]) == (None, False)
    assert budget["bounds"] == "defaults" and budget["unbounded"] is False
    assert budget["defaults"] == ["steps", "wall_s", "input_tokens"]

    shown = stdout_ok(invoke("show", run_id))
    line = _budget_line(shown)
    assert "steps 3/10000 (default)" in line
    assert "input_tokens 0/2000000 (default)" in line
    assert "wall_s " in line and line.endswith("/86400 (default)")
    assert "cost $0.0000/$1.00  " in line, "the agent's own ceiling: not marked default"
    assert "bounds " not in shown, "a run bounded by defaults needs no more words than its ceilings"


def test_a_default_ceiling_the_step_ceiling_comes_before_is_not_projected():
    def budget(wall_used):
        return {"dimensions": {"steps": {"used": 10, "limit": 10_000, "default": True},
                               "wall_s": {"used": wall_used, "limit": 86_400, "default": True},
                               "cost_usd": {"used": 0.0005, "limit": 1.0, "default": False}}}

    fc = forecast(budget(1.0), steps_done=10, position=10, total_steps=None, running_s=1.0)
    assert fc["dimensions"]["steps"]["ceiling_step"] == 10_000
    assert fc["dimensions"]["wall_s"]["ceiling_step"] is None, "at step 864,010: the default steps stop it first"
    assert fc["dimensions"]["cost_usd"]["ceiling_step"] == 20_000, "the agent's own ceiling is projected as before"
    near = forecast(budget(50_000.0), steps_done=10, position=10, total_steps=None, running_s=50_000.0)
    assert near["dimensions"]["wall_s"]["ceiling_step"] == 18
    assert near["first_ceiling"] == {"dimension": "wall_s", "step": 18}


# -- stopping at a default ceiling --------------------------------------------------------------------

def test_ten_thousand_steps_are_allowed_and_the_next_parks_at_the_default_ceiling(store, invoke):
    registry = _loops()
    assert start_and_work(store, registry, "looping", {"n": 10_000}).status == "succeeded"

    outcome = start_and_work(store, registry, "looping", {"n": 10_001})
    assert (outcome.status, outcome.reason) == ("parked", "budget:steps")
    assert outcome.message == STEPS_MESSAGE
    assert len(journal_for(store, outcome.run_id)) == 10_000
    soft = [e["message"] for e in events_for(store, outcome.run_id) if e["kind"] == "budget"]
    assert soft == ["budget steps passed its soft threshold: 7000 of the default 10000 (70%, soft 70%)"]
    shown = stdout_ok(invoke("show", outcome.run_id))
    assert (f"stopped   the next call needs 1 steps and 10000 of the default 10000 are used: raise it with "
            f"tui-agent resume {outcome.run_id} --budget steps=VALUE") in shown

    stdout_ok(invoke("resume", outcome.run_id, "--budget", "steps=10001"))
    assert work(store, registry, outcome.run_id).status == "succeeded"
    after = _budget(store, outcome.run_id)
    assert after["steps"] == 10_001 and "steps" not in after["defaults"], "a person's ceiling is not a default"
    assert after["defaults"] == ["wall_s", "cost_usd", "input_tokens"]


def test_the_default_running_time_ceiling_stops_a_run_past_24_hours(store, clock):
    def long_step(ctx, request):
        ctx.step("a day and a second", clock.advance, 86_401)
        ctx.step("after", abs, 1)
        return {}

    outcome = start_and_work(store, registry_of(Agent(name="slow", run=long_step)), "slow", {})
    assert (outcome.status, outcome.reason) == ("parked", "budget:wall_s")
    assert outcome.message.startswith("budget wall_s exhausted: 86401 used of the default 86400, the next call needs")
    assert outcome.message.endswith("or set Budget(wall_s=...) on the agent")


def _asking(*calls, budget=None):
    """An agent making each of `calls` (model, prompt length in characters, max_tokens) as a model call."""
    def asks(ctx, request):
        for i, (model, length, max_tokens) in enumerate(calls):
            ctx.model(f"ask{i}", messages=[{"role": "user", "content": "x" * length}], max_tokens=max_tokens,
                      model=model)
        return {}

    return registry_of(Agent(name="asks", run=asks, budget=budget or Budget(),
                             script=lambda messages, max_tokens, index: "short"))


def test_the_default_cost_ceiling_lets_an_unpriced_model_run_and_the_default_input_tokens_stop_it(store):
    # a model the price table does not know: its cost cannot be counted, so the default cost ceiling does not
    # refuse it; 8.4 million characters are about 2.1 million input tokens, past the default 2 million
    registry = _asking(("no-such-model", 400, 100), ("no-such-model", 400, 100), ("no-such-model", 8_400_000, 100))
    run_id, _ = operate.start(store, registry, agent_name="asks", request={}, model="scripted")
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("parked", "budget:input_tokens")
    assert outcome.message.startswith("budget input_tokens exhausted: ")
    assert "used of the default 2000000, the next call needs 21" in outcome.message
    assert outcome.message.endswith("or set Budget(input_tokens=...) on the agent")
    checkpoint = checkpoint_for(store, run_id)
    assert checkpoint["used_model_calls"] == 2 and checkpoint["unpriced_calls"] == 2


def test_an_explicit_cost_ceiling_still_refuses_an_unpriced_model(store):
    registry = _asking(("no-such-model", 400, 100), budget=Budget(cost_usd=5))
    run_id, _ = operate.start(store, registry, agent_name="asks", request={}, model="scripted")
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("parked", "budget:cost_usd")
    assert "model 'no-such-model' has no price, so a cost ceiling cannot be kept" in outcome.message
    assert "on the agent" not in outcome.message, "the agent set this ceiling: no default to name"


def test_the_default_cost_ceiling_counts_priced_calls(store):
    # claude-haiku-4-5 at $5 per million output tokens: a call that may write 1,000,001 tokens may cost over $5
    registry = _asking(("claude-haiku-4-5", 400, 1_000_001))
    run_id, _ = operate.start(store, registry, agent_name="asks", request={}, model="scripted")
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("parked", "budget:cost_usd")
    assert outcome.message.startswith("budget cost_usd exhausted: $0.0000 used of the default $5.0000, the next "
                                      "call needs $5.0")
    assert outcome.message.endswith("or set Budget(cost_usd=...) on the agent")


# -- opting out ---------------------------------------------------------------------------------------

def test_an_unbounded_agent_has_no_default_ceilings(store):
    outcome = start_and_work(store, _loops(), "looping-unbounded", {"n": 10_001})
    assert outcome.status == "succeeded", outcome.message
    budget = _budget(store, outcome.run_id)
    assert budget["unbounded"] is True and budget["defaults"] == []
    assert all(budget[d] is None for d in DEFAULT_CEILINGS)


def test_budget_unbounded_on_the_command_line(store, invoke):
    done = invoke(*AGENTS, "run", "looping", "--input", '{"n": 10001}', "--budget", "unbounded")
    run_id = stdout_ok(done).split()[0]
    assert get_run(store, run_id)["status"] == "succeeded"
    budget = json.loads(stdout_ok(invoke("show", run_id, "--json")))["budget"]
    assert budget["unbounded"] is True and budget["bounds"] == "unbounded" and budget["defaults"] == []
    assert budget["dimensions"]["steps"]["limit"] is None
    assert "bounds    unbounded: this run opted out of the default ceilings" in stdout_ok(invoke("show", run_id))

    hello = stdout_ok(invoke("start", "hello", "--budget", "unbounded")).strip()   # its own steps=10 still holds
    limits = _budget(store, hello)
    assert limits["steps"] == 10 and limits["unbounded"] is True and limits["cost_usd"] is None


def test_resume_budget_unbounded_removes_the_defaults_and_keeps_explicit_ceilings(store, invoke):
    registry = registry_of(Agent(name="capped", run=LOOPING.run, budget=Budget(cost_usd=1)))
    run_id = start_and_work(store, registry, "capped", {"n": 10_001}).run_id
    assert get_run(store, run_id)["reason"] == "budget:steps"
    stdout_ok(invoke("resume", run_id, "--budget", "unbounded"))
    assert work(store, registry, run_id).status == "succeeded"
    budget = _budget(store, run_id)
    assert budget["unbounded"] is True and budget["defaults"] == []
    assert (budget["steps"], budget["wall_s"], budget["input_tokens"], budget["cost_usd"]) == (None, None, None, 1)
    assert any(e["message"].endswith("unbounded (no default ceilings)") for e in events_for(store, run_id))


def test_unbounded_takes_no_value(invoke):
    with pytest.raises(UserError, match="name one of steps"):
        operate.parse_budget(["unbounded=1"])
    assert operate.parse_budget(["unbounded", "steps=5"]) == {"unbounded": True, "steps": 5}


# -- runs made before default ceilings ------------------------------------------------------------------

OLD_BUDGET = {"steps": None, "model_calls": None, "input_tokens": None, "output_tokens": None, "cost_usd": None,
              "tool_calls": None, "effects": None, "wall_s": None, "soft": 0.7, "on_exhaust": "park"}


def _old_run(store, registry, request) -> str:
    run_id, _ = operate.start(store, registry, agent_name="looping", request=request)
    with store.write() as conn:   # the budget JSON a run made before this change holds: no defaults, no opt-out
        conn.execute("UPDATE runs SET budget = ? WHERE id = ?", (json.dumps(OLD_BUDGET), run_id))
    return run_id


def test_an_old_runs_budget_stays_unbounded_and_show_says_so(store, invoke):
    registry = _loops()
    run_id = _old_run(store, registry, {"n": 10_001})
    assert work(store, registry, run_id).status == "succeeded", "no default was applied to it"
    budget = json.loads(stdout_ok(invoke("show", run_id, "--json")))["budget"]
    assert budget["bounds"] == "legacy" and budget["defaults"] == [] and budget["unbounded"] is False
    assert budget["dimensions"]["steps"]["limit"] is None
    assert "bounds    made before default ceilings: no default applies" in stdout_ok(invoke("show", run_id))


def test_raising_one_ceiling_of_an_old_run_adds_no_defaults(store):
    registry = _loops()
    run_id = _old_run(store, registry, {"n": 3})
    with store.write() as conn:
        conn.execute("UPDATE runs SET status = 'parked', reason = 'person' WHERE id = ?", (run_id,))
    operate.resume(store, run_id, budget={"steps": 100})
    budget = _budget(store, run_id)
    assert "defaults" not in budget and budget["steps"] == 100 and budget["wall_s"] is None


# -- the default plateau ----------------------------------------------------------------------------------

def _reporting(values, plateau=None, failures=()):
    def loop(ctx, request):
        for value in values:
            ctx.progress(value)
        for failure in failures:
            ctx.failure(failure)
        return {"done": True}

    return registry_of(Agent(name="loop", run=loop, plateau=plateau))


def test_the_same_progress_five_times_is_a_default_plateau(store):
    assert start_and_work(store, _reporting([1, 1, 1, 1, 2]), "loop", {}).status == "succeeded", "four is not"
    outcome = start_and_work(store, _reporting([1, 1, 1, 1, 1, 2]), "loop", {})
    assert (outcome.status, outcome.reason) == ("waiting", "plateau")
    assert outcome.message == "plateau: progress stayed at 1 for 5 reports (escalate)"
    assert len(journal_for(store, outcome.run_id)) == 5


def test_the_same_failure_three_times_is_a_default_plateau(store):
    assert start_and_work(store, _reporting([], failures=["timeout after 3s", "timeout after 4s"]),
                          "loop", {}).status == "succeeded"
    outcome = start_and_work(store, _reporting([], failures=["timeout after 3s", "timeout after 4s",
                                                             "timeout after 5s", "again"]), "loop", {})
    assert (outcome.status, outcome.reason) == ("waiting", "plateau")
    assert outcome.message == "plateau: the same failure 3 times in a row: timeout after s (escalate)"


def test_an_agents_own_plateau_is_kept(store):
    patient = _reporting([1] * 8, Plateau(repeats=10, failures=None))
    assert start_and_work(store, patient, "loop", {}).status == "succeeded"
    strict = start_and_work(store, _reporting([1, 1, 1], Plateau(repeats=2, action="park")), "loop", {})
    assert (strict.status, strict.reason) == ("parked", "plateau")
    assert strict.message == "plateau: progress stayed at 1 for 2 reports (park)"


# -- the gauges (Pilot) ---------------------------------------------------------------------------------------

async def test_the_gauges_mark_default_ceilings(store):
    registry = registry_of(Agent(name="capped", run=LOOPING.run, budget=Budget(cost_usd=1)))
    run_id = start_and_work(store, registry, "capped", {"n": 3}).run_id
    async with tui(store.path) as (app, pilot):
        gauges = (await open_run(app, pilot, run_id)).query_one(BudgetGauges)
        lines = {line.plain.split()[0]: line for line in gauges.lines(80)}
        assert lines["steps"].plain.rstrip().endswith("3/10k  <1% default")
        assert lines["wall"].plain.rstrip().endswith("default")
        assert lines["tok"].plain.rstrip().endswith("default")          # tok in
        assert not lines["cost"].plain.rstrip().endswith("default"), "the agent's own ceiling"
        assert "unbounded" not in gauges.plain


async def test_the_gauges_show_an_unbounded_run_in_the_error_colour(store):
    run_id = start_and_work(store, _loops(), "looping-unbounded", {"n": 3}).run_id
    async with tui(store.path) as (app, pilot):
        gauges = (await open_run(app, pilot, run_id)).query_one(BudgetGauges)
        first, *rest = gauges.lines(80)
        error = style(palette(app), CEILING, bold=True)
        assert palette(app)[CEILING] in error
        assert first.plain == "unbounded: opted out of the default ceilings"
        assert first.style == error
        (steps,) = [line for line in rest if line.plain.startswith("steps")]
        assert [span.style for span in steps.spans if steps.plain[span.start:span.end].strip() == "unbounded"] == [
            error], "a dimension without a ceiling says unbounded, in the error colour"
        assert not any(line.plain.rstrip().endswith("default") for line in rest), "no ceiling is a default"


async def test_the_gauges_say_an_old_run_has_no_default_ceilings(store):
    registry = _loops()
    run_id = _old_run(store, registry, {"n": 3})
    work(store, registry, run_id)
    async with tui(store.path) as (app, pilot):
        gauges = (await open_run(app, pilot, run_id)).query_one(BudgetGauges)
        assert "no default ceilings (an older run)" in gauges.plain
        assert "default" not in gauges.plain.replace("no default ceilings", "")
