"""Claims, heartbeats and step commits on PostgreSQL are shared writers (store.write_shared, docs/architecture.md
section 12): they commit side by side, ordered only by the run's row lock, while an operator's exclusive
`write()` still waits for them. Each test here fails if that order is broken: two claimers take one run, a
claim waits for a row another transaction holds, an operator's decision lands inside a step's transaction, or a
worker that lost its run commits an entry (or hits a database error) instead of hearing the fence refuse it."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter

import psycopg
import pytest

from tui_agent.states import Reason, RunStatus
from tui_agent.store import FenceRefused, open_store
from tui_agent.store.journal import Entry, add_entry, add_step, load_checkpoint
from tui_agent.store.runs import (
    cancel,
    claim_next,
    claim_run,
    create_run,
    events_for,
    get_run,
    settle_run,
)

pytestmark = pytest.mark.postgres
AGENT = "hello"
ROUNDS = 4   # of 120 runs each, for two processes that start claiming at once


def _queue(store, count: int) -> list[str]:
    """`count` queued runs, oldest first (created a millisecond apart, so the claim order is known)."""
    start = time.time()
    return [create_run(store, now=start + i / 1000, agent=AGENT, agent_version="1", code_version="c", request="{}",
                       budget="{}", model="scripted")[0] for i in range(count)]


def _step(store, claim, position: int, result: str = "1") -> None:
    """A plain step's commit, as Context makes it (add_step: one fenced statement)."""
    at = time.time()
    add_step(store, claim, Entry(position=position, name="one", kind="step", result=result,
                                 started_at=at, duration_s=0.0))


def _claimer(url: str, name: str, go, results) -> None:
    """A worker's loop without the agent: claim, one step, settle, until nothing is due (a refused fence lets
    the run go, as a worker does). Sends the runs it claimed and the error that stopped it, if any."""
    store = open_store(url)
    taken, error = [], None
    go.wait()
    try:
        while (claim := claim_next(store, name, lease_s=60.0, agents=[AGENT], now=time.time)) is not None:
            taken.append(claim.run_id)
            try:
                _step(store, claim, 0)
                settle_run(store, claim, status=RunStatus.SUCCEEDED, reason=Reason.RETURNED, message="done",
                           now=time.time())
            except FenceRefused:
                pass
    except Exception as e:  # noqa: BLE001 - sent to the test, which fails on it
        error = repr(e)
    store.close()
    results.put((taken, error))


def test_two_claiming_processes_never_take_one_run(pg_url):
    fork = multiprocessing.get_context("fork")
    store = open_store(pg_url)
    try:
        for _ in range(ROUNDS):
            runs = _queue(store, 120)
            go, results = fork.Event(), fork.Queue()
            claimers = [fork.Process(target=_claimer, args=(pg_url, f"w{i}", go, results)) for i in range(2)]
            for process in claimers:
                process.start()
            go.set()
            taken, errors = zip(*(results.get(timeout=120) for _ in claimers))
            for process in claimers:
                process.join(30)
            assert errors == (None, None)
            assert all(taken), f"both processes claimed: {[len(t) for t in taken]}"
            claimed = Counter(run_id for each in taken for run_id in each)
            assert set(claimed) == set(runs) and set(claimed.values()) == {1}, claimed.most_common(3)
            rows = store.conn.execute("SELECT status, fence, attempt, (SELECT count(*) FROM events e WHERE"
                                      " e.run_id = r.id AND e.kind = 'claimed'), (SELECT count(*) FROM journal j"
                                      " WHERE j.run_id = r.id) FROM runs r WHERE r.id IN (" +
                                      ", ".join("?" for _ in runs) + ")", runs).fetchall()
            assert Counter(rows) == {(RunStatus.SUCCEEDED, 1, 1, 1, 1): len(runs)}
    finally:
        store.close()


