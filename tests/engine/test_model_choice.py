"""Which provider and which model a run's calls go to: `--model default` resolved by the worker at the
first model call, the model id's precedence, `--model` on schedules, and nightly-report on Claude.

Claude is always the fake Messages API on 127.0.0.1 (tests/fake_messages.py), never the real one.
"""

from __future__ import annotations

import json
from pathlib import Path

from fake_messages import DUMMY_KEY, message
from helpers import registry_of, work

from tui_agent import Agent, demo, operate
from tui_agent.agents.nightly_report import script
from tui_agent.models.anthropic import DEFAULT_MODEL
from tui_agent.runtime.registry import load_registry
from tui_agent.runtime.schedule import fire_now
from tui_agent.store import artifacts, open_store
from tui_agent.store import schedules as schedules_table
from tui_agent.store.runs import events_for, get_run


def _asks(model: str | None = None):
    """An agent with no built-in script that makes one model call, passing `model=` when given."""
    def run(ctx, request):
        reply = ctx.model("ask", messages=[{"role": "user", "content": "hi"}], max_tokens=16, model=model)
        return {"text": reply["content"][0]["text"], "model": reply["model"]}

    return registry_of(Agent(name="asks", run=run))


# -- default ----------------------------------------------------------------------------------------


def test_a_run_started_without_a_model_records_default(store, invoke):
    run_id, _ = operate.start(store, load_registry(), agent_name="hello", request={"name": "Ada"})
    assert get_run(store, run_id)["model"] == "default"
    started = invoke("start", "hello", "--input", '{"name": "Ada"}')
    assert get_run(store, started.stdout.strip())["model"] == "default"


def test_an_agent_that_never_calls_a_model_needs_neither_key_nor_script(store):
    registry = load_registry()
    run_id, _ = operate.start(store, registry, agent_name="hello", request={"name": "Ada"})
    assert work(store, registry, run_id).status == "succeeded"
    assert get_run(store, run_id)["model"] == "default"  # nothing was resolved: no call asked for it


def test_default_with_a_key_is_claude_and_is_recorded_on_the_run(fake, store):
    registry = _asks()
    fake.play({"body": message("from claude")})
    run_id, _ = operate.start(store, registry, agent_name="asks", request={})
    outcome = work(store, registry, run_id)
    assert outcome.status == "succeeded"
    assert outcome.result["text"] == "from claude"
    assert get_run(store, run_id)["model"] == "anthropic"
    assert "--model default resolved to anthropic" in [e["message"] for e in events_for(store, run_id)]
    assert len(fake.requests) == 1


def test_default_without_a_key_is_the_built_in_script(store, tmp_path):
    registry = load_registry()
    run_id, _ = operate.start(store, registry, agent_name="nightly-report",
                              request={"date": "2026-11-29", "team": "ops"})
    outcome = work(store, registry, run_id)
    assert outcome.status == "succeeded"
    assert get_run(store, run_id)["model"] == "scripted"
    assert "--model default resolved to scripted" in [e["message"] for e in events_for(store, run_id)]
    assert artifacts.read(store, outcome.result["report"]).decode().splitlines()[2] == "Nightly summary"


def test_default_without_a_key_or_a_script_parks_naming_both_ways_out(fake, store, monkeypatch):
    registry = _asks()
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    run_id, _ = operate.start(store, registry, agent_name="asks", request={})
    parked = work(store, registry, run_id, worker="w-bare")
    assert (parked.status, parked.reason) == ("parked", "environment")
    assert "w-bare" in parked.message
    assert "set ANTHROPIC_API_KEY, or start it with --model scripted:FILE" in parked.message
    assert get_run(store, run_id)["model"] == "default"
    assert fake.requests == []
    monkeypatch.setenv("ANTHROPIC_API_KEY", DUMMY_KEY)
    fake.play({"body": message()})
    operate.resume(store, run_id)
    assert work(store, registry, run_id).status == "succeeded"
    assert get_run(store, run_id)["model"] == "anthropic"


# -- the model id of a call, highest first -------------------------------------------------------------


def test_the_schedules_pinned_model_beats_the_agents_model(fake, store):
    registry = _asks(model="claude-opus-5")
    operate.schedule_add(store, registry, name="pinned", agent="asks", cron="0 2 * * *",
                         model="anthropic:claude-haiku-4-5")
    fake.play({"body": message(model="claude-haiku-4-5")})
    run_id = fire_now(store, registry, "pinned").started[0]
    assert get_run(store, run_id)["model"] == "anthropic:claude-haiku-4-5"
    assert work(store, registry, run_id).status == "succeeded"
    assert fake.requests[0]["body"]["model"] == "claude-haiku-4-5"


