"""Never silent, never stranded (issue 37): a run started with `--model scripted:FILE` keeps the script's replies,
so a worker in another folder (or on another machine) answers from them; a run whose model or agent the worker
that claimed it cannot set up is parked with reason `environment`, naming what is missing, never left claimed.
Real processes, each in the folder it is started from."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures import stranded_agents
from helpers import changed, ok, registry_of, select, strip, tui, until

from tui_agent import operate
from tui_agent.runtime import strangers
from tui_agent.runtime.clock import now
from tui_agent.store.host import this_host
from tui_agent.store.runs import claim_run, due_of_others
from tui_agent.store.workers import register

AGENTS = ["--agents", "stranded_agents"]


def cli(folder: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`tui-agent ARGS` in a process started in `folder` (the database is TUI_AGENT_DB's, absolute)."""
    return subprocess.run([sys.executable, "-m", "tui_agent", *args], capture_output=True, text=True, cwd=folder,
                          env=dict(os.environ), timeout=timeout)


def folders(tmp_path: Path) -> tuple[Path, Path]:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    return here, elsewhere


def report(folder: Path, run_id: str) -> dict:
    return json.loads(ok(cli(folder, "show", run_id, "--json")).stdout)


def test_a_relative_script_started_in_one_folder_is_answered_from_by_a_worker_in_another(tmp_path):
    here, elsewhere = folders(tmp_path)
    (here / "replies.json").write_text(json.dumps(["from the script"]))
    run_id = ok(cli(here, *AGENTS, "start", "asking-model", "--model", "scripted:replies.json")).stdout.strip()
    (here / "replies.json").unlink()   # nor does the worker need the file where it was: the run keeps the replies

    done = ok(cli(elsewhere, *AGENTS, "worker", "--once"))
    assert f"{run_id} succeeded" in done.stdout, done.stderr
    shown = report(elsewhere, run_id)
    assert shown["run"]["result"] == {"said": "from the script"}
    assert shown["run"]["model"] == "scripted:replies.json" and shown["run"]["script"] == ["from the script"]


