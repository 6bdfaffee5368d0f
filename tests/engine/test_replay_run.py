"""`tui-agent replay`: a recorded run as a cassette for the current code (issue 22, part 1)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers import dump, registry_of, start_and_work, work

from tui_agent import Agent, operate
from tui_agent.agents import nightly_report
from tui_agent.errors import TemporaryError
from tui_agent.runtime.agent import RetryPolicy
from tui_agent.runtime.registry import load_registry
from tui_agent.services.replay import replay_last, replay_run
from tui_agent.testing import replay

PROMPT = "Name three uses for {thing}."


def _asker(prompt: str = PROMPT, steps: tuple[str, ...] = ("pick", "ask", "tidy"), inputs: bool = False,
           counter: Counter | None = None, sent: list | None = None) -> Agent:
    """A small agent: a step, a model call, a step, an effect; `prompt` and the step names vary by version."""
    counter = Counter() if counter is None else counter
    sent = [] if sent is None else sent

    def count(name: str, value):
        counter[name] += 1
        return value

    def run(ctx, request):
        thing = ctx.step(steps[0], count, "pick", request["thing"])
        reply = ctx.model(steps[1], messages=[{"role": "user", "content": prompt.format(thing=thing)}],
                          max_tokens=100, system="Be brief.")
        text = "".join(block.get("text", "") for block in reply["content"])
        tidy = ctx.step(steps[2], count, "tidy", text.upper())
        ctx.effect("send", key=f"send:{thing}", do=lambda key: sent.append(key) or {"sent": key})
        return {"answer": tidy}

    return Agent(name="asker", run=run, journal_inputs=inputs,
                 script=lambda messages, max_tokens, call_index: "reply to " + messages[-1]["content"])


def _recorded(store, agent: Agent, request: dict | None = None) -> str:
    outcome = start_and_work(store, registry_of(agent), agent.name, request or {"thing": "a brick"})
    assert outcome.status == "succeeded", outcome
    return outcome.run_id


def test_the_same_code_reproduces_the_run_and_executes_nothing(store):
    counter, sent = Counter(), []
    run_id = _recorded(store, _asker(counter=counter, sent=sent))
    before = (dict(counter), list(sent), dump(store.path))
    done = replay_run(store.path, registry_of(_asker(counter=counter, sent=sent)), run_id)
    assert done.reproduced, done
    assert (done.entries, done.answered, done.note) == (4, 4, "the code returned the recorded result")
    assert (dict(counter), list(sent), dump(store.path)) == before, "a replay ran a step, an effect or wrote"


def test_a_renamed_step_stops_at_its_position(store):
    run_id = _recorded(store, _asker())
    done = replay_run(store.path, registry_of(_asker(steps=("pick", "ask", "shout"))), run_id)
    assert not done.reproduced
    d = done.divergence
    assert (d.position, d.kind, d.recorded, d.name) == (2, "name", "tidy", "shout")
    assert done.answered == 2


def test_a_changed_prompt_stops_at_the_model_call_with_a_diff_of_the_messages(store):
    run_id = _recorded(store, _asker())
    done = replay_run(store.path, registry_of(_asker(prompt="List three uses for {thing}.")), run_id)
    d = done.divergence
    assert (d.position, d.kind, d.name) == (1, "model-request", "ask")
    assert d.diff == ("messages: the first 0 agree; recorded 1, now 1",
                      "- [0] user: Name three uses for a brick.",
                      "+ [0] user: List three uses for a brick.")


def test_a_changed_system_prompt_and_model_are_shown_field_by_field(store):
    run_id = _recorded(store, _asker())

    def run(ctx, request):
        thing = ctx.step("pick", lambda t: t, request["thing"])
        ctx.model("ask", messages=[{"role": "user", "content": PROMPT.format(thing=thing)}], max_tokens=200,
                  system="Be brief.\nUse French.", model="claude-other")
        return {}

    done = replay_run(store.path, registry_of(Agent(name="asker", run=run)), run_id)
    assert done.divergence.kind == "model-request"
    diff = done.divergence.diff
    assert diff[0].startswith("model: recorded '") and diff[0].endswith(", now 'claude-other'")
    assert diff[1] == "max_tokens: recorded 100, now 200"
    assert "+Use French." in diff and " Be brief." in diff
    assert not any(line.startswith("messages") for line in diff), "the messages did not change"


def test_changed_step_inputs_stop_the_replay_only_for_an_agent_that_journals_them(store):
    journaled = _recorded(store, _asker(inputs=True))
    plain = _recorded(store, _asker())
    inputs = store.conn.execute("SELECT position, inputs FROM journal WHERE run_id = ? AND kind = 'step'"
                                " ORDER BY position", (journaled,)).fetchall()
    assert all(len(digest) == 16 for _, digest in inputs)
    assert store.conn.execute("SELECT count(*) FROM journal WHERE run_id = ? AND inputs IS NOT NULL",
                              (plain,)).fetchone()[0] == 0, "inputs are journaled only for agents that opt in"

    def other_thing(ctx, request):   # the same calls with another argument to the first step
        return _asker(inputs=True).run(ctx, {"thing": "a stone"})

    changed = Agent(name="asker", run=other_thing, journal_inputs=True)
    d = replay_run(store.path, registry_of(changed), journaled).divergence
    assert (d.position, d.kind, d.name) == (0, "inputs", "pick")
    # without the digest the same change goes unseen: the step's recorded result is replayed, so what follows
    # is asked and done as recorded
    assert replay_run(store.path, registry_of(Agent(name="asker", run=other_thing)), plain).reproduced


def test_another_result_is_a_divergence_with_a_diff(store):
    run_id = _recorded(store, _asker())

    def run(ctx, request):
        return {**_asker().run(ctx, request), "extra": 1}

    done = replay_run(store.path, registry_of(Agent(name="asker", run=run)), run_id)
    assert done.divergence.kind == "result" and done.answered == 4
    assert '+ "extra": 1' in done.divergence.diff


def test_a_call_past_the_end_of_a_finished_run_is_a_divergence(store):
    run_id = _recorded(store, _asker())

    def run(ctx, request):
        _asker().run(ctx, request)
        return ctx.step("one-more", lambda: 1)

    d = replay_run(store.path, registry_of(Agent(name="asker", run=run)), run_id).divergence
    assert (d.position, d.kind, d.recorded, d.name) == (4, "new-call", None, "one-more")


def test_a_model_call_with_its_own_timeout_reproduces(store):
    """The cassette's `model` takes every argument Context.model does: `timeout_s` too, passed through."""
    def run(ctx, request):
        reply = ctx.model("ask", messages=[{"role": "user", "content": request["thing"]}], max_tokens=100,
                          timeout_s=30)
        return {"answer": reply["content"][0]["text"]}

    agent = Agent(name="timed", run=run, script=lambda messages, max_tokens, call_index: "an answer")
    done = replay_run(str(store.path), registry_of(agent), _recorded(store, agent))
    assert done.reproduced, done
    assert (done.answered, done.note) == (1, "the code returned the recorded result")


