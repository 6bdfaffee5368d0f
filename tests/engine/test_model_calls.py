"""Each attempt of a model call is committed before its request is sent: what was asked (the system prompt
and tools once per run, only the new messages), its reservation held against the budget until the reply
trades it for what was used, a live count while it streams, and the degrade hook's model switch."""

from __future__ import annotations

import json
import threading
import time

import pytest
from fake_messages import message
from helpers import registry_of, timeline_of, work

from tui_agent import Agent, Budget, RetryPolicy
from tui_agent.cli.text import ProgressLine
from tui_agent.errors import PermanentError, TemporaryError
from tui_agent.models import ScriptedProvider
from tui_agent.operate import approve, start
from tui_agent.report import run_report
from tui_agent.runtime.clock import now
from tui_agent.runtime.faults import SimulatedCrash
from tui_agent.runtime.worker import execute
from tui_agent.store import open_store
from tui_agent.store.journal import checkpoint_for
from tui_agent.store.runs import claim_run
from tui_agent.widgets.timeline import Timeline

SYSTEM = "You are terse."
TOOLS = [{"name": "add", "description": "adds", "input_schema": {"type": "object"}}]


def _conversation(turns: int):
    def run(ctx, request):
        messages = []
        for turn in range(turns):
            messages = [*messages, {"role": "user", "content": f"question {turn}"}]
            reply = ctx.model(f"turn{turn}", messages=messages, max_tokens=50, system=SYSTEM, tools=TOOLS)
            messages = [*messages, {"role": "assistant", "content": reply["content"]}]
        return {"turns": turns}

    return run


def _calls(store, run_id) -> list[dict]:
    return [{**row, "request": json.loads(row["request"])} for row in store.query(
        "SELECT * FROM model_calls WHERE run_id = ? ORDER BY position, call", (run_id,))]


def _provider(monkeypatch, create):
    """Every run of the test gets a ScriptedProvider whose `create` is `create(super_create, **request)`."""
    class Provider(ScriptedProvider):
        def create(self, **request):
            return create(super().create, **request)

    monkeypatch.setattr("tui_agent.runtime.worker.provider_for", lambda spec, script, replies=None: Provider(script))


def test_each_call_keeps_only_what_is_new_and_the_system_prompt_and_tools_once(store):
    registry = registry_of(Agent(name="chat", run=_conversation(3)))
    run_id, _ = start(store, registry, agent_name="chat", request={}, model="scripted")
    assert work(store, registry, run_id).status == "succeeded"
    calls = _calls(store, run_id)
    assert [(c["position"], c["call"], c["state"], c["provider"]) for c in calls] == [
        (0, 1, "answered", "scripted"), (1, 1, "answered", "scripted"), (2, 1, "answered", "scripted")]
    # each request holds the messages added since the previous call: 1, then an answer and a question
    assert [c["request"]["after"] for c in calls] == [0, 1, 3]
    assert [m["content"] for m in calls[2]["request"]["messages"]][-1] == "question 2"
    assert [len(c["request"]["messages"]) for c in calls] == [1, 2, 2]
    assert {c["request"]["system"] for c in calls} == {calls[0]["request"]["system"]} != {None}
    parts = store.conn.execute("SELECT body FROM request_parts WHERE run_id = ?", (run_id,)).fetchall()
    assert sorted((json.loads(body) for (body,) in parts), key=str) == sorted([SYSTEM, TOOLS], key=str)
    assert [c["tokens"] for c in calls] == [
        json.loads(row)["usage"]["output_tokens"] for (row,) in store.conn.execute(
            "SELECT result FROM journal WHERE run_id = ? ORDER BY position", (run_id,)).fetchall()]


