"""A worker paused (SIGSTOP) between marking an email `attempted` and sending it, past its lease, with real
processes: the worker that takes the run over must not read a lookup-only service's silence as "not done"
while the paused process lives, a person's `--not-done` is warned, and when the paused worker wakes its send
is refused (the fence re-read just before `do`, or the outbox's attempt token). The world sees one email."""

from __future__ import annotations

import json
import mailbox
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import sqlite_utils
from helpers import ROOT, database_at_version, ok, paused_worker, process_state, registry_of

from tui_agent import Agent, operate
from tui_agent.agents.outbox import Outbox
from tui_agent.runtime import faults
from tui_agent.runtime.clock import now
from tui_agent.runtime.effects import (
    AttemptToken,
    StaleAttempt,
    _takes_token,
    sender_warning,
)
from tui_agent.runtime.faults import SimulatedCrash
from tui_agent.runtime.worker import execute
from tui_agent.store import open_store, schema
from tui_agent.store.effects import effects_for
from tui_agent.store.host import process_alive, process_start
from tui_agent.store.host import this_host as process_host
from tui_agent.store.runs import claim_run, events_for, get_run
from tui_agent.store.workers import register

EVERY_WITH_LOOKUP = {"date": "2026-11-27", "service": "every", "lookup": True}   # a lookup-only service


def _in_process(invoke, *args: str):
    """A command that runs no agent code (start, tick, reconcile), through the CLI in this process: faster."""
    done = invoke(*args)
    assert done.exit_code == 0, (done.exit_code, done.stdout, done.stderr)
    return done


def _until(what: str, check, deadline_s: float = 15):
    deadline = time.monotonic() + deadline_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return found


def _run(db_path, run_id: str) -> dict:
    store = open_store(db_path)
    try:
        return {"run": get_run(store, run_id), "events": events_for(store, run_id),
                "effects": effects_for(store, run_id)}
    finally:
        store.close()


def _wait_past_lease(db_path, run_id: str) -> None:
    _until("the paused worker's lease to run out",
           lambda: _run(db_path, run_id)["run"]["lease_expires_at"] < time.time() - 0.1)


def _emails(db_path) -> int:
    """What the world saw: messages delivered into the Maildir."""
    maildir = db_path.parent / "runs.data" / "outbox"
    return len(mailbox.Maildir(maildir, factory=None, create=False)) if maildir.exists() else 0


def _counters(db_path) -> dict:
    keys = db_path.parent / "runs.data" / "outbox.keys.json"
    return json.loads(keys.read_text())["counters"] if keys.exists() else {}


def _resume(worker: subprocess.Popen) -> str:
    worker.send_signal(signal.SIGCONT)
    out, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, (worker.returncode, out, err)
    return out


def _start(invoke, agent: str, request: dict, *agents: str) -> str:
    return _in_process(invoke, *agents, "start", agent, "--input", json.dumps(request)).stdout.strip()


def _taken_over_and_held(invoke, tui_agent, db_path, run_id: str, a: subprocess.Popen, *agents: str) -> dict:
    """w-b takes the run over past w-a's lease and must not send while w-a's process lives."""
    _wait_past_lease(db_path, run_id)
    b = ok(tui_agent(*agents, "worker", "--once", "--lease", "5", "--name", "w-b"))
    seen = _run(db_path, run_id)
    run, events = seen["run"], seen["events"]
    assert (run["status"], run["reason"]) == ("waiting", "reconcile"), (run, b.stdout, b.stderr)
    assert [e for e in events if e["kind"] == "takeover"], events
    waiting = events[-1]
    assert waiting["kind"] == "waiting", waiting
    assert "w-a" in waiting["message"], waiting
    assert f"pid {a.pid}" in waiting["message"], waiting
    [effect] = seen["effects"]
    assert (effect["state"], effect["attempted_by"], effect["waits_for"]) == ("unknown", "w-a", "w-a"), effect
    assert _emails(db_path) == 0, "w-b sent while the paused worker might still send"
    _in_process(invoke, *agents, "tick")  # w-a lives and holds on: the run stays held back
    assert _run(db_path, run_id)["run"]["status"] == "waiting"
    return seen


# -- item 2 with real processes ------------------------------------------------------------------


