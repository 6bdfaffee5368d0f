import json

import pytest
from helpers import registry_of, start_and_work, work

from tui_agent import Agent
from tui_agent.runtime import results
from tui_agent.store import artifacts
from tui_agent.store.journal import journal_for
from tui_agent.store.runs import events_for, get_run


class Calls:
    """Counts how often each step's function really ran."""

    def __init__(self):
        self.counts = {}

    def fn(self, name, value):
        def run():
            self.counts[name] = self.counts.get(name, 0) + 1
            return value
        return run


def _requeue(store, run_id):
    with store.write() as conn:
        conn.execute("UPDATE runs SET status='queued', reason='resumed' WHERE id=?", (run_id,))


def test_replay_returns_recorded_results_without_calling_again(store):
    calls = Calls()
    seen = []

    def agent_run(ctx, request):
        a = ctx.step("a", calls.fn("a", {"n": 1}))
        b = ctx.step("b", calls.fn("b", [1, 2, (3, 4)]))
        seen.append((a, b, ctx.replaying))
        return {"a": a, "b": b}

    registry = registry_of(Agent(name="rp", run=agent_run))
    first = start_and_work(store, registry, "rp", {})
    assert first.status == "succeeded"
    assert calls.counts == {"a": 1, "b": 1}
    _requeue(store, first.run_id)
    second = work(store, registry, first.run_id, worker="w-other")
    assert second.status == "succeeded"
    assert calls.counts == {"a": 1, "b": 1}, "a recorded step ran again"
    # the first run already saw what a replay sees: the JSON round trip (a tuple becomes a list)
    assert seen[0][:2] == seen[1][:2] == ({"n": 1}, [1, 2, [3, 4]])
    assert get_run(store, first.run_id)["attempt"] == 2


def test_steps_commit_journal_checkpoint_together(store):
    def agent_run(ctx, request):
        ctx.plan(total_steps=3, revision=2, next_input={"page": 2})
        for i in range(3):
            ctx.step(f"s{i}", lambda i=i: i * 10)
        return {}

    registry = registry_of(Agent(name="ck", run=agent_run))
    outcome = start_and_work(store, registry, "ck", {})
    rows = journal_for(store, outcome.run_id)
    assert [(r["position"], r["name"], json.loads(r["result"])) for r in rows] == [(0, "s0", 0), (1, "s1", 10),
                                                                                    (2, "s2", 20)]
    cp = store.conn.execute("SELECT current_step, total_steps, plan_revision, next_input, used_steps"
                            " FROM checkpoints_now WHERE run_id=?", (outcome.run_id,)).fetchone()
    assert cp == (3, 3, 2, '{"page":2}', 3)


def test_a_different_name_at_a_recorded_position_parks_the_run(store):
    version = {"name": "fetch"}

    def agent_run(ctx, request):
        ctx.step(version["name"], lambda: 1)
        return {}

    registry = registry_of(Agent(name="cc", run=agent_run))
    first = start_and_work(store, registry, "cc", {})
    before = journal_for(store, first.run_id)
    _requeue(store, first.run_id)
    version["name"] = "download"
    second = work(store, registry, first.run_id)
    assert (second.status, second.reason) == ("parked", "code_changed")
    assert "position 0" in second.error
    assert "'fetch'" in second.error
    assert "'download'" in second.error
    assert journal_for(store, first.run_id) == before, "nothing recorded may change"
    assert events_for(store, first.run_id)[-1]["kind"] == "parked"


def test_large_results_live_in_the_artifact_folder(store):
    big = "x" * (results.ARTIFACT_THRESHOLD + 10)
    calls = Calls()

    def agent_run(ctx, request):
        return {"size": len(ctx.step("big", calls.fn("big", big)))}

    registry = registry_of(Agent(name="big", run=agent_run))
    outcome = start_and_work(store, registry, "big", {})
    assert outcome.result == {"size": len(big)}
    row = journal_for(store, outcome.run_id)[0]
    assert row["result"] is None
    assert row["artifact"].startswith(f"artifacts/{outcome.run_id}/")
    assert json.loads(artifacts.load(store, row["artifact"])) == big
    _requeue(store, outcome.run_id)
    assert work(store, registry, outcome.run_id).result == {"size": len(big)}
    assert calls.counts == {"big": 1}


def _holds_itself() -> dict:
    value = {"name": "loop"}
    value["again"] = [value]
    return value


@pytest.mark.parametrize("result, why", [
    (lambda: {1, 2}, "not JSON-serialisable (Object of type set"),
    (lambda: {"ratio": float("nan")}, "not JSON-serialisable (Out of range float"),
    (_holds_itself, "holds itself or is nested too deeply"),
])
def test_a_result_that_is_not_json_fails_the_run_with_a_clear_error(store, result, why):
    def agent_run(ctx, request):
        ctx.step("bad", result)
        return {}

    outcome = start_and_work(store, registry_of(Agent(name="nj", run=agent_run)), "nj", {})
    assert (outcome.status, outcome.reason) == ("failed", "error")
    assert "step 'bad'" in outcome.error and why in outcome.error, outcome.error
    assert journal_for(store, outcome.run_id) == []


def test_a_step_that_raises_fails_the_run_and_names_the_step(store):
    def agent_run(ctx, request):
        ctx.step("ok", lambda: 1)
        ctx.step("fetch", lambda: 1 / 0)
        return {}

    outcome = start_and_work(store, registry_of(Agent(name="ex", run=agent_run)), "ex", {})
    assert (outcome.status, outcome.reason) == ("failed", "error")
    assert outcome.error == "step 1 'fetch' raised ZeroDivisionError: division by zero"
    assert get_run(store, outcome.run_id)["error"] == outcome.error


@pytest.mark.parametrize("check, status, reason", [
    (lambda ctx, r: r["ok"], "succeeded", "check_passed"),
    (lambda ctx, r: not r["ok"], "failed", "check_failed"),
    (None, "succeeded", "returned"),
])
def test_the_check_decides_the_ending(store, check, status, reason):
    agent = Agent(name="ch", run=lambda ctx, req: {"ok": True}, check=check)
    outcome = start_and_work(store, registry_of(agent), "ch", {})
    assert (outcome.status, outcome.reason) == (status, reason)
    run = get_run(store, outcome.run_id)
    assert (run["status"], run["reason"]) == (status, reason)
    assert run["finished_at"] is not None
    assert run["worker"] is None