@pytest.mark.parametrize("service, lookup", [("dedupe", True), ("dedupe", False), ("every", True),
                                             ("every", False)])
def test_nightly_report_reproduces_under_every_service_mode_and_sends_nothing(store, service, lookup):
    registry = load_registry([])
    outcome = start_and_work(store, registry, "nightly-report", {"service": service, "lookup": lookup})
    assert outcome.status == "succeeded"
    outbox = nightly_report.outbox_for(store.data_dir, {"service": service})
    fetches = nightly_report.fetch_log(store.data_dir)
    before = (len(outbox.messages()), fetches.read_text())
    done = replay(store.path, outcome.run_id)   # the pytest helper, built-in agents
    assert done.reproduced, done
    assert done.answered == done.entries == 7
    assert (len(outbox.messages()), fetches.read_text()) == before == (1, before[1])


def test_a_run_waiting_for_approval_replays_up_to_the_call_it_waits_at(store):
    registry = load_registry([])
    outcome = start_and_work(store, registry, "nightly-report", {"approve": True})
    assert outcome.status == "waiting"
    done = replay(store.path, outcome.run_id)
    assert done.reproduced and done.answered == 6
    assert done.note == "the code reached #6 approve, where the run (waiting) goes on when resumed"


def test_a_fork_and_a_run_with_a_retry_reproduce(store):
    failures = Counter()

    def flaky(name):
        failures[name] += 1
        if failures[name] == 1:
            raise TemporaryError("the service hiccuped")
        return name

    def run(ctx, request):
        return [ctx.step(name, flaky, name) for name in ("a", "b", "c")]

    agent = Agent(name="flaky", run=run, retry=RetryPolicy(attempts=3, base_s=0.001, cap_s=0.001))
    registry = registry_of(agent)
    parent = start_and_work(store, registry, "flaky", {})
    assert parent.status == "succeeded"
    assert store.conn.execute("SELECT attempts FROM journal WHERE run_id = ? ORDER BY position",
                              (parent.run_id,)).fetchall() == [(2,), (2,), (2,)]
    fork = work(store, registry, operate.fork(store, parent.run_id, 1))
    assert fork.status == "succeeded"
    calls = dict(failures)
    for run_id in (parent.run_id, fork.run_id):
        assert replay(store.path, run_id, agents=[agent]).reproduced
    assert dict(failures) == calls, "a replayed step ran its function"


