"""A durable step on PostgreSQL in one round trip (issue 43): a plain step is one statement (the fenced INSERT, the
writers' lock, the notice), a heartbeat and a model call's attempt row one pipelined batch, each committed at one
Sync. Counted on the wire by libpq's own trace of the connection (a round trip is a Sync or a simple Query, which
the client then awaits). The reason a step used to be three round trips (a connection that drops under a
one-statement commit leaves unknown whether it committed) is answered by reading the step back: the server ends
the session at the moment that leaves it unknown, and the step is there exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest
from helpers import ROOT, process_state, registry_of, start_and_work, until, work
from pg_cluster import PgServer, find_bin_dir

from tui_agent import Agent
from tui_agent.models import ScriptedProvider
from tui_agent.operate import start
from tui_agent.runtime.clock import now
from tui_agent.runtime.faults import watching
from tui_agent.runtime.registry import load_registry
from tui_agent.runtime.worker import execute
from tui_agent.store import open_store
from tui_agent.store.base import WRITE_LOCK
from tui_agent.store.journal import FOLD_EVERY
from tui_agent.store.runs import claim_run, events_for, get_run
from tui_agent.store.workers import beat, register

pytestmark = pytest.mark.postgres


class _Wire:
    """Every message libpq sends and receives on the store's connection while tracing (PQtrace, to a file)."""

    def __init__(self, store) -> None:
        self._pgconn = store.conn.raw.pgconn
        self._file = tempfile.TemporaryFile("w+")

    def __enter__(self) -> _Wire:
        self._pgconn.trace(self._file.fileno())
        self._pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._pgconn is not None:
            self._pgconn.untrace()
            self._pgconn = None

    def messages(self) -> list[list[str]]:
        self._file.seek(0)
        return [line.rstrip("\n").split("\t") for line in self._file if line.strip()]

    def round_trips(self) -> int:
        """What the client awaited: a Sync (ending a pipeline, or one statement) or a simple Query."""
        return sum(m[0] == "F" and m[2] in ("Sync", "Query") for m in self.messages())

    def sent(self) -> str:
        return "\n".join("\t".join(m) for m in self.messages() if m[0] == "F")


def _steps(names: list[str], ran: list[str]) -> Agent:
    def run(ctx, request):
        return [ctx.step(name, ran.append, name) for name in names]
    return Agent(name="steps", run=run)


def _bracket(store, first: str, last: str, wires: dict):
    """A fault-point watcher that traces the store's connection from point `first` to point `last` (each a
    (point, call name) pair), into wires["traced"]."""
    def watch(point: str, name: str | None) -> None:
        if (point, name) == first:
            wires["traced"] = _Wire(store).__enter__()
        elif (point, name) == last:
            wires["traced"].stop()
    return watch


def test_a_plain_step_is_one_round_trip(pg_url):
    """From the moment s2's function returned to the moment its result is committed: one statement, one Sync."""
    store = open_store(pg_url)
    ran, wires = [], {}
    try:
        with watching(_bracket(store, ("after-step", "s2"), ("after-step-commit", "s2"), wires)):
            outcome = start_and_work(store, registry_of(_steps(["s0", "s1", "s2", "s3"], ran)), "steps", {})
        assert outcome.status == "succeeded"
        assert wires["traced"].round_trips() == 1, wires["traced"].sent()
        assert "INSERT INTO journal_tail" in wires["traced"].sent()   # the step's row, in that one round trip
        rows = store.conn.execute("SELECT position, name FROM journal WHERE run_id = ? ORDER BY position",
                                  (outcome.run_id,)).fetchall()
        assert rows == [(0, "s0"), (1, "s1"), (2, "s2"), (3, "s3")] and ran == ["s0", "s1", "s2", "s3"]
    finally:
        store.close()