def test_a_claim_passes_over_a_row_another_transaction_holds(pg_url):
    store = open_store(pg_url)
    oldest, second, _ = _queue(store, 3)
    holder = psycopg.connect(pg_url)
    holder.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE", (oldest,))
    release = threading.Timer(10, holder.rollback)
    release.start()
    try:
        began = time.monotonic()
        claim = claim_next(store, "w", lease_s=60.0, agents=[AGENT], now=time.time)
        waited = time.monotonic() - began
        assert (claim.run_id, waited < 2) == (second, True), f"claimed {claim.run_id} after {waited:.1f} s"
        assert get_run(store, oldest)["status"] == RunStatus.QUEUED
    finally:
        release.cancel()
        holder.close()
        store.close()


def test_an_operators_write_waits_for_a_step_in_flight_and_decides_on_what_it_committed(pg_url):
    store = open_store(pg_url)
    (run_id,) = _queue(store, 1)
    claim = claim_run(store, run_id, "w", 60.0, time.time)
    worker, operator = open_store(pg_url), open_store(pg_url)
    inside, go, cancelled = threading.Event(), threading.Event(), []

    def step_in_flight() -> None:
        with worker.write_shared() as conn:
            at = time.time()
            add_entry(conn, claim, Entry(position=0, name="one", kind="step", result="1",
                                         started_at=at, duration_s=0.0),
                      load_checkpoint(worker, run_id), at)
            inside.set()
            go.wait(10)

    def cancel_it() -> None:
        """A decision on what it read first (how far the run got), as an operator's command makes one."""
        with operator.write() as conn:
            steps = conn.execute("SELECT count(*) FROM journal WHERE run_id = ?", (run_id,)).fetchone()[0]
            cancel(conn, run_id, RunStatus.RUNNING, f"cancelled by a person after {steps} steps", time.time())
            cancelled.append(steps)

    stepping, cancelling = threading.Thread(target=step_in_flight), threading.Thread(target=cancel_it)
    try:
        stepping.start()
        assert inside.wait(10)
        cancelling.start()
        cancelling.join(1.0)
        assert cancelling.is_alive(), "the operator's write ran beside a step's transaction"
        go.set()
        stepping.join(10)
        cancelling.join(10)
        assert cancelled == [1]   # it read the step, committed before it began
        assert get_run(store, run_id)["status"] == RunStatus.CANCELLED
        with pytest.raises(FenceRefused):
            _step(worker, claim, 1)
    finally:
        go.set()
        for store_ in (store, worker, operator):
            store_.close()


def test_a_step_of_a_worker_that_lost_its_run_waits_for_the_takeover_and_is_refused(pg_url):
    store = open_store(pg_url)
    (run_id,) = _queue(store, 1)
    zombie_store, owner_store = open_store(pg_url), open_store(pg_url)
    zombie = claim_run(zombie_store, run_id, "zombie", 0.2, time.time)
    time.sleep(0.5)   # its lease ends (by the server's clock)
    refused, blocked = [], []

    def zombie_step() -> None:
        try:
            _step(zombie_store, zombie, 0, '"late"')
            refused.append(None)
        except Exception as e:  # noqa: BLE001 - which error it is, is the point
            refused.append(e)

    def inside_the_takeover(sql: str) -> None:
        """The takeover has locked and moved the run's row (fence 2), not committed: the zombie commits now."""
        if sql.startswith("INSERT INTO events") and not blocked:
            late = threading.Thread(target=zombie_step)
            late.start()
            late.join(1.0)
            blocked.append(late.is_alive())

    owner_store.conn.set_trace_callback(inside_the_takeover)
    try:
        owner = claim_next(owner_store, "owner", lease_s=60.0, agents=[AGENT], now=time.time)
        owner_store.conn.set_trace_callback(None)
        assert (owner.run_id, owner.fence) == (run_id, 2)
        deadline = time.monotonic() + 10
        while not refused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert blocked == [True], "the zombie's commit did not wait for the run's row"
        assert len(refused) == 1 and isinstance(refused[0], FenceRefused), refused
        _step(owner_store, owner, 0)
        assert store.conn.execute("SELECT position, fence FROM journal WHERE run_id = ?", (run_id,)).fetchall() \
            == [(0, 2)]
        assert [e["kind"] for e in events_for(store, run_id)][-1] == "takeover"
    finally:
        for store_ in (store, zombie_store, owner_store):
            store_.close()