def _as_stored(db: Path, run_id: str, **columns: str | None) -> None:
    """The run's row as an older (or newer) tui-agent left it."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for column, value in columns.items():
            conn.execute(f"UPDATE runs SET {column} = ? WHERE id = ?", (value, run_id))
    finally:
        conn.close()


@pytest.mark.parametrize("stored, says", [
    ({"script": None}, "scripted:replies.json: no such file (looked for {elsewhere}/replies.json)"),   # an older start
    ({"model": "openai:gpt-9", "script": None}, "unknown model provider 'openai:gpt-9'"),              # a newer start
], ids=["script-file-missing", "provider-unknown"])
def test_a_model_the_worker_cannot_set_up_parks_the_run_environment_and_leaves_it_unclaimed(tmp_path, stored, says):
    here, elsewhere = folders(tmp_path)
    (here / "replies.json").write_text(json.dumps(["from the script"]))
    run_id = ok(cli(here, *AGENTS, "start", "asking-model", "--model", "scripted:replies.json")).stdout.strip()
    _as_stored(Path(os.environ["TUI_AGENT_DB"]), run_id, **stored)

    done = ok(cli(elsewhere, *AGENTS, "worker", "--once"))
    says = says.format(elsewhere=elsewhere)
    assert f"{run_id} parked (environment): parked: worker " in done.stdout, (done.stdout, done.stderr)
    assert says in done.stdout and f"then tui-agent resume {run_id}" in done.stdout
    assert "Traceback" not in done.stderr
    shown = report(elsewhere, run_id)
    assert (shown["run"]["status"], shown["run"]["reason"]) == ("parked", "environment")
    held = json.loads(ok(cli(elsewhere, "workers", "--all", "--json")).stdout)
    assert all(not worker["runs"] for worker in held)     # not left claimed: no worker holds it
    assert says in shown["events"][-1]["message"]

    if "script" in stored and "model" not in stored:      # the advice followed: the file where the worker runs
        (elsewhere / "replies.json").write_text(json.dumps(["found here"]))
        ok(cli(elsewhere, "resume", run_id))
        assert f"{run_id} succeeded" in ok(cli(elsewhere, *AGENTS, "worker", "--once")).stdout
        assert report(elsewhere, run_id)["run"]["result"] == {"said": "found here"}


def test_a_schedule_keeps_its_script_so_a_fire_in_another_folder_runs_on_it(tmp_path):
    here, elsewhere = folders(tmp_path)
    (here / "replies.json").write_text(json.dumps(["scheduled reply"]))
    ok(cli(here, *AGENTS, "schedule", "add", "daily", "--agent", "asking-model", "--cron", "0 2 * * *",
           "--model", "scripted:replies.json"))
    (here / "replies.json").unlink()

    run_id = ok(cli(elsewhere, *AGENTS, "schedule", "fire", "daily")).stdout.strip()
    assert f"{run_id} succeeded" in ok(cli(elsewhere, *AGENTS, "worker", "--once")).stdout
    assert report(elsewhere, run_id)["run"]["result"] == {"said": "scheduled reply"}


def test_a_schedule_whose_script_file_is_gone_is_disabled_saying_so_and_the_others_fire(tmp_path):
    """A schedule added before the replies were kept with it reads its `scripted:FILE` at each fire: the file gone
    (or a worker in another folder) disables that schedule with an event, and tick and the worker go on."""
    here, elsewhere = folders(tmp_path)
    (here / "replies.json").write_text(json.dumps(["scheduled reply"]))
    ok(cli(here, *AGENTS, "schedule", "add", "daily", "--agent", "asking-model", "--cron", "0 2 * * *",
           "--model", "scripted:replies.json"))
    ok(cli(here, "schedule", "add", "hi", "--agent", "hello", "--cron", "0 2 * * *"))
    with sqlite3.connect(os.environ["TUI_AGENT_DB"]) as conn:   # as a tui-agent before schema 13 kept it, both due
        conn.execute("UPDATE schedules SET script = NULL, next_fire_at = 0, counts_from = 0")

    ticked = ok(cli(elsewhere, *AGENTS, "tick", "--work"))
    assert "Traceback" not in ticked.stderr, ticked.stderr
    listed = {s["name"]: s for s in json.loads(ok(cli(here, "schedule", "ls", "--json")).stdout)}
    assert (listed["daily"]["enabled"], listed["hi"]["enabled"]) == (False, True)
    with sqlite3.connect(os.environ["TUI_AGENT_DB"]) as conn:
        said = conn.execute("SELECT message FROM events WHERE schedule = 'daily' AND kind = 'disabled'").fetchall()
        fired = conn.execute("SELECT count(*) FROM events WHERE schedule = 'hi' AND kind = 'fired'").fetchone()[0]
    [(message,)] = said
    assert "replies.json" in message and "tui-agent schedule enable daily" in message, message
    assert fired == 1


# -- never silent: due runs of an agent this worker does not know ---------------------------------------------------

STRANGER = "2 queued runs of 'triage', which this worker does not know: start it with --agents MODULE"


def test_worker_once_without_the_agents_module_says_so_once_per_agent_works_the_rest_and_exits_4(tmp_path):
    here = tmp_path
    triage = [ok(cli(here, *AGENTS, "start", "triage")).stdout.strip() for _ in range(2)]
    hello = ok(cli(here, "start", "hello", "--input", '{"delay_s": 0}')).stdout.strip()

    done = ok(cli(here, "worker", "--once", "--name", "w-plain"), 4)
    assert f"{hello} succeeded" in done.stdout
    assert done.stderr.splitlines().count(f"tui-agent: w-plain: {STRANGER}") == 1, done.stderr
    assert "no run is due" not in done.stderr
    assert {report(here, r)["run"]["status"] for r in triage} == {"queued"}
    ticked = ok(cli(here, "tick", "--work"), 4)              # a timer's tick says it the same way
    assert STRANGER in ticked.stderr and "no run is due" not in ticked.stderr
    [row] = [w for w in json.loads(ok(cli(here, "workers", "--all", "--json")).stdout) if w["name"] == "w-plain"]
    assert "hello" in row["agents"] and "triage" not in row["agents"]

    again = ok(cli(here, *AGENTS, "worker", "--once"))     # the module given: worked, exit 0
    assert all(f"{r} succeeded" in again.stdout for r in triage) and "does not know" not in again.stderr
    assert ok(cli(here, "worker", "--once")).stderr.strip().endswith("no run is due")   # nothing left: 0


def test_a_long_running_worker_says_it_once_and_keeps_working_what_it_knows(spawn, tmp_path):
    for _ in range(2):
        ok(cli(tmp_path, *AGENTS, "start", "triage"))
    worker = spawn("worker", "--name", "w-long", "--lease", "1", label="w-long")
    err = tmp_path / "w-long.err"
    until("the worker to say what it leaves", lambda: STRANGER in err.read_text(), why=lambda: err.read_text())
    hello = ok(cli(tmp_path, "start", "hello", "--input", '{"delay_s": 0}')).stdout.strip()
    until("the worker to work the run it knows", lambda: report(tmp_path, hello)["run"]["status"] == "succeeded")
    ok(cli(tmp_path, *AGENTS, "start", "triage"))            # a third: the agent was said already
    time.sleep(strangers.LOOK_EVERY_S + 1.5)                  # it looked again since
    assert worker.poll() is None
    assert err.read_text().count("does not know") == 1, err.read_text()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0


async def test_the_runs_strip_says_no_running_worker_knows_the_agent(store):
    triage, _ = operate.start(store, registry_of(stranded_agents.TRIAGE), agent_name="triage", request={})
    async with tui(store.path) as (app, pilot):
        register(app.store, "w-plain", pid=os.getpid(), host=this_host(), concurrency=1, lease_s=60.0, now=now(),
                 agents=["hello"])   # alive: us
        await changed(pilot)
        await pilot.pause()
        await select(pilot, triage)
        assert "no running worker knows agent 'triage': start one with --agents MODULE" in strip(app)
        assert "will claim" not in strip(app)
        register(app.store, "w-older", pid=os.getpid(), host=this_host(), concurrency=1, lease_s=60.0,
                 now=now())   # an older worker's row: any agent
        await changed(pilot)
        await pilot.pause()
        assert "a worker will claim it" in strip(app) and "no running worker knows" not in strip(app)


def test_due_runs_of_other_agents_are_counted_on_each_store(store):
    registry = registry_of(stranded_agents.TRIAGE)
    for _ in range(2):
        operate.start(store, registry, agent_name="triage", request={})
    triage = operate.start(store, registry, agent_name="triage", request={})[0]
    assert claim_run(store, triage, "w-gone", 0.05, now()) is not None
    time.sleep(0.2)                       # its lease ran out: due again, but not queued
    assert due_of_others(store, ["hello"], now()) == [("triage", 3, 2)]
    assert due_of_others(store, ["hello", "triage"], now()) == []
    assert strangers.line("w-1", "triage", 3, 2) == ("tui-agent: w-1: 3 due runs of 'triage', which this worker does "
                                                     "not know: start it with --agents MODULE")