def test_the_reply_trades_the_reservation_for_what_was_used(store):
    registry = registry_of(Agent(name="chat", run=_conversation(2)))
    run_id, _ = start(store, registry, agent_name="chat", request={}, model="scripted")
    work(store, registry, run_id)
    checkpoint = checkpoint_for(store, run_id)
    replies = [json.loads(r) for (r,) in store.conn.execute("SELECT result FROM journal WHERE run_id = ?", (run_id,))]
    assert checkpoint["used_model_calls"] == 2
    assert checkpoint["used_output_tokens"] == sum(r["usage"]["output_tokens"] for r in replies) < 2 * 50
    assert checkpoint["used_input_tokens"] == sum(r["usage"]["input_tokens"] for r in replies)
    costs = [c for (c,) in store.conn.execute("SELECT cost_usd FROM journal WHERE run_id = ?", (run_id,))]
    assert checkpoint["used_cost_usd"] == pytest.approx(sum(costs))


def test_a_call_that_failed_with_an_error_gives_its_reservation_back(store, monkeypatch):
    failures = [TemporaryError("overloaded"), PermanentError("bad request")]

    def create(real, **request):
        if failures:
            raise failures.pop(0)
        return real(**request)

    _provider(monkeypatch, create)
    registry = registry_of(Agent(name="chat", run=_conversation(1), retry=RetryPolicy(attempts=3, base_s=0.01)))
    run_id, _ = start(store, registry, agent_name="chat", request={}, model="scripted")
    outcome = work(store, registry, run_id)
    assert outcome.status == "failed"
    assert "bad request" in outcome.error
    assert [(c["call"], c["state"], c["error"]) for c in _calls(store, run_id)] == [
        (1, "failed", "TemporaryError: overloaded"), (2, "failed", "PermanentError: bad request")]
    checkpoint = checkpoint_for(store, run_id)
    assert (checkpoint["used_model_calls"], checkpoint["used_input_tokens"], checkpoint["used_output_tokens"],
            checkpoint["used_cost_usd"]) == (0, 0, 0, 0.0)


def test_a_call_whose_worker_died_stays_counted_and_shows_in_the_timeline(db_path, monkeypatch):
    crashes = [SimulatedCrash("in a call")]

    def create(real, **request):
        if crashes:
            raise crashes.pop()
        return real(**request)

    _provider(monkeypatch, create)
    registry = registry_of(Agent(name="chat", run=_conversation(1)))
    store = open_store(db_path)
    run_id, _ = start(store, registry, agent_name="chat", request={}, model="scripted", budget={"cost_usd": 1.0})
    with pytest.raises(SimulatedCrash):
        work(store, registry, run_id, worker="w-dies", lease_s=0.2)
    store = open_store(db_path)
    live = run_report(store, run_id)
    assert [c["state"] for c in live["model_calls"]] == ["in_flight"]  # its lease still runs
    time.sleep(0.25)
    report = run_report(store, run_id)
    (died,) = report["model_calls"]
    assert died["state"] == "died"
    assert died["reserved_usd"] > 0
    assert report["budget"]["dimensions"]["cost_usd"]["used"] == pytest.approx(died["reserved_usd"])
    pending = timeline_of(store, run_id)[-1]
    assert pending.pending
    assert pending.name == "turn0"
    assert pending.note.startswith("in flight when the worker died · possibly billed $0.0")

    assert work(store, registry, run_id, worker="w-next").status == "succeeded"
    report = run_report(store, run_id)
    assert [(c["call"], c["state"]) for c in report["model_calls"]] == [(1, "died"), (2, "answered")]
    assert report["budget"]["dimensions"]["cost_usd"]["used"] == pytest.approx(
        died["reserved_usd"] + report["steps"][0]["cost_usd"])
    (item,) = timeline_of(store, run_id)
    assert item.possibly_billed == pytest.approx(died["reserved_usd"])
    extra = Timeline._extra(item, with_tag=True)
    assert extra.startswith("$")
    assert extra.endswith("?")
    assert "+$" in extra
    assert Timeline._tag(item) == "scripted"
    store.close()