def test_a_failed_run_reproduces_when_the_code_fails_at_the_same_call(store):
    def run(ctx, request):
        ctx.step("a", lambda: 1)
        ctx.step("boom", lambda: 1 / 0)

    agent = Agent(name="failing", run=run)
    outcome = start_and_work(store, registry_of(agent), "failing", {})
    assert outcome.status == "failed"
    done = replay_run(store.path, registry_of(agent), outcome.run_id)
    assert done.reproduced and done.note == "the code reached #1 boom, where the run failed"

    def fixed(ctx, request):
        ctx.step("a", lambda: 1)
        return ctx.step("safe", lambda: 1)

    d = replay_run(store.path, registry_of(Agent(name="failing", run=fixed)), outcome.run_id).divergence
    assert (d.kind, d.position, d.recorded, d.name) == ("name", 1, "boom", "safe")


def test_the_last_finished_runs_of_an_agent(store):
    first, second = _recorded(store, _asker()), _recorded(store, _asker(), {"thing": "a rope"})
    done = replay_last(store.path, registry_of(_asker()), "asker", 5)
    assert [r.run_id for r in done] == [second, first] and all(r.reproduced for r in done)
    assert [r.run_id for r in replay_last(store.path, registry_of(_asker()), "asker", 1)] == [second]


# -- the command line ----------------------------------------------------------------------------------------

AGENT_FILE = '''
from tui_agent import Agent

def run(ctx, request):
    ctx.step("a", lambda: 1)
    ctx.step({second!r}, lambda: 2)
    return {{"done": True}}

asker = Agent(name="filed", run=run)
'''


def _filed(tmp_path, second: str, name: str) -> str:
    path = tmp_path / name
    path.write_text(AGENT_FILE.format(second=second))
    return str(path)


def test_the_command_exits_0_1_or_2_and_prints_json(tmp_path, tui_agent):
    db = str(tmp_path / "cli.db")
    v1 = _filed(tmp_path, "b", "agents_v1.py")
    started = tui_agent("--db", db, "--agents", v1, "run", "filed")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(tui_agent("--db", db, "ls", "--json").stdout)[0]["id"]

    same = tui_agent("--db", db, "replay", run_id, "--agents", v1)
    assert same.returncode == 0, same.stderr
    assert same.stdout == f"{run_id} filed: reproduced (2 of 2 entries; the code returned the recorded result)\n"

    v2 = _filed(tmp_path, "b-renamed", "agents_v2.py")
    changed = tui_agent("--db", db, "replay", run_id, "--agents", v2, "--json")
    assert changed.returncode == 1, changed.stderr
    shown = json.loads(changed.stdout)
    assert shown["reproduced"] is False
    assert shown["divergence"] == {"position": 1, "kind": "name", "recorded": "b", "name": "b-renamed",
                                   "message": "#1: the journal holds 'b' here, the code now calls 'b-renamed'",
                                   "diff": []}

    last = tui_agent("--db", db, "replay", "--agent", "filed", "--last", "3", "--agents", v2)
    assert last.returncode == 1 and last.stdout.startswith(f"{run_id} filed: DIVERGED at #1 (name)")

    for args, says in ((("nope",), "no run has an id starting with 'nope'"),
                       ((), "give a RUN, or --agent NAME --last N"),
                       (("--agent", "filed"), "give a RUN, or --agent NAME --last N"),
                       ((run_id,), "no agent named 'filed'"),
                       (("--agent", "ghost", "--last", "1"), "no agent named 'ghost'")):
        bad = tui_agent("--db", db, "replay", *args)
        assert bad.returncode == 2, (args, bad.stderr)
        assert bad.stderr.count("\n") == 1 and says in bad.stderr, (args, bad.stderr)


def test_code_that_writes_on_its_own_is_stopped_and_the_database_is_only_read(store):
    def run(ctx, request):
        ctx.step("a", lambda: 1)
        ctx.start_run("helper", {})   # outside a step: each resume would start another
        return {}

    registry = registry_of(Agent(name="starter", run=run), Agent(name="helper", run=lambda ctx, request: {}))
    outcome = start_and_work(store, registry, "starter", {})
    before = dump(store.path)
    d = replay_run(store.path, registry, outcome.run_id).divergence
    assert (d.kind, d.position) == ("side-effect", 1)
    assert "starts a run of 'helper' outside a step" in d.message
    assert dump(store.path) == before