def test_a_turns_opening_reads_are_two_round_trips(pg_url):
    """From the claim to the agent's first call: the run's row with its checkpoint and budget counters in one
    statement, its journal in another; nothing else before the agent starts."""
    store = open_store(pg_url)
    ran, wires = [], {}
    registry = registry_of(_steps(["s0"], ran))
    run_id, _ = start(store, registry, agent_name="steps", request={})
    claim = claim_run(store, run_id, "w-test", 60.0, now())

    def watch(point: str, name: str | None) -> None:
        if (point, name) == ("before-step", "s0"):
            wires["traced"].stop()
    try:
        wires["traced"] = _Wire(store).__enter__()
        with watching(watch):
            outcome = execute(store, registry, claim=claim)
        assert outcome.status == "succeeded" and ran == ["s0"]
        sent = wires["traced"].sent()
        assert wires["traced"].round_trips() == 2, sent
        assert "JOIN checkpoints_now" in sent and "FROM journal" in sent
    finally:
        store.close()


def test_a_turns_settle_is_one_round_trip(pg_url):
    """From the last step's commit to the end of the turn: the settle (the fence checked, the tail folded, the
    run's row ended, its event), each statement fenced, pipelined with the writers' lock and committed at one
    Sync."""
    store = open_store(pg_url)
    ran, wires = [], {}
    registry = registry_of(_steps(["s0", "s1"], ran))
    run_id, _ = start(store, registry, agent_name="steps", request={})
    claim = claim_run(store, run_id, "w-test", 60.0, now())

    def watch(point: str, name: str | None) -> None:
        if (point, name) == ("after-step-commit", "s1"):
            wires["traced"] = _Wire(store).__enter__()
    try:
        with watching(watch):
            outcome = execute(store, registry, claim=claim)
        wires["traced"].stop()
        assert outcome.status == "succeeded" and ran == ["s0", "s1"]
        sent = wires["traced"].sent()
        assert wires["traced"].round_trips() == 1, sent
        assert "pg_advisory_xact_lock_shared" in sent and "DELETE FROM journal_tail" in sent
        assert "UPDATE runs SET status" in sent and "INSERT INTO events" in sent
        assert get_run(store, run_id)["status"] == "succeeded"
        assert store.conn.execute("SELECT count(*) FROM journal_tail WHERE run_id = ?", (run_id,)).fetchone()[0] == 0
        assert [e["kind"] for e in events_for(store, run_id)][-1] == "succeeded"
    finally:
        store.close()


def test_a_runs_first_claim_reads_no_programs_left_and_a_later_claim_does(pg_url):
    """A run's first claim cannot find programs an earlier claim started (commands are written only by a claimed
    run), so it does not read for them; a claim after a takeover must."""
    store = open_store(pg_url)
    try:
        run_id, _ = start(store, registry_of(_steps(["s0"], [])), agent_name="steps", request={})
        with _Wire(store) as first:
            assert claim_run(store, run_id, "w-a", 60.0, now()) is not None
        with store.write() as conn:   # the lease ran out by the server's clock: another worker may take the run
            conn.execute("UPDATE runs SET lease_expires_at = lease_expires_at - 120 WHERE id = ?", (run_id,))
        with _Wire(store) as later:
            assert claim_run(store, run_id, "w-b", 60.0, now()).attempt == 2
        assert "FROM commands" not in first.sent() and "FROM commands" in later.sent()
        # BEGIN with the writers' lock, the server's clock, the due run picked, its row taken, the event, COMMIT
        assert first.round_trips() == 6, first.sent()
    finally:
        store.close()


def test_a_plain_step_that_folds_the_checkpoint_is_one_round_trip(pg_url):
    """The plain step whose turn it is to fold: the tail moved, the checkpoint moved past it and its row, in one
    statement, one Sync."""
    store = open_store(pg_url)
    names, ran, wires = [f"s{i}" for i in range(FOLD_EVERY + 1)], [], {}
    folding = names[FOLD_EVERY - 1]
    try:
        with watching(_bracket(store, ("after-step", folding), ("after-step-commit", folding), wires)):
            outcome = start_and_work(store, registry_of(_steps(names, ran)), "steps", {})
        assert outcome.status == "succeeded" and ran == names
        assert wires["traced"].round_trips() == 1, wires["traced"].sent()
        sent = wires["traced"].sent()
        assert "DELETE FROM journal_tail" in sent and "UPDATE checkpoints SET current_step" in sent
        assert store.conn.execute("SELECT count(*) FROM journal WHERE run_id = ?",
                                  (outcome.run_id,)).fetchone()[0] == FOLD_EVERY + 1
    finally:
        store.close()