def test_the_agents_model_is_sent_when_the_run_pins_none(fake, store):
    registry = _asks(model="claude-opus-5")
    fake.play({"body": message(model="claude-opus-5")})
    run_id, _ = operate.start(store, registry, agent_name="asks", request={})
    assert work(store, registry, run_id).status == "succeeded"
    assert fake.requests[0]["body"]["model"] == "claude-opus-5"


def test_the_providers_default_model_when_nobody_names_one(fake, store):
    registry = _asks()
    fake.play({"body": message()})
    run_id, _ = operate.start(store, registry, agent_name="asks", request={})
    assert work(store, registry, run_id).status == "succeeded"
    assert fake.requests[0]["body"]["model"] == DEFAULT_MODEL


# -- schedules ----------------------------------------------------------------------------------------


def test_schedule_add_keeps_its_model_and_an_older_schedule_stays_scripted(store, invoke):
    added = invoke("schedule", "add", "nightly", "--agent", "nightly-report", "--cron", "0 2 * * *",
                   "--model", "scripted")
    assert added.exit_code == 0, added.output
    plain = invoke("schedule", "add", "plain", "--agent", "nightly-report", "--cron", "0 2 * * *")
    assert plain.exit_code == 0, plain.output
    with store.write() as conn:
        assert schedules_table.get(conn, "nightly")["model"] == "scripted"
        assert schedules_table.get(conn, "plain")["model"] == "default"
        schedules_table.update(conn, "plain", model=None)  # as a schedule added before `--model` existed
    registry = load_registry()
    assert get_run(store, fire_now(store, registry, "plain").started[0])["model"] == "scripted"
    listed = {r["name"]: r["model"] for r in json.loads(invoke("schedule", "ls", "--json").stdout)}
    assert listed == {"nightly": "scripted", "plain": "scripted"}
    with store.write() as conn:
        schedules_table.update(conn, "plain", model="anthropic:claude-haiku-4-5")
    header, *lines = invoke("schedule", "ls").stdout.splitlines()
    assert header.split()[-3:] == ["MODEL", "LAST", "RUN"]
    assert [line.split()[-2] for line in lines] == ["scripted", "anthropic:claude-haiku-4-5"]  # MODEL, LAST RUN
    refused = invoke("schedule", "add", "bad", "--agent", "nightly-report", "--cron", "0 2 * * *",
                     "--model", "nonsense")
    assert refused.exit_code == 2
    assert "unknown model provider" in refused.output


# -- nightly-report on Claude ---------------------------------------------------------------------


def test_nightly_report_with_a_key_summarizes_with_claude_and_scripted_stays_offline(fake, store):
    registry = load_registry()
    fake.play({"body": message("- sales up\n- one deploy rolled back")})
    request = {"date": "2026-11-29", "team": "ops"}
    claude = work(store, registry, operate.start(store, registry, agent_name="nightly-report", request=request)[0])
    assert claude.status == "succeeded"
    report = artifacts.read(store, claude.result["report"]).decode()
    assert report.startswith("# Nightly report, ops, 2026-11-29\n\n- sales up\n- one deploy rolled back\n")
    prompt = fake.requests[0]["body"]["messages"][0]["content"]
    assert all(f"## {source} (" in prompt for source in ("sales", "incidents", "deploys"))
    assert "billing" in prompt  # the effect still sends, once
    assert Path(claude.result["email"]).exists()
    scripted = work(store, registry, operate.start(store, registry, agent_name="nightly-report",
                                                   request={**request, "team": "qa"},
                                                   model="scripted")[0])
    assert scripted.status == "succeeded"  # the key is there, and unused
    assert len(fake.requests) == 1
    offline = script([{"role": "user", "content": prompt.replace(" ops ", " qa ")}], 800, 0)
    assert artifacts.read(store, scripted.result["report"]).decode().startswith(
        f"# Nightly report, qa, 2026-11-29\n\n{offline}\n")
    assert fake.requests[0]["body"]["max_tokens"] == 800


def test_the_demo_runs_scripted_even_with_a_key(fake, tmp_path):
    db = tmp_path / "demo.db"
    demo.build(db, load_registry())
    store = open_store(db)
    try:
        assert {row[0] for row in store.conn.execute("SELECT model FROM runs")} == {"scripted"}
    finally:
        store.close()
    assert fake.requests == []  # the key in the environment was never spent
