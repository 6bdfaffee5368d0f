"""Durability with real processes: a worker killed at each crash point, and at random
moments, is followed by a fresh `worker --once`; no recorded step's function runs twice."""

import json
import random
import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT, later, ran_steps, show_json, until

from tui_agent.store import open_store

AGENTS = ["--agents", "counting_agents"]


def _start(tui_agent, log, steps=4, delay_s=0.0):
    done = tui_agent(*AGENTS, "start", "counting", "--input",
                     json.dumps({"log": str(log), "steps": steps, "delay_s": delay_s}))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("point, expected", [
    ("before-step", {"s0": 1, "s1": 1, "s2": 1, "s3": 1}),
    # the step's function returned but its result was not committed: it is the one that runs again
    ("after-step", {"s0": 1, "s1": 1, "s2": 2, "s3": 1}),
    ("after-step-commit", {"s0": 1, "s1": 1, "s2": 1, "s3": 1}),
])
def test_a_worker_killed_at_a_crash_point_resumes_without_rerunning_recorded_steps(tui_agent, tmp_path, database,
                                                                                   point, expected):
    log = tmp_path / "calls.log"
    run_id = _start(tui_agent, log)
    crashed = tui_agent(*AGENTS, "worker", "--once", "--lease", "5", "--name", "w-1",
                        env={"TUI_AGENT_CRASH_AT": f"{point}:3"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["worker"], report["run"]["attempt"]) == ("running", "w-1", 1)
    recorded_by_first = [e["name"] for e in report["journal"]]
    assert recorded_by_first == (["s0", "s1", "s2"] if point == "after-step-commit" else ["s0", "s1"])

    too_early = tui_agent(*AGENTS, "worker", "--once", "--lease", "5", "--name", "w-2")
    assert too_early.returncode == 0
    assert "no run is due" in too_early.stderr
    assert show_json(tui_agent, run_id, *AGENTS)["run"]["attempt"] == 1

    resumed = tui_agent(*AGENTS, "worker", "--once", "--lease", "5", "--name", "w-2",
                        env=_past_the_lease(database, run_id))
    assert resumed.returncode == 0, resumed.stderr
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["reason"], report["run"]["attempt"]) == (
        "succeeded", "check_passed", 2)
    assert dict(ran_steps(log)) == expected
    assert [e["position"] for e in report["journal"]] == [0, 1, 2, 3]
    assert [e["fence"] for e in report["journal"]] == [1] * len(recorded_by_first) + [2] * (
        4 - len(recorded_by_first))
    messages = [e["message"] for e in report["events"]]
    assert "lease of w-1 expired; claimed by w-2 (attempt 2, fence 2)" in messages


def _past_the_lease(database, run_id: str) -> dict:
    """The environment of a worker for which the killed worker's lease has ended: on SQLite a clock 10 s
    ahead; PostgreSQL judges leases by the server's clock, which no process can move, so wait it out."""
    if not isinstance(database, str):
        return {"TUI_AGENT_NOW": later(10)}
    store = open_store(database)
    try:
        until("the lease to end by the server's clock", lambda: store.conn.execute(
            "SELECT lease_expires_at < extract(epoch from clock_timestamp()) FROM runs WHERE id = ?",
            (run_id,)).fetchone()[0], deadline_s=15, every_s=0.1)
    finally:
        store.close()
    return {}


# A kill at a random moment adds nothing on PostgreSQL beyond the crash points above and test_pg_workers.py.
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_worker_killed_at_a_random_moment_resumes_cleanly(tui_agent, tmp_path, db_path, seed):
    log = tmp_path / "calls.log"
    steps = 30
    run_id = _start(tui_agent, log, steps=steps, delay_s=0.01)
    worker = subprocess.Popen([sys.executable, "-m", "tui_agent", *AGENTS, "worker", "--once", "--lease", "5"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(random.Random(seed).uniform(0.0, 0.25))
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    recorded = len(show_json(tui_agent, run_id, *AGENTS)["journal"])

    resumed = tui_agent(*AGENTS, "worker", "--once", "--lease", "5", env={"TUI_AGENT_NOW": later(10)})
    assert resumed.returncode == 0, resumed.stderr
    report = show_json(tui_agent, run_id, *AGENTS)
    assert report["run"]["status"] == "succeeded"
    assert [e["position"] for e in report["journal"]] == list(range(steps))
    ran = ran_steps(log)
    assert recorded < steps, "the kill must land mid-run"
    assert set(ran) == {f"s{i}" for i in range(steps)}
    # only the step in flight when the kill came (the first one not recorded) may have run twice
    assert [name for name, n in ran.items() if n > 1] in ([], [f"s{recorded}"])
    assert max(ran.values()) <= 2


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl-c", "sigterm", "hang-up"])
def test_ctrl_c_sigterm_or_a_closed_terminal_on_run_hands_the_run_back_at_once(tui_agent, tmp_path, how):
    log = tmp_path / "calls.log"
    command = [sys.executable, "-m", "tui_agent", *AGENTS, "run", "counting", "--input",
               json.dumps({"log": str(log), "steps": 6, "delay_s": 0.3})]
    running = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(ran_steps(log)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    running.send_signal(how)
    out, err = running.communicate(timeout=30)
    assert running.returncode == 3, (running.returncode, err)
    assert "interrupted; it is queued again" in out
    run_id = out.split()[0]
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["reason"], report["run"]["worker"]) == ("queued", "resumed", None)
    done = tui_agent(*AGENTS, "worker", "--once")          # no clock trick: claimable at once
    assert done.returncode == 0
    assert show_json(tui_agent, run_id, *AGENTS)["run"]["status"] == "succeeded"
    assert max(ran_steps(log).values()) <= 2
    assert sum(1 for n in ran_steps(log).values() if n == 2) <= 1


def test_a_closed_terminal_stops_a_worker_cleanly_and_it_says_so_at_once(tui_agent, tmp_path):
    log = tmp_path / "calls.log"
    run_id = _start(tui_agent, log, steps=40, delay_s=0.2)
    command = [sys.executable, "-m", "tui_agent", *AGENTS, "worker", "--name", "w-hup"]
    worker = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    until("two steps to run", lambda: len(ran_steps(log)) >= 2)
    worker.send_signal(signal.SIGHUP)
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, (worker.returncode, err)
    assert ("tui-agent: w-hup: stopping once its run finishes the current step (up to 30s); what is left goes back "
            "to the queue") in err, err
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["worker"]) == ("queued", None), report["run"]
    assert len(report["journal"]) < 40
    assert max(ran_steps(log).values()) == 1   # the step in hand finished and was recorded: none runs twice
