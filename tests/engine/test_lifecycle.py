"""Operator lifecycle actions in-process: approvals, park, cancel, resume, restart, fork."""

import pytest
from helpers import registry_of, start_and_work, work

from tui_agent import Agent, operate
from tui_agent.errors import UserError
from tui_agent.runtime.clock import now
from tui_agent.store.effects import effects_for
from tui_agent.store.journal import journal_for
from tui_agent.store.runs import events_for, get_run


class Counter:
    def __init__(self):
        self.calls = {}

    def __call__(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1
        return name


def test_an_approval_waits_then_returns_the_decision_to_the_agent(store):
    seen = []

    def asks(ctx, request):
        ctx.step("draft", lambda: "draft")
        answer = ctx.approval("ship", "Ship it?")
        seen.append(answer)
        return {"shipped": answer["approved"]}

    registry = registry_of(Agent(name="asks", run=asks))
    first = start_and_work(store, registry, "asks", {})
    assert (first.status, first.reason) == ("waiting", "approval")
    assert "Ship it?" in first.message
    assert seen == []
    operate.approve(store, first.run_id, note="go")
    assert get_run(store, first.run_id)["status"] == "queued"
    second = work(store, registry, first.run_id)
    assert second.status == "succeeded"
    assert second.result == {"shipped": True}
    assert seen[0]["approved"] is True
    assert seen[0]["note"] == "go"
    assert seen[0]["by"]
    assert seen[0]["at"]
    assert any(e["kind"] == "decision" and "ship: approved by" in e["message"] and "(go)" in e["message"]
               for e in events_for(store, first.run_id))
    with pytest.raises(UserError, match="not waiting for an approval"):
        operate.approve(store, first.run_id)


def test_a_denial_reaches_the_agent_that_asks_for_it(store):
    def asks(ctx, request):
        return {"shipped": ctx.approval("ship", "Ship it?", on_deny="return")["approved"]}

    registry = registry_of(Agent(name="asks", run=asks))
    first = start_and_work(store, registry, "asks", {})
    operate.approve(store, first.run_id, deny=True, note="not yet")
    assert work(store, registry, first.run_id).result == {"shipped": False}
    entry = journal_for(store, first.run_id)[-1]
    assert entry["kind"] == "approval"
    assert '"approved":false' in entry["result"]
    assert "not yet" in entry["result"]


def test_a_denial_cancels_the_run_by_default_with_the_persons_note(store):
    after = []

    def asks(ctx, request):
        ctx.approval("ship", "Ship it?")
        after.append("went on")
        return {"shipped": True}

    registry = registry_of(Agent(name="asks", run=asks))
    first = start_and_work(store, registry, "asks", {})
    operate.approve(store, first.run_id, deny=True, note="not yet")
    second = work(store, registry, first.run_id)
    assert (second.status, second.reason) == ("cancelled", "denied")
    assert after == []
    run = get_run(store, first.run_id)
    assert (run["status"], run["reason"]) == ("cancelled", "denied")
    assert run["finished_at"] is not None  # ended, like any cancelled run
    assert run["result"] is None
    last = events_for(store, first.run_id)[-1]
    assert last["kind"] == "cancelled"
    assert "ship denied by" in last["message"]
    assert last["message"].endswith("not yet")
    entry = journal_for(store, first.run_id)[-1]
    assert entry["kind"] == "approval"  # the decision stays on record
    assert '"approved":false' in entry["result"]
    with pytest.raises(UserError, match="cancelled"):
        operate.resume(store, first.run_id)                                # ended: only --restart runs it again


def test_a_sleep_is_journaled_and_a_later_worker_wakes_it(store, clock):
    counter = Counter()

    def naps(ctx, request):
        ctx.step("a", counter, "a")
        ctx.sleep("nap", 3600)
        ctx.step("b", counter, "b")
        return {}

    registry = registry_of(Agent(name="naps", run=naps))
    first = start_and_work(store, registry, "naps", {})
    run = get_run(store, first.run_id)
    assert (run["status"], run["reason"]) == ("waiting", "sleep")
    assert 3590 < run["wake_at"] - now() <= 3600
    from tui_agent.store.runs import claim_next
    assert claim_next(store, "w-2", lease_s=30, agents=["naps"], now=now()) is None, "not due yet"
    clock.advance(3601)
    assert work(store, registry, first.run_id).status == "succeeded"
    assert counter.calls == {"a": 1, "b": 1}
    assert any(e["kind"] == "woke" for e in events_for(store, first.run_id))


def test_park_resume_and_cancel(store):
    registry = registry_of(Agent(name="asks", run=lambda ctx, r: ctx.approval("q", "ok?")))
    run_id = start_and_work(store, registry, "asks", {}).run_id
    fence = get_run(store, run_id)["fence"]
    operate.park(store, run_id, note="later")
    run = get_run(store, run_id)
    assert (run["status"], run["reason"], run["fence"]) == ("parked", "person", fence + 1)
    with pytest.raises(UserError, match="parked already"):
        operate.park(store, run_id)
    operate.resume(store, run_id)
    assert (get_run(store, run_id)["status"], get_run(store, run_id)["reason"]) == ("queued", "resumed")
    with pytest.raises(UserError, match="not parked"):
        operate.resume(store, run_id)
    operate.cancel_run(store, run_id)
    assert (get_run(store, run_id)["status"], get_run(store, run_id)["reason"]) == ("cancelled", "person")
    with pytest.raises(UserError, match="has ended"):
        operate.cancel_run(store, run_id)


def test_resume_of_a_run_waiting_for_a_decision_says_which_command(store):
    registry = registry_of(Agent(name="asks", run=lambda ctx, r: ctx.approval("q", "ok?")))
    run_id = start_and_work(store, registry, "asks", {}).run_id
    with pytest.raises(UserError, match="tui-agent approve"):
        operate.resume(store, run_id)


def test_a_renamed_step_parks_the_run_and_restart_runs_it_from_zero(store):
    counter = Counter()
    names = {"second": "fetch"}

    def evolving(ctx, request):
        ctx.step("first", counter, "first")
        ctx.step(names["second"], counter, names["second"])
        return ctx.approval("gate", "go on?")

    registry = registry_of(Agent(name="ev", run=evolving))
    run_id = start_and_work(store, registry, "ev", {}).run_id     # waits at the gate, two steps recorded
    operate.approve(store, run_id)
    names["second"] = "download"                                  # the code changed between two attempts
    parked = work(store, registry, run_id)
    assert (parked.status, parked.reason) == ("parked", "code_changed")
    assert "position 1 was recorded as 'fetch' but the code now calls 'download'" in parked.error
    old = journal_for(store, run_id)
    assert [(e["generation"], e["name"]) for e in old] == [(1, "first"), (1, "fetch")]

    operate.resume(store, run_id, restart=True)
    assert get_run(store, run_id)["generation"] == 2
    assert work(store, registry, run_id).reason == "approval", "generation 2 asks its own question"
    operate.approve(store, run_id)
    assert work(store, registry, run_id).status == "succeeded"
    assert counter.calls == {"first": 2, "fetch": 1, "download": 1}
    entries = [(e["generation"], e["name"]) for e in journal_for(store, run_id)]
    assert entries[:2] == [(1, "first"), (1, "fetch")], "the old generation stays readable"
    assert entries[2:] == [(2, "first"), (2, "download"), (2, "gate")]


def test_a_restart_is_refused_while_the_run_is_live(store):
    registry = registry_of(Agent(name="asks", run=lambda ctx, r: ctx.approval("q", "ok?")))
    run_id = start_and_work(store, registry, "asks", {}).run_id
    with pytest.raises(UserError, match="park it first"):
        operate.resume(store, run_id, restart=True)


def test_a_new_code_version_alone_is_an_event_not_a_stop(store):
    def v1(ctx, request):
        ctx.approval("q", "ok?")
        return {}

    agent = Agent(name="cv", run=v1)
    registry = registry_of(agent)
    run_id = start_and_work(store, registry, "cv", {}).run_id
    operate.approve(store, run_id)
    agent.__dict__["code_version"] = "0123456789ab"   # as if the module's source changed
    assert work(store, registry, run_id).status == "succeeded"
    assert get_run(store, run_id)["code_version"] == "0123456789ab"
    assert any(e["kind"] == "code_version" and "-> 0123456789ab" in e["message"]
               for e in events_for(store, run_id))


class Outbox:
    def __init__(self):
        self.sent = []

    def send(self, key):
        self.sent.append(key)
        return {"n": len(self.sent)}


def test_fork_keeps_steps_before_n_reruns_the_rest_and_never_repeats_a_confirmed_effect(store):
    counter, outbox = Counter(), Outbox()

    def pipeline(ctx, request):
        a = ctx.step("a", counter, "a")
        b = ctx.step("b", counter, "b")
        sent = ctx.effect("send", key="report:1", do=outbox.send)
        c = ctx.step("c", counter, "c")
        return {"steps": [a, b, c], "sent": sent}

    registry = registry_of(Agent(name="pipe", run=pipeline))
    parent = start_and_work(store, registry, "pipe", {})
    parent_journal = journal_for(store, parent.run_id)
    parent_run = get_run(store, parent.run_id)

    child_id = operate.fork(store, parent.run_id, 1)
    child = work(store, registry, child_id)
    assert child.status == "succeeded"
    assert child.result == parent.result
    assert counter.calls == {"a": 1, "b": 2, "c": 2}, "a kept, b and c run anew"
    assert outbox.sent == ["report:1"], "the confirmed effect was not repeated"
    run = get_run(store, child_id)
    assert (run["parent_id"], run["fork_step"]) == (parent.run_id, 1)
    (effect,) = effects_for(store, child_id)
    assert (effect["state"], effect["done_by"]) == ("confirmed", parent.run_id)
    assert journal_for(store, parent.run_id) == parent_journal
    assert {k: v for k, v in get_run(store, parent.run_id).items() if k != "updated_at"} == {
        k: v for k, v in parent_run.items() if k != "updated_at"}
    assert any(f"forked into {child_id} at position 1" in e["message"] for e in events_for(store, parent.run_id))


def test_fork_after_the_effect_keeps_it_recorded(store):
    counter, outbox = Counter(), Outbox()

    def pipeline(ctx, request):
        ctx.step("a", counter, "a")
        ctx.effect("send", key="report:2", do=outbox.send)
        return {"last": ctx.step("c", counter, "c")}

    registry = registry_of(Agent(name="pipe", run=pipeline))
    parent = start_and_work(store, registry, "pipe", {})
    child = work(store, registry, operate.fork(store, parent.run_id, 2))
    assert child.status == "succeeded"
    assert counter.calls == {"a": 1, "c": 2}
    assert outbox.sent == ["report:2"]


def test_fork_outside_the_journal_is_a_usage_error(store):
    registry = registry_of(Agent(name="one", run=lambda ctx, r: {"x": ctx.step("x", lambda: 1)}))
    run_id = start_and_work(store, registry, "one", {}).run_id
    with pytest.raises(UserError, match="--from-step must be 0 to 1"):
        operate.fork(store, run_id, 5)


def test_a_checkpoint_of_another_schema_parks_the_run(store):
    registry = registry_of(Agent(name="asks", run=lambda ctx, r: ctx.approval("q", "ok?")))
    run_id = start_and_work(store, registry, "asks", {}).run_id
    operate.approve(store, run_id)
    with store.write() as conn:
        conn.execute("UPDATE checkpoints SET schema_version = 99 WHERE run_id = ?", (run_id,))
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("parked", "checkpoint_schema")
    assert "checkpoint schema 99" in outcome.message
    assert "resume --restart" in outcome.message
    operate.resume(store, run_id, restart=True)
    assert work(store, registry, run_id).reason == "approval", "the restart writes the current schema"
