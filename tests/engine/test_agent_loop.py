"""`ctx.agent_loop`: turns and tool results journaled, errors back to the model, the loop's own check,
prompt caching, and the degrade hook's switch, with the scripted provider and the fake Messages API."""

from __future__ import annotations

import json
import mailbox
import time

import pytest
from fake_messages import message
from fixtures.model_agents import read_note
from helpers import registry_of, timeline_of, work

from tui_agent import Agent, Budget, Plateau, RetryPolicy, tool
from tui_agent.errors import PermanentError, TemporaryError
from tui_agent.models import cost_usd
from tui_agent.operate import approve, start
from tui_agent.report import run_report
from tui_agent.runtime import faults
from tui_agent.runtime.faults import SimulatedCrash
from tui_agent.store import open_store
from tui_agent.store.journal import checkpoint_for, journal_for
from tui_agent.widgets.timeline import shown_names


def tool_use(*uses: tuple[str, dict], model: str = "claude-sonnet-5-5") -> dict:
    return {**message(model=model), "stop_reason": "tool_use",
            "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": n, "input": a} for i, (n, a) in enumerate(uses)]}


def scripted(*replies):
    """A script answering the Nth model call with the Nth reply (a str is an end turn)."""
    return lambda messages, max_tokens, index: replies[index]


def _entries(store, run_id) -> list[tuple[str, str]]:
    return [(e["name"], e["kind"]) for e in journal_for(store, run_id)]


@pytest.fixture
def note_request(tmp_path) -> dict:
    return {"log": str(tmp_path / "calls.log"), "outbox": str(tmp_path / "outbox")}


