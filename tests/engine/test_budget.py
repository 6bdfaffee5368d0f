"""Budgets (ceilings, reservations, soft threshold, actions) and plateaus: the harness decides every ending."""

import json

import pytest
from helpers import registry_of, start_and_work, work

from tui_agent import Agent, Budget, Plateau, operate
from tui_agent.errors import UserError
from tui_agent.models import ScriptedProvider
from tui_agent.store.journal import checkpoint_for, journal_for
from tui_agent.store.runs import events_for, get_run

STATUS = {"stop": "failed", "park": "parked", "escalate": "waiting"}


def _steps_agent(n, budget, degrade=None, advance=None):
    def many(ctx, request):
        for i in range(n):
            ctx.step(f"s{i}", (lambda i=i: advance(i)) if advance else (lambda i=i: i))
        return {"n": n}

    return registry_of(Agent(name="many", run=many, budget=budget, degrade=degrade))


@pytest.mark.parametrize("action", ["stop", "park", "escalate"])
def test_an_exhausted_step_budget_applies_its_action(store, action):
    registry = _steps_agent(5, Budget(steps=3, on_exhaust=action))
    outcome = start_and_work(store, registry, "many", {})
    assert (outcome.status, outcome.reason) == (STATUS[action], "budget:steps")
    assert "budget steps exhausted: 3 used of 3" in outcome.message
    assert [e["name"] for e in journal_for(store, outcome.run_id)] == ["s0", "s1", "s2"]


def test_a_per_dimension_action(store):
    registry = _steps_agent(5, Budget(steps=2, on_exhaust={"steps": "stop", "cost_usd": "escalate"}))
    assert start_and_work(store, registry, "many", {}).status == "failed"


def test_raising_a_ceiling_on_resume_finishes_the_run(store):
    registry = _steps_agent(5, Budget(steps=3, on_exhaust="park"))
    run_id = start_and_work(store, registry, "many", {}).run_id
    operate.resume(store, run_id, budget={"steps": 10})
    outcome = work(store, registry, run_id)
    assert outcome.status == "succeeded"
    assert any("budget changed by" in e["message"] and "steps 3 -> 10" in e["message"]
               for e in events_for(store, run_id))


def test_a_ceiling_at_or_below_what_is_used_is_refused_and_nothing_changes(store, invoke):
    registry = _steps_agent(5, Budget(steps=3, on_exhaust="park"))
    run_id = start_and_work(store, registry, "many", {}).run_id
    before = get_run(store, run_id)
    for ceiling in (2, 3):
        with pytest.raises(UserError, match="steps: already used 3 steps; enter more than that; nothing changed"):
            operate.resume(store, run_id, budget={"steps": ceiling})
    done = invoke("resume", run_id, "--budget", "steps=3")      # the CLI says the same, in one line
    assert done.exit_code == 2
    assert "already used 3 steps" in done.stderr
    assert get_run(store, run_id) == before
    operate.resume(store, run_id, budget={"steps": 4})
    assert (get_run(store, run_id)["status"], json.loads(get_run(store, run_id)["budget"])["steps"]) == ("queued", 4)


def test_an_escalated_budget_waits_for_a_person_who_raises_it(store):
    registry = _steps_agent(4, Budget(steps=2, on_exhaust="escalate"))
    run_id = start_and_work(store, registry, "many", {}).run_id
    assert get_run(store, run_id)["reason"] == "budget:steps"
    operate.resume(store, run_id, budget={"steps": 4})
    assert work(store, registry, run_id).status == "succeeded"


def test_a_per_run_budget_overrides_the_agents(store):
    registry = _steps_agent(5, Budget(steps=100))
    run_id, _ = operate.start(store, registry, agent_name="many", request={}, budget={"steps": 2})
    assert work(store, registry, run_id).reason == "budget:steps"


def _model_agent(calls, budget):
    provider_calls = []

    def asks(ctx, request):
        for i in range(calls):
            ctx.model(f"ask{i}", messages=[{"role": "user", "content": "x" * 400}], max_tokens=1000)
        return {}

    class Counting(ScriptedProvider):
        def create(self, **kwargs):
            provider_calls.append(kwargs["call_index"])
            return super().create(**kwargs)

    registry = registry_of(Agent(name="asks", run=asks, budget=budget,
                                 script=lambda messages, max_tokens, index: "short"))
    return registry, provider_calls, Counting


