"""A run whose worker is verifiably gone moves at once (store/holders.py): on the same host, once the worker's
process is gone (pid and start time) and nothing is left of its process group (what is left is killed first), a
claim takes the run without waiting for its lease. A paused worker, a worker on another host, an older worker's
row and a worker that shared another program's process group still wait for the lease; and while a run waits so,
every surface says who holds it and for how long."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ok, open_run, process_state, select, show_json, strip, tui, until

from tui_agent.runtime.clock import now, parse_instant
from tui_agent.store import open_store
from tui_agent.store.host import process_alive, process_start, this_host
from tui_agent.store.runs import claim_next, claim_run, create_run, events_for, get_run
from tui_agent.store.workers import register

AGENTS = ["--agents", "takeover_agents"]
COUNTING = ["--agents", "counting_agents"]


def _json(invoke, *args, agents=AGENTS):
    done = invoke(*agents, *args, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _start(invoke, agents, agent: str, request: dict) -> str:
    done = invoke(*agents, "start", agent, "--input", json.dumps(request))
    assert done.exit_code == 0, done.output
    return done.stdout.strip()


def _registered(invoke, name: str) -> bool:
    done = invoke("workers", "--json")
    return done.exit_code == 0 and any(w["name"] == name and w["stopped_at"] is None for w in json.loads(done.stdout))


def _pids(pidfile: Path) -> list[int]:
    return [int(line) for line in pidfile.read_text().split()] if pidfile.exists() else []


def _output(tmp_path, proc) -> str:
    return (tmp_path / f"{proc.label}.err").read_text()[-1500:]


# -- kill -9 of a worker: the run moves at once --------------------------------------------------


def test_a_killed_workers_run_moves_to_a_worker_on_the_same_host_at_once_and_its_stepss_child_is_killed_first(
        invoke, spawn, tmp_path, database):
    pidfile = tmp_path / "children"
    run_id = _start(invoke, AGENTS, "with-child", {"pidfile": str(pidfile), "first_s": 60, "later_s": 0.1})
    a = spawn(*AGENTS, "worker", "--name", "w-a", label="w-a", own_group=True)   # the default lease: 60 s
    until("w-a's step to start its child", lambda: _pids(pidfile), deadline_s=30, why=lambda: _output(tmp_path, a))
    [child] = _pids(pidfile)
    child_started = process_start(child)
    b = spawn(*AGENTS, "worker", "--name", "w-b", label="w-b")
    until("w-b to register", lambda: _registered(invoke, "w-b"), deadline_s=30)

    killed_at = time.time()
    a.send_signal(signal.SIGKILL)
    a.wait(timeout=10)
    assert process_alive(child, child_started), "kill -9 of the worker leaves its step's child running"

    def taken_over():
        events = [e for e in _json(invoke, "show", run_id)["events"] if e["kind"] == "takeover"]
        return events[0] if events else None

    takeover = until("w-b's takeover", taken_over, deadline_s=30, why=lambda: _output(tmp_path, b))
    took_s = parse_instant(takeover["at"]) - killed_at
    assert takeover["message"] == (f"w-a: its process {a.pid} is gone from this host; killed what was left of its "
                                   f"process group {a.pid} (1 process); claimed by w-b (attempt 2, fence 2)")
    assert not process_alive(child, child_started), "the child was killed before the run was taken over"
    assert took_s < 1.0, f"from kill -9 to the takeover took {took_s:.2f} s (the goal: under 1 s, lease 60 s)"

    def succeeded():
        report = _json(invoke, "show", run_id)
        return report if report["run"]["status"] == "succeeded" else None

    report = until("w-b to finish the run", succeeded, deadline_s=30, why=lambda: _output(tmp_path, b))
    assert [(e["name"], e["fence"]) for e in report["journal"]] == [("first", 1), ("child", 2)]
    assert len(_pids(pidfile)) == 2, "the step ran again under w-b, once"
    b.send_signal(signal.SIGTERM)
    b.wait(timeout=15)


def test_kill_9_of_tui_agent_run_then_resume_and_worker_once_work_it_at_once(tui_agent, spawn, tmp_path):
    log = tmp_path / "calls.log"
    request = json.dumps({"log": str(log), "steps": 4, "delay_s": 1.5})
    run = spawn(*COUNTING, "run", "counting", "--input", request, label="run", own_group=True)
    until("`run` to record a step", lambda: log.exists() and len(log.read_text().split()) >= 2, deadline_s=30,
          why=lambda: _output(tmp_path, run))
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=10)
    [run_id] = [r["id"] for r in json.loads(tui_agent("ls", "--json").stdout)]
    listed = json.loads(tui_agent("ls", "--json").stdout)[0]
    assert (listed["status"], listed["holder_gone"], listed["claimable_in_s"]) == ("running", True, 0.0), listed

    resumed = tui_agent("resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == f"{run_id}: resumed; a worker will pick it up"
    worked = tui_agent(*COUNTING, "worker", "--once")
    assert worked.returncode == 0, worked.stderr
    assert worked.stdout.splitlines()[0] == f"{run_id} succeeded (check_passed)"
    report = json.loads(tui_agent("show", run_id, "--json").stdout)
    [queued] = [e for e in report["events"] if e["message"].startswith("resumed by ")]
    holder = report["events"][1]["worker"]
    assert queued["message"].endswith(f": {holder}: its process {run.pid} is gone from this host and nothing is "
                                      "left of its process group"), queued["message"]
    assert (report["run"]["attempt"], report["run"]["holder_gone"], report["run"]["claimable_in_s"]) == (2, None, None)


# -- what still waits for the lease --------------------------------------------------------------


def test_a_paused_worker_keeps_its_run_until_its_lease_ends(invoke, spawn, tmp_path):
    log = tmp_path / "calls.log"
    run_id = _start(invoke, COUNTING, "counting", {"log": str(log), "steps": 6, "delay_s": 0.5})
    a = spawn(*COUNTING, "worker", "--lease", "5", "--name", "w-a", label="w-a", own_group=True,
              env={"TUI_AGENT_PAUSE_AT": "after-step-commit:2"})   # SIGSTOP, by itself, outside a transaction
    until("w-a to stop", lambda: process_state(a.pid) == "T", deadline_s=30, why=lambda: _output(tmp_path, a))
    b = spawn(*COUNTING, "worker", "--lease", "5", "--name", "w-b", label="w-b")
    until("w-b to register", lambda: _registered(invoke, "w-b"), deadline_s=30)
    held = _json(invoke, "show", run_id, agents=COUNTING)["run"]
    assert (held["status"], held["worker"], held["holder_gone"]) == ("running", "w-a", False), "stopped is not gone"
    expiry = parse_instant(held["lease_expires_at"])
    assert time.time() < expiry, "w-b was ready while w-a's lease still ran"

    def taken_over():
        events = [e for e in _json(invoke, "show", run_id, agents=COUNTING)["events"] if e["kind"] == "takeover"]
        return events[0] if events else None

    takeover = until("w-b's takeover", taken_over, deadline_s=30, why=lambda: _output(tmp_path, b))
    assert takeover["message"] == "lease of w-a expired; claimed by w-b (attempt 2, fence 2)"
    assert parse_instant(takeover["at"]) >= expiry - 0.002, "not taken before the paused worker's lease ended"
    a.send_signal(signal.SIGCONT)
    until("w-a to find its write refused", lambda: f"{run_id} was taken by another worker" in
          (tmp_path / "w-a.out").read_text(), deadline_s=15, why=lambda: _output(tmp_path, a))


def _running(store, agent="counting") -> str:
    run_id, _ = create_run(store, now=now(), agent=agent, agent_version="1", code_version="c", request="{}",
                           budget="{}", model="scripted")
    return run_id


@pytest.fixture
def sleeper():
    """A live process leading its own process group, whose pid a worker row can name."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_holder_whose_pid_was_reused_is_alive_only_while_the_start_time_matches(store, sleeper):
    register(store, "w-old", pid=sleeper.pid, host=this_host(), concurrency=1, lease_s=60.0, now=now())
    run_id = _running(store)
    assert claim_run(store, run_id, "w-old", 60.0, now()) is not None
    assert claim_next(store, "w-new", lease_s=60.0, agents=["counting"], now=now) is None, \
        "the same pid and start time: it lives"

    with store.write() as conn:   # the pid is now another process's: one that started at another time
        conn.execute("UPDATE workers SET pid_started = pid_started - 1 WHERE name = 'w-old'")
    claim = claim_next(store, "w-new", lease_s=60.0, agents=["counting"], now=now)
    assert (claim.run_id, claim.attempt, claim.fence) == (run_id, 2, 2)
    [takeover] = [e for e in events_for(store, run_id) if e["kind"] == "takeover"]
    assert takeover["message"] == (f"w-old: its process {sleeper.pid} is gone from this host (pid {sleeper.pid} is "
                                   "another process's now) and nothing is left of its process group; claimed by "
                                   "w-new (attempt 2, fence 2)")
    assert sleeper.poll() is None, "the process that now has the pid, and its group, were not killed"