def test_a_tool_turn_sends_the_result_back_then_the_model_ends(fake, store, note_request, tmp_path):
    usage = {"input_tokens": 50, "output_tokens": 10, "cache_creation_input_tokens": 400, "cache_read_input_tokens": 0}
    cached = {**usage, "cache_creation_input_tokens": 30, "cache_read_input_tokens": 400}
    fake.play({"body": {**tool_use(("read_note", {"name": "today"})), "usage": usage}},
              {"body": {**message("Deploy at noon."), "usage": cached}})
    registry = registry_of(Agent(name="reader", run=lambda ctx, r: ctx.agent_loop(
        "notes", system="Be brief.", tools=[read_note], messages=[{"role": "user", "content": "today?"}],
        max_tokens=100)))
    run_id, _ = start(store, registry, agent_name="reader", request=note_request, model="anthropic")
    outcome = work(store, registry, run_id)
    assert outcome.status == "succeeded", outcome.error
    done = outcome.result
    assert (done["stopped"], done["turns"], done["tool_calls"]) == ("end_turn", 2, 1)
    first, second = (r["body"] for r in fake.requests)
    assert first["stream"]
    assert first["tools"][0]["name"] == "read_note"
    assert second["messages"][1] == {"role": "assistant", "content": tool_use(("read_note", {"name": "today"}))["content"]}
    assert second["messages"][2] == {"role": "user", "content": [{
        "type": "tool_result", "tool_use_id": "toolu_0", "content": "the note 'today' says: deploy at noon",
        "cache_control": {"type": "ephemeral"}}]}  # the newest turn is a cache breakpoint
    # the tools and the system prompt are breakpoints too, so the next turn reads them from the cache
    assert second["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert second["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    # cache writes and reads are priced, counted apart and shown with the budget
    expected = cost_usd("claude-sonnet-5-5", usage) + cost_usd("claude-sonnet-5-5", cached)
    assert done["cost_usd"] == pytest.approx(expected)
    budget = run_report(store, run_id)["budget"]
    assert (budget["cache_read_tokens"], budget["cache_write_tokens"]) == (400, 430)
    assert budget["dimensions"]["cost_usd"]["used"] == pytest.approx(expected)
    assert budget["dimensions"]["tool_calls"]["used"] == 1
    assert _entries(store, run_id) == [("notes/turn 1", "model"), ("notes/read_note", "tool"), ("notes/turn 2", "model")]
    # what the journal keeps of each request carries no cache marks: only the second turn's new messages
    calls = store.conn.execute("SELECT request FROM model_calls WHERE run_id = ? ORDER BY position", (run_id,)).fetchall()
    assert [len(json.loads(r)["messages"]) for (r,) in calls] == [1, 2]
    assert "cache_control" not in calls[1][0]


def test_bad_input_and_a_failing_tool_go_back_to_the_model_and_three_alike_are_a_plateau(store, tmp_path):
    @tool
    def lookup(city: str) -> str:
        """The weather in a city."""
        raise PermanentError("the weather service has no such city")

    replies = [tool_use(("lookup", {"town": "Oslo"})), tool_use(("lookup", {"city": "Atlantis"})),
               tool_use(("lookup", {"city": "Lemuria"})), tool_use(("lookup", {"city": "Mu"}))]
    registry = registry_of(Agent(name="weather", script=scripted(*replies), plateau=Plateau(failures=3),
                                 run=lambda ctx, r: ctx.agent_loop("w", tools=[lookup], messages=[
                                     {"role": "user", "content": "weather?"}], max_tokens=50)))
    run_id, _ = start(store, registry, agent_name="weather", request={}, model="scripted")
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("waiting", "plateau")
    results = [json.loads(e["result"]) for e in journal_for(store, run_id) if e["kind"] == "tool"]
    assert results[0]["is_error"]
    assert results[0]["content"] == (
        'invalid input: (root): missing required property "city"; invalid input: (root): unexpected property "town"')
    assert [r["content"] for r in results[1:]] == ["PermanentError: the weather service has no such city"] * 3
    assert all(r["is_error"] for r in results)
    failures = [json.loads(e["result"])["fingerprint"] for e in journal_for(store, run_id) if e["kind"] == "failure"]
    assert len(failures) == 4  # the same failure three times in a row
    assert len(set(failures[1:])) == 1


def test_a_temporary_tool_error_is_retried_by_the_policy_first(store):
    tries = []

    @tool
    def flaky() -> str:
        """Works the second time."""
        tries.append(1)
        if len(tries) == 1:
            raise TemporaryError("busy")
        return "ok"

    registry = registry_of(Agent(name="flaky", script=scripted(tool_use(("flaky", {})), "done"),
                                 retry=RetryPolicy(attempts=3, base_s=0.01),
                                 run=lambda ctx, r: ctx.agent_loop("f", tools=[flaky], messages=[
                                     {"role": "user", "content": "go"}], max_tokens=50)))
    run_id, _ = start(store, registry, agent_name="flaky", request={}, model="scripted")
    assert work(store, registry, run_id).status == "succeeded"
    (entry,) = [e for e in journal_for(store, run_id) if e["kind"] == "tool"]
    assert (json.loads(entry["result"])["content"], entry["attempts"]) == ("ok", 2)
    assert not any(e["kind"] == "failure" for e in journal_for(store, run_id))


def test_the_checks_verdict_is_journaled_a_failed_check_adds_a_turn_and_a_replay_does_not_rerun_it(store):
    checked = []

    def check(ctx, messages):
        checked.append(len(messages))
        return (len(checked) > 1, "2 tests fail" if len(checked) == 1 else None, len(checked))

    def run(ctx, request):
        done = ctx.agent_loop("fix", messages=[{"role": "user", "content": "fix it"}], max_tokens=50, check=check)
        ctx.approval("ship", "ship it?")
        return {"stopped": done["stopped"], "turns": done["turns"], "said": done["messages"][2]["content"]}

    registry = registry_of(Agent(name="fixer", run=run, script=scripted("fixed", "fixed now")))
    run_id, _ = start(store, registry, agent_name="fixer", request={}, model="scripted")
    assert work(store, registry, run_id).reason == "approval"
    assert checked == [2, 4]
    approve(store, run_id)
    outcome = work(store, registry, run_id, worker="w-later")
    assert outcome.result == {"stopped": "check_passed", "turns": 2, "said": "the check did not pass: 2 tests fail"}
    assert checked == [2, 4]  # replayed from the journal, not run again
    assert _entries(store, run_id) == [("fix/turn 1", "model"), ("fix/check 1", "step"), ("progress", "progress"),
                                       ("fix/turn 2", "model"), ("fix/check 2", "step"), ("progress", "progress"),
                                       ("ship", "approval")]


def test_a_check_that_journals_is_refused_with_a_clear_error(store):
    registry = registry_of(Agent(name="bad", script=scripted("done"), run=lambda ctx, r: ctx.agent_loop(
        "x", messages=[{"role": "user", "content": "go"}], max_tokens=50,
        check=lambda ctx, messages: ctx.step("inner", lambda: True))))
    run_id, _ = start(store, registry, agent_name="bad", request={}, model="scripted")
    outcome = work(store, registry, run_id)
    assert outcome.status == "failed"
    assert "'inner' was called inside step 'x/check 1'" in outcome.error


def test_the_degrade_switch_happens_at_the_same_turn_after_a_crash(db_path):
    def run(ctx, request):
        done = ctx.agent_loop("chat", messages=[{"role": "user", "content": "go"}], max_tokens=20, max_turns=4,
                              model="claude-sonnet-5-5", tools=[echo])
        return [m["content"] for m in done["messages"] if m["role"] == "user"][1:]

    @tool
    def echo(ctx) -> str:
        """Says which model asked."""
        return "ok"

    registry = registry_of(Agent(name="chat", run=run, budget=Budget(model_calls=5, soft=0.4),
                                 degrade=lambda ctx: ctx.switch_model("claude-haiku-4-5"),
                                 script=scripted(*[tool_use(("echo", {}))] * 4)))
    store = open_store(db_path)
    run_id, _ = start(store, registry, agent_name="chat", request={}, model="scripted")
    faults.arm("after-model-commit", 3)
    try:
        with pytest.raises(SimulatedCrash):
            work(store, registry, run_id, worker="w-dies", lease_s=0.05)
    finally:
        faults.disarm()
    store = open_store(db_path)
    time.sleep(0.1)
    outcome = work(store, registry, run_id, worker="w-next")
    assert outcome.status == "succeeded"
    models = [c for (c,) in store.conn.execute("SELECT model FROM model_calls WHERE run_id = ? ORDER BY position",
                                              (run_id,))]
    # the soft threshold (2 of 5 calls) switched turns 3 and 4; turn 4 ran after the crash, from a replay
    assert models == ["claude-sonnet-5-5"] * 2 + ["claude-haiku-4-5"] * 2
    assert checkpoint_for(store, run_id)["used_tool_calls"] == 4
    store.close()


def test_the_timeline_nests_a_loops_turns_and_tools_under_its_name(store, note_request):
    registry = registry_of(Agent(name="reader", script=scripted(tool_use(("read_note", {"name": "today"})), "noon"),
                                 run=lambda ctx, r: [ctx.step("prepare", lambda: 1), ctx.agent_loop(
                                     "notes", tools=[read_note], max_tokens=50,
                                     messages=[{"role": "user", "content": "today?"}])][0]))
    run_id, _ = start(store, registry, agent_name="reader", request=note_request, model="scripted")
    assert work(store, registry, run_id).status == "succeeded"
    items = timeline_of(store, run_id)
    assert shown_names(items) == ["prepare", "notes › turn 1", "      › read_note", "      › turn 2"]


def test_the_readmes_example_loop_runs_offline_and_a_second_run_sends_nothing_more(tui_agent, tmp_path):
    command = ["--agents", "examples/standup.py", "run", "standup", "--model", "scripted:examples/standup-script.json",
               "--input", json.dumps({"notes": "examples/notes.md", "day": "2026-11-30"})]
    first = tui_agent(*command)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[1]) == {
        "said": "Emailed the stand-up for 2026-11-30 to the team.", "turns": 3, "cost_usd": pytest.approx(0, abs=0.01)}
    outbox = mailbox.Maildir(tmp_path / "runs.data" / "outbox", factory=None, create=False)
    (sent,) = [outbox.get_message(k) for k in outbox.keys()]
    assert sent["Subject"] == "Stand-up 2026-11-30"
    assert "Ben: blocked" in sent.get_payload()
    again = tui_agent(*command)                   # the same day again: the key is confirmed, nothing is sent
    assert again.returncode == 0, again.stderr
    assert len(outbox.keys()) == 1