def test_a_long_call_shows_its_tokens_live_in_the_store_and_on_the_progress_line(store, monkeypatch, capsys):
    def create(real, on_tokens=None, **request):
        for i in range(1, 16):
            on_tokens(i * 10)
            time.sleep(0.15)
        return real(**request)

    _provider(monkeypatch, create)
    registry = registry_of(Agent(name="chat", run=_conversation(1)))
    run_id, _ = start(store, registry, agent_name="chat", request={}, model="scripted")
    claim = claim_run(store, run_id, "w-live", 60.0, now())
    progress = ProgressLine()
    progress.shown = True
    worker = threading.Thread(target=lambda: execute(open_store(store.path), registry, claim=claim, on_step=progress))
    worker.start()
    def in_flight() -> int | None:
        calls = run_report(store, run_id)["model_calls"]
        return calls[0]["tokens"] if calls and calls[0]["state"] == "in_flight" and calls[0]["tokens"] else None

    seen, pairs = [], []
    deadline = time.monotonic() + 10
    while worker.is_alive() and time.monotonic() < deadline:
        before = in_flight()
        if before is not None:
            seen.append(before)
            note = timeline_of(store, run_id)[-1].note   # the run screen's pending row
            if in_flight() == before:   # read between two equal reads: the same stored count
                pairs.append((before, note))
        time.sleep(0.1)
    worker.join()
    tokens, note = pairs[-1]
    assert note.startswith(f"turn0 · scripted · {tokens} tokens · ") and note.endswith(" s"), pairs
    assert seen  # written while the call streamed
    assert seen == sorted(seen)
    assert 0 < seen[0] < 150
    assert len(set(seen)) <= 3  # at most once a second for a 2.3 s call
    shown = capsys.readouterr().err
    assert "step 1 turn0 · scripted · 150 tokens · 2." in shown
    assert run_report(store, run_id)["model_calls"][0]["state"] == "answered"


def test_the_degrade_hook_switches_the_model_over_the_pinned_one_and_a_replay_keeps_it(fake, store):
    def asks(ctx, request):
        def ask(i):
            return ctx.model(f"ask{i}", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                             model="claude-opus-5")["model"]
        models = [ask(i) for i in range(3)]
        ctx.approval("go-on", "one more?")
        return [*models, ask(3)]

    registry = registry_of(Agent(name="asks", run=asks, budget=Budget(model_calls=4, soft=0.5),
                                 degrade=lambda ctx: ctx.switch_model("claude-haiku-4-5")))
    fake.play(*({"body": message(model=m)} for m in ["claude-sonnet-5"] * 2 + ["claude-haiku-4-5"] * 2))
    run_id, _ = start(store, registry, agent_name="asks", request={}, model="anthropic:claude-sonnet-5")
    assert work(store, registry, run_id).reason == "approval"
    approve(store, run_id)
    outcome = work(store, registry, run_id, worker="w-later")  # replays the first three calls, then asks
    assert outcome.status == "succeeded"
    # pinned beats the agent's model=; after the soft threshold (2 of 4 calls) the hook's switch beats both,
    # and the replay runs the hook at the same position, so the call after the approval is switched too
    expected = ["claude-sonnet-5"] * 2 + ["claude-haiku-4-5"] * 2
    assert [r["body"]["model"] for r in fake.requests] == expected
    assert [c["model"] for c in _calls(store, run_id)] == expected
    assert outcome.result == expected


def test_a_claude_reply_from_a_model_without_a_price_shows_cost_unknown(fake, store, invoke):
    registry = registry_of(Agent(name="chat", run=_conversation(1)))
    fake.play({"body": message(model="claude-future-9")})
    run_id, _ = start(store, registry, agent_name="chat", request={}, model="anthropic")
    assert work(store, registry, run_id).status == "succeeded"
    report = run_report(store, run_id)
    assert report["steps"][0]["cost_usd"] is None
    assert report["budget"]["unpriced_model_calls"] == 1
    (item,) = timeline_of(store, run_id)
    assert Timeline._extra(item, with_tag=True).endswith("$?")
    assert "cost unknown" in [line.split("ms")[-1].strip() for line in
                              invoke("show", run_id).stdout.splitlines() if "turn0" in line][0]