@pytest.mark.parametrize("action", ["stop", "park", "escalate"])
def test_a_model_call_whose_worst_case_would_cross_the_cost_ceiling_is_refused_before_it_is_made(store, monkeypatch,
                                                                                                  action):
    # claude-haiku-4-5: $1 / M input, $5 / M output. Worst case of one call: 100 input tokens (400 characters)
    # + 1000 output tokens = $0.0051; its real cost is $0.00011 (a one-word reply). A ceiling of $0.0052 admits
    # the first call but not a second, whose reservation would cross it although its real cost would fit.
    registry, provider_calls, counting = _model_agent(3, Budget(cost_usd=0.0052, on_exhaust=action))
    monkeypatch.setattr("tui_agent.runtime.worker.provider_for", lambda spec, script, replies=None: counting(script))
    outcome = start_and_work(store, registry, "asks", {})
    assert (outcome.status, outcome.reason) == (STATUS[action], "budget:cost_usd")
    assert provider_calls == [0], "the second call was refused before the provider was asked"
    used = checkpoint_for(store, outcome.run_id)["used_cost_usd"]
    assert used == pytest.approx(0.00011)
    assert "the next call needs $0.0051" in outcome.message


def test_output_tokens_are_reserved_at_max_tokens(store):
    registry, _, _ = _model_agent(2, Budget(output_tokens=1001, on_exhaust="stop"))  # 2 used + 1000 reserved
    outcome = start_and_work(store, registry, "asks", {})
    assert (outcome.status, outcome.reason) == ("failed", "budget:output_tokens")
    assert checkpoint_for(store, outcome.run_id)["used_model_calls"] == 1


@pytest.mark.parametrize("action", ["stop", "park", "escalate"])
def test_wall_time_counts_running_not_waiting(store, clock, action):
    def slow_then_sleep(ctx, request):
        ctx.step("a", clock.advance, 10)
        ctx.sleep("night", 8 * 3600)           # waiting: not counted
        for i in range(3):
            ctx.step(f"b{i}", clock.advance, 10)
        return {}

    registry = registry_of(Agent(name="slow", run=slow_then_sleep, budget=Budget(wall_s=25, on_exhaust=action)))
    run_id = start_and_work(store, registry, "slow", {}).run_id
    clock.advance(8 * 3600 + 1)
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == (STATUS[action], "budget:wall_s")
    assert [e["name"] for e in journal_for(store, run_id)] == ["a", "night", "b0", "b1"]
    assert 29 < checkpoint_for(store, run_id)["used_wall_s"] < 40


def test_a_soft_threshold_on_effects_is_crossed_by_the_effect_not_missed_among_plain_steps(store):
    """A plain step checks only the dimensions it moves (steps, running time); an effect checks the rest."""
    def run(ctx, request):
        ctx.step("a", lambda: 1)
        ctx.effect("send", key="k:1", do=lambda key: {"sent": key})
        after = ctx.budget.soft_exceeded
        ctx.step("b", lambda: 2)
        return {"soft_after_the_effect": after}

    registry = registry_of(Agent(name="sender", run=run, budget=Budget(effects=2, steps=100, soft=0.5)))
    outcome = start_and_work(store, registry, "sender", {})
    assert outcome.result == {"soft_after_the_effect": True}
    crossings = [e["message"] for e in events_for(store, outcome.run_id) if e["kind"] == "budget"]
    assert crossings == ["budget effects passed its soft threshold: 1 of 2 (50%, soft 50%)"]