def test_a_tool_call_past_the_tool_calls_ceiling_is_refused_before_it_runs(store):
    ran = []

    @tool
    def count() -> int:
        """Counts."""
        ran.append(1)
        return len(ran)

    registry = registry_of(Agent(name="counter", budget=Budget(tool_calls=1),
                                 script=scripted(tool_use(("count", {})), tool_use(("count", {})), "done"),
                                 run=lambda ctx, r: ctx.agent_loop("c", tools=[count], max_tokens=20,
                                                                   messages=[{"role": "user", "content": "go"}])))
    run_id, _ = start(store, registry, agent_name="counter", request={}, model="scripted")
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("parked", "budget:tool_calls")
    assert ran == [1]
    assert checkpoint_for(store, run_id)["used_tool_calls"] == 1


def test_a_step_about_a_path_is_shown_whole_not_nested():
    from tui_agent.widgets.timeline import TimelineItem

    names = ["find-files", "file:src/app.py", "file:src/lib/x.py", "fix/turn 1", "fix/read_file"]
    items = [TimelineItem(position=i, name=name, kind="step", mark="✓", tone="") for i, name in enumerate(names)]
    assert shown_names(items) == ["find-files", "file:src/app.py", "file:src/lib/x.py", "fix › turn 1", "    › read_file"]