def test_a_lookup_only_takeover_waits_for_the_paused_sender_and_the_world_sees_one_email(invoke, tui_agent, db_path):
    run_id = _start(invoke, "nightly-report", EVERY_WITH_LOOKUP)
    with paused_worker("worker", "--once", "--lease", "1", "--name", "w-a", pause_at="after-attempted") as a:
        _taken_over_and_held(invoke, tui_agent, db_path, run_id, a)
        out = _resume(a)
    # w-a's stale send is stopped by the fence re-read; having let go, the run is queued again, and w-a's own
    # loop (or the tick below) claims it anew under a new fence and sends once
    assert f"{run_id} was taken by another worker or a person" in out, out
    ticked = ok(tui_agent("tick", "--work"))
    seen = _run(db_path, run_id)
    assert (seen["run"]["status"], seen["run"]["reason"]) == ("succeeded", "check_passed"), \
        (seen["run"], out, ticked, seen["events"])
    assert any("w-a let go of the run" in e["message"] for e in seen["events"]), seen["events"]
    assert any(e["kind"] == "queued" and "let go" in e["message"] for e in seen["events"]), seen["events"]
    assert _emails(db_path) == 1
    assert _counters(db_path)["send_requests"] == 1, "the woken worker's stale send must not reach the outbox"


def test_not_done_while_the_paused_sender_lives_warns_and_its_late_send_is_refused(invoke, tui_agent, db_path):
    run_id = _start(invoke, "nightly-report", EVERY_WITH_LOOKUP)
    with paused_worker("worker", "--once", "--lease", "1", "--name", "w-a", pause_at="after-attempted") as a:
        _taken_over_and_held(invoke, tui_agent, db_path, run_id, a)
        decided = _in_process(invoke, "reconcile", run_id, "send-report", "--not-done")
        warning = decided.stderr.strip()
        assert warning.startswith("tui-agent: warning:"), decided.stderr
        assert len(warning.splitlines()) == 1, decided.stderr
        assert "w-a" in warning, warning
        assert f"pid {a.pid}" in warning, warning
        assert "may still send" in warning, warning
        assert "refuses that worker's stale attempt" in warning, warning
        assert "recorded as not done" in decided.stdout

        ok(tui_agent("worker", "--once", "--name", "w-c"))
        assert _run(db_path, run_id)["run"]["status"] == "succeeded"
        assert _emails(db_path) == 1
        out = _resume(a)
    assert f"{run_id} was taken by another worker or a person" in out, out
    assert _emails(db_path) == 1
    assert _counters(db_path)["send_requests"] == 1, "w-a's late send must not reach the outbox"