def _ended() -> int:
    """The pid of a process that has ended (it was in this test's process group, as a script's child is)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _held_by_a_sharer(store, name: str = "w-shared") -> str:
    """A run held, with a live 60 s lease, by a worker of this host whose process is gone but who shared this
    test's process group (a script's child, not its group's leader): its group still has this process in it."""
    register(store, name, pid=_ended(), host=this_host(), concurrency=1, lease_s=60.0, now=now())
    with store.write() as conn:
        conn.execute("UPDATE workers SET pid_started = 1, pgid = ? WHERE name = ?", (os.getpgrp(), name))
    run_id = _running(store)
    assert claim_run(store, run_id, name, 60.0, now()) is not None
    return run_id


def test_another_host_an_older_row_and_a_shared_process_group_wait_for_the_lease(store):
    runs = {"w-shared": _held_by_a_sharer(store)}
    register(store, "w-far", pid=_ended(), host="another-machine", concurrency=1, lease_s=60.0, now=now())
    register(store, "w-older", pid=_ended(), host=this_host(), concurrency=1, lease_s=60.0, now=now())
    with store.write() as conn:   # as verifiable as can be but for its host; and what an older tui-agent wrote
        conn.execute("UPDATE workers SET pid_started = 1, pgid = pid WHERE name = 'w-far'")
        conn.execute("UPDATE workers SET host_id = NULL, pgid = NULL, pid_started = 1 WHERE name = 'w-older'")
    for name in ("w-far", "w-older"):
        runs[name] = _running(store)
        assert claim_run(store, runs[name], name, 60.0, now()) is not None
    assert claim_next(store, "w-new", lease_s=60.0, agents=["counting"], now=now) is None
    for name, run_id in runs.items():
        assert (get_run(store, run_id)["worker"], get_run(store, run_id)["attempt"]) == (name, 1)


