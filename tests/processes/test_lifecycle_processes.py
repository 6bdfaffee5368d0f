"""The run lifecycle with real processes (docs/architecture.md sections 1 and 3.2): a sleep or an approval
costs no process, and park or cancel of a running run stops its worker at its next write. On both stores
(`database`): TUI_AGENT_NOW moves a worker's clock past a sleep's wake_at, which is the run's own clock on
PostgreSQL too."""

import json
import mailbox
import signal
import time

import pytest
from helpers import data_dir, later, ok, one_line_error, paused_worker, ran_steps, show_json

from tui_agent.runtime.clock import parse_instant

AGENTS = ["--agents", "counting_agents"]


def _status(report: dict) -> tuple:
    return report["run"]["status"], report["run"]["reason"]


def _run_id(done) -> str:
    """`run` prints `<id> <status> (<reason>)...` first on stdout."""
    return done.stdout.split()[0]


def _emails(database) -> int:
    folder = data_dir(database) / "outbox"
    return len(mailbox.Maildir(folder, factory=None, create=False)) if folder.exists() else 0


def _not_due(tui_agent, run_id, before: dict) -> None:
    """A plain `worker --once` finds nothing to do and leaves the run exactly as it was."""
    idle = ok(tui_agent(*AGENTS, "worker", "--once", "--name", "w-idle"))
    assert "w-idle: no run is due" in idle.stderr, idle.stderr
    assert not idle.stdout, idle.stderr
    after = show_json(tui_agent, run_id, *AGENTS)
    for part in ("journal", "events", "effects"):
        assert after[part] == before[part], part
    assert {k: after["run"][k] for k in ("status", "reason", "attempt", "fence", "wake_at")} == \
        {k: before["run"][k] for k in ("status", "reason", "attempt", "fence", "wake_at")}


# -- 1. waiting costs nothing ------------------------------------------------------------------


def test_an_hour_long_sleep_is_a_row_not_a_process_and_a_later_worker_finishes_it(tui_agent, tmp_path, database):
    log = tmp_path / "calls.log"
    started = time.time()
    ran = tui_agent(*AGENTS, "run", "sleepy", "--input", json.dumps({"log": str(log)}), timeout=30)
    ok(ran, 3)  # `run` returned: no process is left holding the sleep
    run_id = _run_id(ran)
    assert f"{run_id} waiting (sleep)" in ran.stdout
    report = show_json(tui_agent, run_id, *AGENTS)
    assert _status(report) == ("waiting", "sleep")
    assert report["run"]["worker"] is None
    assert report["run"]["lease_expires_at"] is None
    ahead = parse_instant(report["run"]["wake_at"]) - started
    assert 3600 - 5 < ahead < 3600 + 60, ahead
    assert [e["name"] for e in report["journal"]] == ["before", "nap"]
    assert dict(ran_steps(log)) == {"before": 1}

    _not_due(tui_agent, run_id, report)

    ok(tui_agent(*AGENTS, "worker", "--once", "--name", "w-later", env={"TUI_AGENT_NOW": later(2 * 3600)}))
    report = show_json(tui_agent, run_id, *AGENTS)
    assert report["run"]["status"] == "succeeded", report["run"]
    assert report["run"]["result"] == {"done": ["before", "after"]}
    assert dict(ran_steps(log)) == {"before": 1, "after": 1}
    assert [e["name"] for e in report["journal"]] == ["before", "nap", "after"]
    kinds = [e["kind"] for e in report["events"]]
    assert "woke" in kinds
    assert kinds.index("woke") < kinds.index("succeeded")


def test_a_report_held_until_send_at_is_emailed_once_after_it(tui_agent, database):
    send_at = later(3600)
    ran = tui_agent("run", "nightly-report", "--input", json.dumps({"date": "2026-11-26", "send_at": send_at}))
    ok(ran, 3)
    run_id = _run_id(ran)
    report = show_json(tui_agent, run_id, *AGENTS)
    assert _status(report) == ("waiting", "sleep")
    assert abs(parse_instant(report["run"]["wake_at"]) - parse_instant(send_at)) < 1
    assert _emails(database) == 0

    _not_due(tui_agent, run_id, report)
    assert _emails(database) == 0

    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(3600 + 60)}))
    report = show_json(tui_agent, run_id, *AGENTS)
    assert _status(report) == ("succeeded", "check_passed")
    assert _emails(database) == 1
    assert [(e["name"], e["state"]) for e in report["effects"]] == [("send-report", "confirmed")]
    assert report["run"]["result"]["email"]


# -- 2, 3. park and cancel of a running run ----------------------------------------------------