def test_the_soft_threshold_is_one_event_and_one_degrade_call_replayed_at_the_same_point(store):
    degraded_at = []

    def degrade(ctx):
        degraded_at.append(ctx.position)

    seen_soft, remaining = [], []

    def gated(ctx, request):
        for i in range(6):
            ctx.step(f"s{i}", lambda i=i: i)
            seen_soft.append(ctx.budget.soft_exceeded)
            remaining.append(ctx.budget.remaining("steps"))
        return ctx.approval("end", "done?")

    registry = registry_of(Agent(name="soft", run=gated, degrade=degrade, budget=Budget(steps=10, soft=0.5)))
    run_id = start_and_work(store, registry, "soft", {}).run_id
    assert degraded_at == [5], "called once, right after the fifth step crossed 50% of 10"
    assert seen_soft == [False] * 4 + [True] * 2
    assert remaining == [9, 8, 7, 6, 5, 4], "ctx.budget.remaining counts down with each step"
    crossings = [e["message"] for e in events_for(store, run_id) if e["kind"] == "budget"]
    assert crossings == ["budget steps passed its soft threshold: 5 of 10 (50%, soft 50%)"]

    operate.approve(store, run_id)
    degraded_at.clear()
    seen_soft.clear()
    remaining.clear()
    assert work(store, registry, run_id).status == "succeeded"
    assert degraded_at == [5], "the replay degraded at the same point, once"
    assert seen_soft == [False] * 4 + [True] * 2
    assert len([e for e in events_for(store, run_id) if e["kind"] == "budget"]) == 1
    report_budget = __import__("tui_agent.report", fromlist=["run_report"]).run_report(store, run_id)["budget"]
    assert report_budget["dimensions"]["steps"]["soft_crossed"] is True
    assert report_budget["dimensions"]["steps"]["percent"] == 70.0  # six steps and the approval


def _plateau_agent(values, plateau):
    def loop(ctx, request):
        for value in values:
            ctx.progress(value)
        return {"done": True}

    return registry_of(Agent(name="loop", run=loop, plateau=plateau))


@pytest.mark.parametrize("action", ["escalate", "park", "stop"])
def test_a_repeated_progress_value_is_a_plateau(store, action):
    registry = _plateau_agent([1, 2, 2, 3, 3, 3, 4], Plateau(repeats=3, action=action))
    outcome = start_and_work(store, registry, "loop", {})
    assert (outcome.status, outcome.reason) == (STATUS[action], "plateau")
    assert "progress stayed at 3 for 3 reports" in outcome.message
    assert len(journal_for(store, outcome.run_id)) == 6


def test_after_a_plateau_a_resumed_run_gets_a_fresh_streak(store):
    registry = _plateau_agent([5, 5, 5, 5, 5, 6], Plateau(repeats=3, action="park"))
    run_id = start_and_work(store, registry, "loop", {}).run_id
    operate.resume(store, run_id)
    second = work(store, registry, run_id)
    assert second.status == "succeeded", "the replay rebuilt the streak and only two more fives came"


@pytest.mark.parametrize("action", ["escalate", "park", "stop"])
def test_the_same_failure_again_and_again_is_a_plateau(store, action):
    def flailing(ctx, request):
        for attempt in range(10):
            try:
                raise TimeoutError(f"tool timed out after {30 + attempt}s")
            except TimeoutError as e:
                ctx.failure(e)
        return {}

    registry = registry_of(Agent(name="flail", run=flailing, plateau=Plateau(failures=4, action=action)))
    outcome = start_and_work(store, registry, "flail", {})
    assert (outcome.status, outcome.reason) == (STATUS[action], "plateau")
    assert "the same failure 4 times in a row: TimeoutError: tool timed out after s" in outcome.message


def test_different_failures_are_not_a_plateau(store):
    def varied(ctx, request):
        for i in range(6):
            ctx.failure(ValueError(f"bad {'xyz'[i % 3]}"))
        ctx.failure("custom", fingerprint="same")
        return {}

    registry = registry_of(Agent(name="varied", run=varied, plateau=Plateau(failures=2)))
    assert start_and_work(store, registry, "varied", {}).status == "succeeded"


def test_a_failed_check_explains_itself(store):
    agent = Agent(name="ck", run=lambda ctx, r: {"tests": 3},
                  check=lambda ctx, result: (result["tests"] == 5, f"{result['tests']} of 5 tests pass"))
    outcome = start_and_work(store, registry_of(agent), "ck", {})
    assert (outcome.status, outcome.reason) == ("failed", "check_failed")
    assert get_run(store, outcome.run_id)["error"] == "the check did not pass: 3 of 5 tests pass"