# -- every surface says who holds it and for how long ---------------------------------------------


CLAIMABLE = r"claimable in \d+ s"   # what is left of a 60 s lease


async def test_a_run_held_by_a_gone_worker_that_cannot_be_taken_yet_says_so_everywhere(tui_agent, db_path):
    store = open_store(db_path)
    run_id = _held_by_a_sharer(store, "w-gone")
    store.close()

    listed = json.loads(ok(tui_agent("ls", "--json")).stdout)[0]
    assert (listed["holder_gone"], listed["worker"]) == (True, "w-gone")
    assert 0 < listed["claimable_in_s"] <= 60, listed
    assert re.search(rf"  w-gone, gone; {CLAIMABLE}  ", ok(tui_agent("ls")).stdout)
    assert re.search(rf"^worker    held by w-gone, gone; {CLAIMABLE}$", ok(tui_agent("show", run_id)).stdout, re.M)
    shown = show_json(tui_agent, run_id)["run"]
    assert shown["holder_gone"] is True and 0 < shown["claimable_in_s"] <= 60, shown

    before = {k: shown[k] for k in ("status", "worker", "fence", "attempt", "lease_expires_at")}
    refused = ok(tui_agent("resume", run_id), 2)
    assert re.fullmatch(rf"tui-agent: {run_id} is running since [\d:]+ \(claimed by w-gone \(attempt 1, fence 1\)\); "
                        rf"it is held by w-gone, gone; {CLAIMABLE} \(then a worker takes it over\); nothing changed\n",
                        refused.stderr), refused.stderr
    assert {k: show_json(tui_agent, run_id)["run"][k] for k in before} == before, "the refusal changed nothing"
    once = ok(tui_agent(*COUNTING, "worker", "--once", "--name", "w-once"))
    assert re.search(rf"^w-once: {run_id} \(counting\) is held by w-gone, gone; {CLAIMABLE}; run worker --once "
                     "again then$", once.stderr, re.M), once.stderr
    assert re.search(rf"{run_id} counting \({CLAIMABLE}, fence 1\)", ok(tui_agent("workers")).stdout)

    async with tui(db_path) as (app, pilot):
        await select(pilot, run_id)
        assert re.search(rf"held by w-gone, gone; {CLAIMABLE} · step 0 · attempt 1\na worker takes it over then",
                         strip(app)), strip(app)
        screen = await open_run(app, pilot, run_id)
        assert re.search(rf" · held by w-gone, gone; {CLAIMABLE} · ", str(screen.query_one("#run-header").render()))


def test_workers_never_shows_a_negative_lease(tui_agent, db_path, sleeper):
    store = open_store(db_path)
    register(store, "w-late", pid=sleeper.pid, host=this_host(), concurrency=1, lease_s=0.1,
             now=now())   # alive: its lease is not renewed here
    run_id = _running(store)
    assert claim_run(store, run_id, "w-late", 0.1, now()) is not None
    store.close()
    time.sleep(0.3)
    [late] = json.loads(ok(tui_agent("workers", "--json")).stdout)
    assert [(r["id"], r["lease_left_s"], r["claimable_in_s"]) for r in late["runs"]] == [(run_id, 0.0, 0.0)]
    assert f"{run_id} counting (lease expired, claimable now, fence 1)" in ok(tui_agent("workers")).stdout
