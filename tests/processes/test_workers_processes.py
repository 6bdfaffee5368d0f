"""Long-running workers with real processes (docs/architecture.md section 7, Workers; section 1 on leases
with fences): several workers share one database without running a step twice, a paused worker's late writes
are fenced off, a SIGKILLed worker's run is taken over once its lease expires, and SIGTERM hands runs back at
once. On both stores (`database`); on PostgreSQL the server's clock judges leases, so a takeover there waits for
a lease to really run out instead of moving the next worker's clock (tests/helpers.py, `taken_over`)."""

import json
import mailbox
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import data_dir, process_state, ran_steps, taken_over, until

from tui_agent.runtime.clock import parse_instant

AGENTS = ["--agents", "counting_agents"]
BEFORE_EFFECT = ["settings", "fetch:sales", "fetch:incidents", "fetch:deploys", "summarize", "write-report"]


def _json(invoke, *args):
    """A `--json` read through the CLI, in-process (fast enough to poll with)."""
    done = invoke(*AGENTS, *args, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _start(invoke, log: Path, steps: int, delay_s: float) -> str:
    done = invoke(*AGENTS, "start", "counting", "--input",
                  json.dumps({"log": str(log), "steps": steps, "delay_s": delay_s}))
    assert done.exit_code == 0, done.output
    return done.stdout.strip()


def _at(value) -> float:
    """A time from a `--json` read as epoch seconds (`workers --json` shows heartbeat_at and stopped_at
    as epoch seconds but started_at as ISO-8601; accept both)."""
    return float(value) if isinstance(value, (int, float)) else parse_instant(value)


def _output(tmp_path, proc) -> tuple[str, str]:
    return (tmp_path / f"{proc.label}.out").read_text(), (tmp_path / f"{proc.label}.err").read_text()


def _exits(tmp_path, proc, timeout: float = 15) -> tuple[str, str]:
    proc.wait(timeout=timeout)
    out, err = _output(tmp_path, proc)
    assert proc.returncode == 0, (proc.returncode, out, err)
    return out, err


def _registered(invoke, database, names) -> bool:
    if isinstance(database, Path) and not database.exists():  # no worker has created it yet (`workers` never does)
        return False
    done = invoke(*AGENTS, "workers", "--json")
    if done.exit_code == 2 and "no tui-agent schema" in done.stderr:  # nor, on PostgreSQL, its schema
        return False
    assert done.exit_code == 0, done.output
    rows = {w["name"]: w for w in json.loads(done.stdout)}
    return all(n in rows and rows[n]["stopped_at"] is None for n in names)


# -- 1. several workers, one database -----------------------------------------------------------


# Both counts on SQLite; on PostgreSQL three workers, the most contention for its one writer's lock (two add nothing
# that three do not show there).
@pytest.mark.parametrize("count, database", [(2, "sqlite"), (3, "sqlite"),
                                             pytest.param(3, "postgres", marks=pytest.mark.postgres)],
                         indirect=["database"])
def test_several_workers_share_one_database_and_every_step_runs_once(invoke, spawn, tmp_path, database, count):
    names = [f"w-{i}" for i in range(1, count + 1)]
    workers = [spawn(*AGENTS, "worker", "--concurrency", "2", "--lease", "5", "--name", n, label=n) for n in names]
    until("every worker to register", lambda: _registered(invoke, database, names),
          why=lambda: [(p.label, p.poll(), _output(tmp_path, p)[1][-800:]) for p in workers])

    logs = {}
    for i in range(20):
        log = tmp_path / f"run-{i}.log"
        logs[_start(invoke, log, steps=3, delay_s=0.05)] = log

    def all_succeeded():
        rows = [r for r in _json(invoke, "ls") if r["id"] in logs]
        assert not [r for r in rows if r["status"] not in ("queued", "running", "succeeded")], rows
        return len(rows) == 20 and all(r["status"] == "succeeded" for r in rows)

    def why():
        statuses = Counter((r["status"], r["worker"]) for r in _json(invoke, "ls") if r["id"] in logs)
        return f"{dict(statuses)} {[(p.label, p.poll(), _output(tmp_path, p)[1][-800:]) for p in workers]}"

    until("all 20 runs to succeed", all_succeeded, deadline_s=40, every_s=0.1, why=why)
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        _exits(tmp_path, proc)

    claimers = Counter()
    for run_id, log in logs.items():
        report = _json(invoke, "show", run_id)
        run, events = report["run"], report["events"]
        assert (run["status"], run["attempt"], run["fence"], run["worker"]) == ("succeeded", 1, 1, None), run
        assert [e["kind"] for e in events].count("succeeded") == 1, events
        assert not [e for e in events if e["kind"] == "takeover"], events
        [claim] = [e for e in events if e["kind"] == "claimed"]
        [done] = [e for e in events if e["kind"] == "succeeded"]
        assert claim["worker"] in names, events
        assert done["worker"] == claim["worker"], events
        claimers[claim["worker"]] += 1
        assert dict(ran_steps(log)) == {"s0": 1, "s1": 1, "s2": 1}, run_id
        journal = report["journal"]
        assert [(e["generation"], e["position"], e["name"], e["fence"]) for e in journal] == \
            [(1, 0, "s0", 1), (1, 1, "s1", 1), (1, 2, "s2", 1)], journal
    assert len(claimers) >= 2, f"one worker claimed every run: {claimers}"

    listing = {w["name"]: w for w in _json(invoke, "workers", "--all")}
    for name in names:
        assert listing[name]["stopped_at"] is not None, listing[name]
        assert listing[name]["state"] == "stopped", listing[name]
        assert listing[name]["runs"] == [], listing[name]


# -- 2. fencing, deterministic: a paused worker wakes up after another took its run --------------


def test_a_paused_worker_wakes_after_a_takeover_and_its_late_send_is_fenced_and_deduplicated(
        invoke, spawn, tui_agent, tmp_path, database):
    done = invoke("start", "nightly-report", "--input", json.dumps({"date": "2026-11-24", "service": "dedupe"}))
    assert done.exit_code == 0, done.output
    run_id = done.stdout.strip()

    a = spawn("worker", "--once", "--lease", "2", "--name", "w-a", env={"TUI_AGENT_PAUSE_AT": "after-attempted"},
              label="w-a")
    until("w-a to stop itself after the attempted row", lambda: a.poll() is not None or process_state(a.pid) == "T")
    assert a.poll() is None, _output(tmp_path, a)
    assert process_state(a.pid) == "T", _output(tmp_path, a)
    held = _json(invoke, "show", run_id)
    assert (held["run"]["status"], held["run"]["worker"], held["run"]["fence"]) == ("running", "w-a", 1)
    a_fence = held["run"]["fence"]
    [effect] = held["effects"]
    assert (effect["state"], effect["attempted_by"], effect["fence"]) == ("attempted", "w-a", a_fence)

    # w-a's 2 s lease (renewed at its last write) has expired for w-b: on SQLite w-b's clock runs 5 s ahead; on
    # PostgreSQL, whose server's clock judges it, w-b starts once it has really run out (at most 2 s)
    b = tui_agent("worker", "--once", "--lease", "2", "--name", "w-b", env=taken_over(database, run_id, ahead_s=5))
    assert b.returncode == 0, (b.stdout, b.stderr)
    after_b = _json(invoke, "show", run_id)
    assert (after_b["run"]["status"], after_b["run"]["reason"]) == ("succeeded", "check_passed"), after_b["run"]
    [takeover] = [e for e in after_b["events"] if e["kind"] == "takeover"]
    assert takeover["message"] == "lease of w-a expired; claimed by w-b (attempt 2, fence 2)"
    assert takeover["worker"] == "w-b"
    b_fence, taken_at = takeover["fence"], _at(takeover["at"])
    assert b_fence == 2
    assert after_b["run"]["attempt"] == 2

    a.send_signal(signal.SIGCONT)
    out, err = _exits(tmp_path, a)
    assert f"{run_id} was taken by another worker or a person" in out, (out, err)

    report = _json(invoke, "show", run_id)
    assert report["events"] == after_b["events"], "w-a wrote an event after waking"
    assert report["journal"] == after_b["journal"]
    assert report["effects"] == after_b["effects"]
    assert report["run"] == after_b["run"], "w-a's late heartbeat or write changed the run"
    journal = report["journal"]
    assert [(e["position"], e["name"]) for e in journal] == list(enumerate(BEFORE_EFFECT + ["send-report"]))
    assert [e["fence"] for e in journal] == [a_fence] * len(BEFORE_EFFECT) + [b_fence], journal
    for entry in journal:  # w-b's clock is ahead or w-b came later, so w-a's entries all started before its claim
        if _at(entry["started_at"]) >= taken_at:
            assert entry["fence"] == b_fence, entry
        if entry["fence"] == a_fence:
            assert _at(entry["started_at"]) < taken_at, entry
    [effect] = report["effects"]
    assert (effect["name"], effect["state"], effect["attempted_by"], effect["fence"], effect["attempts"]) == \
        ("send-report", "confirmed", "w-b", b_fence, 2), effect
    events = report["events"]
    since = events[events.index(takeover):]
    assert not [e for e in since if e["worker"] == "w-a"], since

    # the fence, re-read just before do(key), kept w-a's late send from leaving at all (the outbox saw one
    # request); had w-a been paused after that read, the outbox's dedupe and its token check would refuse it
    data = data_dir(database)
    assert len(mailbox.Maildir(data / "outbox", factory=None, create=False)) == 1
    counters = json.loads((data / "outbox.keys.json").read_text())["counters"]
    assert (counters["send_requests"], counters["emails_received"]) == (1, 1), counters


# -- 3. kill -9 mid-run: a live worker takes it over once the lease expires ----------------------


def test_a_live_worker_takes_over_a_killed_workers_run_when_its_lease_expires(invoke, spawn, tmp_path, database):
    log = tmp_path / "calls.log"
    run_id = _start(invoke, log, steps=6, delay_s=0.3)
    a = spawn(*AGENTS, "worker", "--lease", "2", "--name", "w-a", label="w-a")

    def a_is_working():
        report = _json(invoke, "show", run_id)
        run = report["run"]
        assert run["status"] in ("queued", "running"), f"the run ended before w-a's heartbeat beat: {run}"
        if (run["status"], run["worker"]) != ("running", "w-a") or not report["journal"]:
            return False
        [w_a] = [w for w in _json(invoke, "workers") if w["name"] == "w-a"]
        # its heartbeat thread is alive and has beaten (started_at is shown to the millisecond)
        return _at(w_a["heartbeat_at"]) > _at(w_a["started_at"]) + 0.1

    until("w-a to record a step and beat once", a_is_working)
    b = spawn(*AGENTS, "worker", "--lease", "2", "--name", "w-b", label="w-b")
    a.send_signal(signal.SIGKILL)
    a.wait(timeout=10)
    assert a.returncode == -signal.SIGKILL

    # Read right after the kill, before w-b can take the run (at most 2 s away): nobody renews the
    # lease any more, so `lease_expires_at` now is exactly when w-a's lease ends.
    dead = _json(invoke, "show", run_id)
    assert (dead["run"]["status"], dead["run"]["worker"], dead["run"]["attempt"]) == ("running", "w-a", 1)
    recorded_by_a = [e["name"] for e in dead["journal"]]
    assert 1 <= len(recorded_by_a) < 6, recorded_by_a
    expiry = _at(dead["run"]["lease_expires_at"])
    # Cross-check it against what can be seen from outside. The lease only grows while w-a lives: a
    # heartbeat sets it to heartbeat_at + 2 s, and a journal commit at time t that finds less than
    # half the lease left sets it to t + 2 s (so after a commit at t it is at least t + 1 s). A
    # commit ends at about started_at + duration. Hence
    #   max(heartbeat_at + 2, last commit + 1) <= expiry <= max(heartbeat_at, last commit) + 2.
    [w_a] = [w for w in _json(invoke, "workers") if w["name"] == "w-a"]
    beat = _at(w_a["heartbeat_at"])
    last = dead["journal"][-1]
    last_commit = _at(last["started_at"]) + dead["steps"][-1]["duration_ms"] / 1000
    assert max(beat + 2, last_commit + 1) - 0.01 <= expiry <= max(beat, last_commit) + 2 + 0.05, \
        (expiry, beat, last_commit)

    def succeeded():
        report = _json(invoke, "show", run_id)
        return report if report["run"]["status"] == "succeeded" else None

    report = until("w-b to finish the run", succeeded, deadline_s=30, every_s=0.05,
                    why=lambda: (b.poll(), _output(tmp_path, b)[1][-800:]))
    run, events = report["run"], report["events"]
    assert (run["attempt"], run["fence"], run["reason"]) == (2, 2, "check_passed"), run
    [takeover] = [e for e in events if e["kind"] == "takeover"]
    assert takeover["message"] == "lease of w-a expired; claimed by w-b (attempt 2, fence 2)"
    taken_at = _at(takeover["at"])
    # not before the lease ended (times are shown to the millisecond), and not long after: w-b polls
    # every lease/3 at most, so 5 s is generous slack
    assert expiry - 0.002 <= taken_at <= expiry + 5, (expiry, taken_at)
    [done] = [e for e in events if e["kind"] == "succeeded"]
    assert done["worker"] == "w-b"

    journal = report["journal"]
    assert [e["name"] for e in journal] == [f"s{i}" for i in range(6)]
    assert [e["fence"] for e in journal] == [1] * len(recorded_by_a) + [2] * (6 - len(recorded_by_a))
    ran = ran_steps(log)
    in_flight = f"s{len(recorded_by_a)}"  # its function may have started before the kill: it runs again
    assert ran[in_flight] in (1, 2), ran
    assert {k: v for k, v in ran.items() if k != in_flight} == {f"s{i}": 1 for i in range(6) if f"s{i}" != in_flight}

    listing = {w["name"]: w for w in _json(invoke, "workers")}
    # killed and reaped on this host: `workers` says dead, as the TUI does (runtime/liveness.worker_state)
    assert listing["w-a"]["stopped_at"] is None, listing["w-a"]
    assert listing["w-a"]["state"] == "dead", listing["w-a"]
    assert listing["w-a"]["runs"] == []
    assert listing["w-b"]["runs"] == []

    b.send_signal(signal.SIGTERM)
    _exits(tmp_path, b)


# -- 4. SIGTERM hands the run back at once --------------------------------------------------------


def test_sigterm_finishes_the_current_step_and_hands_the_run_back_claimable_at_once(
        invoke, spawn, tui_agent, tmp_path, database):
    log = tmp_path / "calls.log"
    run_id = _start(invoke, log, steps=20, delay_s=0.2)
    w = spawn(*AGENTS, "worker", "--lease", "30", "--grace", "10", "--name", "w-t", label="w-t")
    until("two recorded steps", lambda: len(_json(invoke, "show", run_id)["journal"]) >= 2)
    w.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    _exits(tmp_path, w, timeout=10)
    assert time.monotonic() - signalled < 10, "the worker outlived its grace period"

    released = _json(invoke, "show", run_id)
    run = released["run"]
    assert (run["status"], run["reason"], run["worker"], run["lease_expires_at"]) == \
        ("queued", "resumed", None, None), run
    recorded = [e["name"] for e in released["journal"]]
    assert 2 <= len(recorded) < 20, recorded
    assert dict(ran_steps(log)) == {name: 1 for name in recorded}, "the step in flight was not finished and recorded"
    [event] = [e for e in released["events"] if e["message"].startswith("released by w-t")]
    assert (event["kind"], event["message"], event["worker"]) == \
        ("queued", "released by w-t (shutting down); claimable now", "w-t"), event

    nxt = tui_agent(*AGENTS, "worker", "--once", "--name", "w-next")  # no TUI_AGENT_NOW: claimable now
    assert nxt.returncode == 0, (nxt.stdout, nxt.stderr)
    assert f"w-next claimed {run_id} (counting, attempt 2, fence 2)" in nxt.stderr, nxt.stderr
    report = _json(invoke, "show", run_id)
    assert (report["run"]["status"], report["run"]["attempt"]) == ("succeeded", 2), report["run"]
    assert [e["name"] for e in report["journal"]] == [f"s{i}" for i in range(20)]
    assert dict(ran_steps(log)) == {f"s{i}": 1 for i in range(20)}