def test_a_heartbeat_is_one_round_trip_that_renews_each_live_lease_and_refuses_a_stale_one(pg_url):
    store = open_store(pg_url)
    try:
        registry = registry_of(_steps(["s0"], []))
        register(store, "w-test", pid=1, host="here", concurrency=2, lease_s=30.0, now=now())
        claims = [claim_run(store, start(store, registry, agent_name="steps", request={})[0], "w-test", 30.0, now())
                  for _ in range(2)]
        live, taken = sorted(claims, key=lambda c: c.run_id)
        with store.write() as conn:   # a person's park, say: the fence moves on under the worker
            conn.execute("UPDATE runs SET fence = fence + 1 WHERE id = ?", (taken.run_id,))
        leases = dict(store.conn.execute("SELECT id, lease_expires_at FROM runs").fetchall())
        time.sleep(0.05)
        with _Wire(store) as wire:
            lost = beat(store, "w-test", [(c.run_id, c.fence) for c in claims], 30.0, now())
        assert wire.round_trips() == 1, wire.sent()
        assert lost == [taken.run_id]
        renewed = dict(store.conn.execute("SELECT id, lease_expires_at FROM runs").fetchall())
        assert renewed[live.run_id] > leases[live.run_id] and renewed[taken.run_id] == leases[taken.run_id]
        clock, beat_at = store.conn.execute(
            "SELECT extract(epoch from clock_timestamp())::float8, heartbeat_at FROM workers").fetchone()
        assert 0 <= clock - beat_at < 5 and abs(renewed[live.run_id] - beat_at - 30.0) < 1   # the server's clock
        skew = store.conn.execute("SELECT value FROM meta WHERE key = 'clock_skew:w-test'").fetchone()[0]
        assert abs(float(skew)) < 5
    finally:
        store.close()


def test_a_model_calls_attempt_row_is_one_round_trip_committed_before_its_request(pg_url, monkeypatch):
    """From the step before it committed to the request about to be sent: the attempt's row with its lease
    renewal, its request parts and its reservation, in one round trip; the reply then trades the reservation."""
    store = open_store(pg_url)
    seen_by_provider = []

    def run(ctx, request):
        ctx.step("before", lambda: 1)
        return ctx.model("ask", messages=[{"role": "user", "content": "hi"}], max_tokens=50, system="Be terse.",
                         tools=[{"name": "add", "description": "adds", "input_schema": {"type": "object"}}])

    class Provider(ScriptedProvider):
        def create(self, **request):
            with psycopg.connect(pg_url, autocommit=True) as other:   # what another machine sees now
                seen_by_provider.append(other.execute("SELECT call, state FROM model_calls").fetchall())
            return super().create(**request)

    monkeypatch.setattr("tui_agent.runtime.worker.provider_for", lambda spec, script, replies=None: Provider(script))
    wires = {}
    try:
        registry = registry_of(Agent(name="asks", run=run))
        run_id, _ = start(store, registry, agent_name="asks", request={}, model="scripted")
        with watching(_bracket(store, ("after-step-commit", "before"), ("in-model-call", "ask"), wires)):
            assert work(store, registry, run_id).status == "succeeded"
        assert wires["traced"].round_trips() == 1, wires["traced"].sent()
        assert seen_by_provider == [[(1, "in_flight")]]   # committed before the request left
        assert store.conn.execute("SELECT call, state FROM model_calls").fetchall() == [(1, "answered")]
        assert store.conn.execute("SELECT count(*) FROM request_parts").fetchone()[0] == 2
    finally:
        store.close()


# -- the server ends the step's session under its commit ------------------------------------------------------

@pytest.fixture
def own_server():
    """A server of this test's own: the test changes its configuration (synchronous_standby_names)."""
    server = PgServer(find_bin_dir())
    try:
        server.start()
        yield f"{server.url}/postgres"
    finally:
        server.stop()