@pytest.mark.postgres_case(action="park")   # cancel refuses the worker's next write as park does: SQLite has both
@pytest.mark.parametrize("action, status", [("park", "parked"), ("cancel", "cancelled")])
def test_park_or_cancel_of_a_running_run_stops_its_worker_at_its_next_write(tui_agent, tmp_path, database, action,
                                                                            status):
    log = tmp_path / "calls.log"
    run_id = ok(tui_agent(*AGENTS, "start", "counting", "--input",
                           json.dumps({"log": str(log), "steps": 4}))).stdout.strip()
    # the worker stops itself after s1's function returned, before s1 is committed
    with paused_worker(*AGENTS, "worker", "--once", "--name", "w-1", pause_at="after-step:2") as worker:
        held = show_json(tui_agent, run_id, *AGENTS)
        assert (held["run"]["status"], held["run"]["worker"]) == ("running", "w-1")
        assert [e["name"] for e in held["journal"]] == ["s0"]

        ok(tui_agent(*AGENTS, action, run_id, "--note", "look"))
        worker.send_signal(signal.SIGCONT)
        out, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, (out, err)
    assert f"{run_id} was taken by another worker or a person" in out

    report = show_json(tui_agent, run_id, *AGENTS)
    assert _status(report) == (status, "person")
    assert report["run"]["fence"] > held["run"]["fence"]
    assert report["run"]["worker"] is None
    assert [e["name"] for e in report["journal"]] == ["s0"]  # s1 ran but its commit was refused
    events = report["events"]
    stop = max(i for i, e in enumerate(events) if e["kind"] == status)
    assert events[stop]["message"].endswith("(look)")
    assert stop == len(events) - 1, events[stop:]
    assert not [e for e in events[stop:] if e["worker"] == "w-1"]
    assert dict(ran_steps(log)) == {"s0": 1, "s1": 1}

    if action == "park":
        ok(tui_agent(*AGENTS, "resume", run_id))
        ok(tui_agent(*AGENTS, "worker", "--once", "--name", "w-2"))
        report = show_json(tui_agent, run_id, *AGENTS)
        assert _status(report) == ("succeeded", "check_passed")
        assert [e["name"] for e in report["journal"]] == ["s0", "s1", "s2", "s3"]
        assert dict(ran_steps(log)) == {"s0": 1, "s1": 2, "s2": 1, "s3": 1}
    else:
        line = one_line_error(tui_agent(*AGENTS, "resume", run_id))
        assert run_id in line
        assert "cancelled" in line
        _not_due(tui_agent, run_id, report)
        assert dict(ran_steps(log)) == {"s0": 1, "s1": 1}


# -- 4. approvals ------------------------------------------------------------------------------


@pytest.mark.parametrize("deny, note", [(False, "looks right"), (True, "wrong numbers")])
def test_an_approval_round_trip_through_the_cli(tui_agent, database, deny, note):
    ran = tui_agent("run", "nightly-report", "--input", json.dumps({"date": "2026-11-25", "approve": True}))
    ok(ran, 3)
    run_id = _run_id(ran)
    report = show_json(tui_agent, run_id, *AGENTS)
    assert _status(report) == ("waiting", "approval")
    assert report["run"]["worker"] is None
    assert _emails(database) == 0
    _not_due(tui_agent, run_id, report)  # only a person's decision re-queues it

    decided = ok(tui_agent("approve", run_id, *(["--deny"] if deny else []), "--note", note))
    assert run_id in decided.stdout
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id, *AGENTS)
    # a denied send is not a success: nightly-report asks with the default on_deny="cancel"
    assert _status(report) == (("cancelled", "denied") if deny else ("succeeded", "check_passed"))

    decision = "denied" if deny else "approved"
    assert [e for e in report["events"] if e["kind"] == "decision" and decision in e["message"]
            and e["message"].endswith(f"({note})")]
    [entry] = [e for e in report["journal"] if e["kind"] == "approval"]
    assert (entry["name"], entry["result"]["approved"], entry["result"]["note"]) == ("approve", not deny, note)
    if deny:
        assert _emails(database) == 0
        assert report["run"]["result"] is None
        assert report["run"]["finished_at"]
        assert report["events"][-1]["kind"] == "cancelled"
        assert report["events"][-1]["message"].endswith(note)
        assert report["effects"] == []
    else:
        assert _emails(database) == 1
        assert report["run"]["result"]["email"]
        assert [(e["name"], e["state"]) for e in report["effects"]] == [("send-report", "confirmed")]

    line = one_line_error(tui_agent("approve", run_id))  # it has ended: nothing waits for an answer
    assert run_id in line
    assert "not waiting for an approval" in line


def test_approving_a_run_that_waits_for_no_approval_is_a_one_line_error(tui_agent, tmp_path, database):
    log = tmp_path / "calls.log"
    ran = ok(tui_agent(*AGENTS, "run", "sleepy", "--input", json.dumps({"log": str(log)})), 3)
    run_id = _run_id(ran)
    before = show_json(tui_agent, run_id, *AGENTS)
    line = one_line_error(tui_agent(*AGENTS, "approve", run_id, "--note", "why not"))
    assert run_id in line
    assert "waiting: sleep" in line
    after = show_json(tui_agent, run_id, *AGENTS)
    assert after["events"] == before["events"]
    assert _status(after) == ("waiting", "sleep")