@contextmanager
def _stopped_inside_do(*args: str) -> Iterator[subprocess.Popen]:
    """A worker of the `mailer` fixture that stops itself inside do(key, token), after the fence re-read."""
    worker = subprocess.Popen([sys.executable, "-m", "tui_agent", "--agents", "paused_sender_agents", *args], cwd=ROOT,
                              text=True, env={**os.environ, "TUI_AGENT_TEST_PAUSE_IN_DO": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _until("the worker to stop inside do", lambda: worker.poll() is not None or process_state(worker.pid) == "T")
        assert worker.poll() is None, worker.communicate()
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_a_sender_paused_past_the_fence_read_is_refused_by_the_outbox_token(invoke, tui_agent, db_path):
    agents = ("--agents", "paused_sender_agents")
    run_id = _start(invoke, "mailer", {"key": "report:2026-11-27"}, *agents)
    with _stopped_inside_do("worker", "--once", "--lease", "1", "--name", "w-a") as a:
        _taken_over_and_held(invoke, tui_agent, db_path, run_id, a, *agents)
        decided = _in_process(invoke, *agents, "reconcile", run_id, "send", "--not-done")
        assert f"pid {a.pid}" in decided.stderr, decided.stderr
        ok(tui_agent(*agents, "worker", "--once", "--name", "w-c"))
        assert _emails(db_path) == 1
        out = _resume(a)  # its do(key, token) now reaches the outbox, with the token of fence 1
    assert f"{run_id} was taken by another worker or a person" in out, out
    assert _emails(db_path) == 1
    counters = _counters(db_path)
    assert (counters["send_requests"], counters["emails_received"], counters["stale_refused"]) == (2, 1, 1), counters
    seen = _run(db_path, run_id)
    assert (seen["run"]["status"], seen["effects"][0]["state"], seen["effects"][0]["fence"]) == \
        ("succeeded", "confirmed", 4), seen


def test_a_held_back_run_goes_on_once_the_paused_process_has_ended(invoke, tui_agent, db_path):
    run_id = _start(invoke, "nightly-report", EVERY_WITH_LOOKUP)
    with paused_worker("worker", "--once", "--lease", "1", "--name", "w-a", pause_at="after-attempted") as a:
        _taken_over_and_held(invoke, tui_agent, db_path, run_id, a)
        a.kill()
        a.wait()
        ticked = _in_process(invoke, "tick")
        assert f"queued {run_id} again" in ticked.stderr, ticked.stderr
        queued = _run(db_path, run_id)
        assert queued["run"]["status"] == "queued", queued["run"]
        assert f"w-a's process {a.pid} has ended" in queued["events"][-1]["message"], queued["events"][-1]
        ok(tui_agent("worker", "--once", "--name", "w-c"))
    assert _run(db_path, run_id)["run"]["status"] == "succeeded"
    assert _emails(db_path) == 1


# -- the pieces ------------------------------------------------------------------------------------


def test_the_outbox_refuses_an_older_token_of_the_same_run_but_not_another_runs(tmp_path):
    box = Outbox(tmp_path / "mail", mode="every")
    mail = {"to": "team <team@localhost>", "subject": "s", "body": "b"}
    box.send("k", token=AttemptToken("r-1", 1, 3), **mail)
    box.send("k", token=AttemptToken("r-1", 1, 3), **mail)  # the same attempt again (a retry of EffectNotDone)
    with pytest.raises(StaleAttempt, match="r-1/g1/f2"):
        box.send("k", token=AttemptToken("r-1", 1, 2), **mail)
    box.send("k", token=AttemptToken("r-2", 1, 1), **mail)  # a fork is another run
    box.send("k", token=AttemptToken("r-1", 2, 4), **mail)  # a restart: a newer generation
    with pytest.raises(StaleAttempt):
        box.send("k", token=AttemptToken("r-1", 1, 3), **mail)
    box.send("k", **mail)  # a caller without tokens is never refused
    assert len(box.messages()) == 5
    assert box.stats()["stale_refused"] == 2


def test_do_gets_the_attempt_token_only_when_it_takes_a_second_argument(db_path):
    class Box:
        def send(self, key, *, to=None):
            return key

    assert not _takes_token(lambda key: key)
    assert not _takes_token(Box().send)
    assert not _takes_token(print)
    assert _takes_token(lambda key, token: key)
    assert _takes_token(lambda key, token=None: key)
    seen = []

    def agent_run(ctx, request):
        one = ctx.effect("one", key="k1", do=lambda key: {"key": key})
        two = ctx.effect("two", key="k2", do=lambda key, token: seen.append(token) or {"token": str(token)})
        return {"one": one, "two": two}

    store = open_store(db_path)
    registry = registry_of(Agent(name="fx", run=agent_run))
    run_id, _ = operate.start(store, registry, agent_name="fx", request={})
    outcome = execute(store, registry, claim=claim_run(store, run_id, "w-1", 30.0, now()))
    assert outcome.status == "succeeded"
    assert seen == [AttemptToken(run_id, 1, 1)]
    assert outcome.result["two"] == {"token": f"{run_id}/g1/f1"}


def test_a_stale_refusal_reports_the_run_taken_and_records_that_the_worker_let_go(db_path):
    """In-process: the service saw a newer attempt while this one was on its way; nothing is recorded."""
    store = open_store(db_path)
    box = Outbox(db_path.parent / "mail", mode="every")
    mail = {"to": "t", "subject": "s", "body": "b"}

    def agent_run(ctx, request):
        def send(key, token):
            box.send(key, token=AttemptToken(token.run_id, token.generation, token.fence + 1), **mail)  # the newer one
            return box.send(key, token=token, **mail)
        return ctx.effect("send", key="k", do=send, lookup=box.lookup)

    registry = registry_of(Agent(name="fx", run=agent_run))
    run_id, _ = operate.start(store, registry, agent_name="fx", request={})
    outcome = execute(store, registry, claim=claim_run(store, run_id, "w-1", 30.0, now()))
    assert outcome.status == "refused"
    assert "nothing was sent" in outcome.error
    [effect] = effects_for(store, run_id)
    assert effect["state"] == "attempted", "a refused stale attempt records neither not_done nor unknown"
    assert store.conn.execute("SELECT worker, fence FROM let_go WHERE run_id = ?", (run_id,)).fetchall() == \
        [("w-1", 1)]
    assert len(box.messages()) == 1


def test_a_process_is_known_by_its_pid_and_start_time(tmp_path):
    assert process_alive(os.getpid(), process_start(os.getpid()))
    assert not process_alive(os.getpid(), process_start(os.getpid()) + 1), "a reused pid is another process"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = process_start(child.pid)
        child.send_signal(signal.SIGSTOP)
        _until("the child to stop", lambda: process_state(child.pid) == "T")
        assert process_alive(child.pid, started), "a stopped process may still send"
    finally:
        child.kill()
    _until("the child to become a zombie", lambda: process_state(child.pid) == "Z")
    assert not process_alive(child.pid, started), "a zombie sends nothing"
    child.wait()
    assert not process_alive(child.pid, started)


def _attempted_by_this_process(db_path) -> tuple:
    """A run whose effect `w-alive` attempted before it "crashed"; w-alive is registered with this test's pid."""
    store = open_store(db_path)
    registry = registry_of(Agent(name="fx", run=lambda ctx, request: ctx.effect(
        "send", key="k", do=lambda key: {"sent": key}, lookup=lambda key: None)))
    run_id, _ = operate.start(store, registry, agent_name="fx", request={})
    faults.arm("after-attempted")
    try:
        with pytest.raises(SimulatedCrash):
            execute(store, registry, claim=claim_run(store, run_id, "w-alive", 0.1, now()))
    finally:
        faults.disarm()
    store = open_store(db_path)
    [effect] = effects_for(store, run_id)
    assert sender_warning(store.conn, effect) is None, "an unregistered worker cannot be checked"
    register(store, "w-alive", pid=os.getpid(), host=socket.gethostname(), concurrency=1, lease_s=0.1,
             now=effect["attempted_at"] - 1)
    time.sleep(0.15)  # past the lease: a person may decide
    return store, run_id, effect


async def test_the_reconcile_modal_warns_while_the_attempting_process_lives(db_path):
    from textual.app import App
    from textual.widgets import Static

    from tui_agent.screens.modals import ReconcileModal

    store, _, effect = _attempted_by_this_process(db_path)
    app = App()
    app.session = SimpleNamespace(reader=store)   # what the modal reads through (tui_agent/session.py)
    async with app.run_test() as pilot:
        await pilot.app.push_screen(ReconcileModal(effect))
        await pilot.pause()
        shown = str(pilot.app.screen.query_one("#sender-warning", Static).render())
    assert f"w-alive (pid {os.getpid()}" in shown, shown
    assert "may still send" in shown, shown


def test_a_person_is_warned_in_process_and_the_answer_still_stands(db_path):
    store, run_id, _ = _attempted_by_this_process(db_path)
    warnings = []
    assert operate.reconcile_not_done(store, run_id, effect_ref="send", warn=warnings.append) == run_id
    assert len(warnings) == 1, warnings
    assert f"w-alive (pid {os.getpid()}" in warnings[0], warnings
    assert effects_for(store, run_id)[0]["state"] == "not_done"


def test_a_version_1_database_is_migrated_with_what_the_check_needs(db_path):
    database_at_version(db_path, 1, "INSERT INTO workers (name, pid, host, started_at, heartbeat_at)"
                                    " VALUES ('w-old', 1, 'h', 0, 0)")
    store = open_store(db_path)
    try:
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == \
            str(schema.SCHEMA_VERSION)
        db = sqlite_utils.Database(store.conn)
        assert {"pid_started"} <= set(db["workers"].columns_dict)
        assert {"waits_for"} <= set(db["effects"].columns_dict)
        assert db["let_go"].exists()
        assert store.conn.execute("SELECT name, pid_started FROM workers").fetchall() == [("w-old", None)]
    finally:
        store.close()


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    faults.disarm()



def test_a_sender_on_another_host_counts_as_alive_until_silent_for_three_leases(store):
    """Its process cannot be probed from here: its heartbeat decides (judged by the server's clock on
    PostgreSQL), and a row from this host is still judged by its process."""
    from tui_agent.store.workers import REMOTE_SILENT_LEASES, still_sending

    register(store, "w-far", pid=4242, host="another-machine", concurrency=1, lease_s=2.0, now=now())
    effect = {"attempted_by": "w-far", "run_id": "r-none", "fence": 1, "attempted_at": now() + 1}

    def silent_for(seconds: float):
        with store.write() as conn:
            conn.execute("UPDATE workers SET heartbeat_at = ? WHERE name = 'w-far'",
                         (store.conn.execute("SELECT heartbeat_at FROM workers WHERE name = 'w-far'").fetchone()[0]
                          - seconds,))
        return still_sending(store.conn, effect, now())

    sender, why = still_sending(store.conn, effect, now())
    assert sender is not None and sender["host"] == "another-machine", why
    sender, why = silent_for(2.0 * REMOTE_SILENT_LEASES - 1.5)   # silent for 4.5 s of 6: it may still send
    assert sender is not None, why
    sender, why = silent_for(2.0)                                 # 6.5 s: three leases gone by
    assert sender is None
    assert why.startswith("w-far on another-machine has been silent for"), why

    register(store, "w-here", pid=4242, host=process_host(), concurrency=1, lease_s=2.0,
             now=now())   # this host: its (missing) process decides
    sender, why = still_sending(store.conn, effect | {"attempted_by": "w-here"}, now())
    assert sender is None and "has ended" in why, why