class _EndSession:
    """Ends the store's session from another one at the moment the step's single round trip is in flight:
    `committed`, once the server has committed it and waits for a synchronous standby (one that does not exist)
    before it answers, so the client never hears; else while the statement waits for the writers' lock, which
    this session holds, before it has written anything."""

    def __init__(self, url: str, committed: bool) -> None:
        self.url, self.committed, self.ended = url, committed, False
        self.admin = psycopg.connect(url, autocommit=True)

    def arm(self, store) -> None:
        """From inside the step's function, before its commit: set the trap for the store's session."""
        pid = store.conn.raw.info.backend_pid
        if self.committed:
            self.admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
            self.admin.execute("SELECT pg_reload_conf()")
            until("the store's session to wait for a standby at commit", lambda: store.conn.execute(
                "SHOW synchronous_standby_names").fetchone()[0] == "nobody")
            waits_for = ("IPC", "SyncRep")
        else:
            self.admin.execute("SELECT pg_advisory_lock(%s)", (WRITE_LOCK,))
            waits_for = ("Lock", "advisory")
        self.thread = threading.Thread(target=self._end, args=(pid, waits_for))
        self.thread.start()

    def _end(self, pid: int, waits_for: tuple[str, str]) -> None:
        with psycopg.connect(self.url, autocommit=True) as watcher:
            until(f"the step's session to wait on {waits_for}", lambda: watcher.execute(
                "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
                == waits_for, deadline_s=30, every_s=0.005)
            watcher.execute("SELECT pg_terminate_backend(%s)", (pid,))
            until("the session to end", lambda: not watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone(), every_s=0.005)
            self.ended = True
        if self.committed:
            self.admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            self.admin.execute("SELECT pg_reload_conf()")
        else:
            self.admin.execute("SELECT pg_advisory_unlock(%s)", (WRITE_LOCK,))


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "not-committed"])
@pytest.mark.parametrize("cut", [2, FOLD_EVERY - 1], ids=["plain-step", "folding-step"])
def test_a_step_whose_session_the_server_ends_under_its_commit_is_there_exactly_once(own_server, committed, cut):
    """A plain step, or the one whose turn it is to fold the checkpoint (one statement each), cut."""
    store = open_store(own_server)
    end = _EndSession(own_server, committed)
    ran, sent = [], []

    def run(ctx, request):
        out = [ctx.step(f"s{i}", ran.append, f"s{i}") for i in range(cut)]
        out.append(ctx.step(f"s{cut}", lambda: (ran.append(f"s{cut}"), end.arm(store))[0]))   # its commit is cut
        return [*out, ctx.step(f"s{cut + 1}", ran.append, f"s{cut + 1}")]

    try:
        store.conn.set_trace_callback(sent.append)
        outcome = start_and_work(store, registry_of(Agent(name="cut", run=run)), "cut", {})
        store.conn.set_trace_callback(None)
        end.thread.join(timeout=30)
        assert end.ended, "the session was never ended"
        assert (outcome.status, outcome.reason) == ("succeeded", "returned"), outcome
        assert ran == [f"s{i}" for i in range(cut + 2)], "no step ran again"
        rows = store.conn.execute("SELECT position, name, fence FROM journal WHERE run_id = ? ORDER BY position",
                                  (outcome.run_id,)).fetchall()
        assert rows == [(i, f"s{i}", 1) for i in range(cut + 2)]
        assert store.conn.execute("SELECT used_steps FROM checkpoints_now WHERE run_id = ?",
                                  (outcome.run_id,)).fetchone()[0] == cut + 2
    finally:
        store.close()
        end.admin.close()
    writes = [s for s in sent if "INSERT INTO journal_" in s and f"'{outcome.run_id}', 1, {cut}, 's{cut}'," in s]
    assert len(writes) == (1 if committed else 2), writes   # written again only when it had not committed
    assert any(s.startswith("SELECT fence FROM journal WHERE") for s in sent), "the step was read back"


# -- a paused worker woken after a takeover -------------------------------------------------------------------

# The CLI, with every batch the PostgreSQL store sends at once (conn.at_once) logged to the file at argv[1] (each
# plain step's position, fence and rowcount, as JSON lines), and its own clock standing still from the start when
# argv[2] is "frozen".
LOGGED = """
import json, sys
import tui_agent.store.postgres as pg
from tui_agent.runtime.clock import CLOCK
log, sent = open(sys.argv.pop(1), "a"), pg._Connection.at_once
if sys.argv.pop(1) == "frozen":
    CLOCK.freeze(CLOCK.now())
def at_once(self, statements):
    cursors = sent(self, statements)
    for (sql, params), cur in zip(statements, cursors):
        if "INSERT INTO journal_tail" in sql:
            print(json.dumps({"position": params[2], "fence": params[10], "rowcount": cur.rowcount}), file=log,
                  flush=True)
    return cursors
pg._Connection.at_once = at_once
from tui_agent.cli import main
main()
"""


def test_a_paused_worker_woken_after_a_takeover_writes_nothing_through_the_one_round_trip_step(pg_url, tmp_path,
                                                                                            monkeypatch):
    """w-a stops itself after s2's function returned (TUI_AGENT_PAUSE_AT=after-step:3), so its next statement
    once continued is s2's plain step, one round trip; w-b takes the run over once the lease has run out by the
    server's clock and finishes it. Woken, w-a's step reaches the server and is refused by its own fence check:
    nothing of it commits, and the run is as w-b left it. w-a's own clock stands still, as if the pause had not
    happened for it: a worker whose clock sees half its lease gone renews the lease in that step's commit,
    which then goes the other way (a fenced transaction: tests/postgres/test_pg_workers.py pauses a worker that way)."""
    monkeypatch.setenv("TUI_AGENT_DB", pg_url)
    store = open_store(pg_url)
    calls, log = tmp_path / "calls.log", tmp_path / "steps.jsonl"
    run_id = start(store, load_registry(["counting_agents"]), agent_name="counting",
                   request={"log": str(calls), "steps": 5, "delay_s": 0.05})[0]
    a = _worker("w-a", log, pause_at="after-step:3", clock="frozen")
    try:
        until("w-a to stop itself before s2's commit", lambda: a.poll() is not None or process_state(a.pid) == "T")
        assert a.poll() is None, a.communicate()
        until("w-a's lease to end by the server's clock", lambda: store.conn.execute(
            "SELECT lease_expires_at < extract(epoch from clock_timestamp()) FROM runs WHERE id = ?",
            (run_id,)).fetchone()[0], deadline_s=30)
        b = _worker("w-b", log)
        assert b.wait(timeout=60) == 0, b.communicate()
        after_b = (events_for(store, run_id), _journal(store, run_id), get_run(store, run_id))
        assert after_b[2]["status"] == "succeeded" and after_b[2]["fence"] == 2
        a.send_signal(signal.SIGCONT)
        out, err = a.communicate(timeout=60)
    finally:
        if a.poll() is None:
            a.kill()
    assert f"{run_id} was taken by another worker or a person" in out, (out, err)
    assert (events_for(store, run_id), _journal(store, run_id), get_run(store, run_id)) == after_b
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    late = [s for s in steps if s["fence"] == 1 and s["position"] == 2]
    assert late == [{"position": 2, "fence": 1, "rowcount": 0}], steps   # sent, and refused by the server
    assert [p for p, _, f in _journal(store, run_id) if f == 1] == [0, 1]
    store.close()


def _journal(store, run_id: str) -> list[tuple]:
    return store.conn.execute("SELECT position, name, fence FROM journal WHERE run_id = ? ORDER BY position",
                              (run_id,)).fetchall()


def _worker(name: str, log: Path, pause_at: str | None = None, clock: str = "running") -> subprocess.Popen:
    """`tui-agent worker --once` through LOGGED, its batches logged to `log`."""
    env = {**os.environ, **({"TUI_AGENT_PAUSE_AT": pause_at} if pause_at else {})}
    return subprocess.Popen([sys.executable, "-c", LOGGED, str(log), clock, "--agents", "counting_agents", "worker",
                             "--once", "--lease", "1.5", "--name", name], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
