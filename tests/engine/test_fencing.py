import sqlite3

import pytest
from helpers import registry_of

from tui_agent import Agent
from tui_agent.operate import start
from tui_agent.runtime.clock import now
from tui_agent.runtime.worker import execute
from tui_agent.states import TurnEnd
from tui_agent.store import FenceRefused
from tui_agent.store.journal import Entry, add_entry, add_step, fold_step, journal_for, load_checkpoint
from tui_agent.store.runs import (
    check_fence,
    claim_next,
    claim_run,
    events_for,
    get_run,
    settle_run,
)


class LeaseClock:
    """The clock leases are judged by, moved forward: the process's clock (SQLite's workers share it), and on
    PostgreSQL, whose leases are read from the server's clock that no test can move, every stored lease is
    moved back by as much, which is the same thing for every comparison a claim makes."""

    def __init__(self, process_clock, store) -> None:
        self.process_clock, self.store = process_clock, store

    def advance(self, seconds: float) -> None:
        self.process_clock.advance(seconds)
        if not isinstance(self.store.conn, sqlite3.Connection):
            with self.store.write() as conn:
                conn.execute("UPDATE runs SET lease_expires_at = lease_expires_at - ?"
                             " WHERE lease_expires_at IS NOT NULL", (seconds,))


@pytest.fixture
def clock(clock, store):
    return LeaseClock(clock, store)


def _noop_agent():
    return registry_of(Agent(name="noop", run=lambda ctx, req: {"n": ctx.step("one", lambda: 1)}))


def _commit(store, claim, position, name="late"):
    """A step's write as the runtime makes it: fence check (renewing the lease 60 s), entry, checkpoint."""
    at = now()
    with store.write() as conn:
        check_fence(conn, claim.run_id, claim.fence, at, at + 60)
        add_entry(conn, claim, Entry(position=position, name=name, kind="step", result="1",
                                     started_at=at, duration_s=0.0),
                  load_checkpoint(store, claim.run_id), at)


def test_a_live_lease_cannot_be_claimed(store):
    registry = _noop_agent()
    run_id, _ = start(store, registry, agent_name="noop", request={})
    assert claim_run(store, run_id, "w-a", 60, now()) is not None
    assert claim_run(store, run_id, "w-b", 60, now()) is None
    assert claim_next(store, "w-b", lease_s=60, agents=["noop"], now=now()) is None


def test_a_write_with_an_old_fence_is_refused_and_changes_nothing(store, clock):
    registry = _noop_agent()
    run_id, _ = start(store, registry, agent_name="noop", request={})
    old = claim_run(store, run_id, "w-a", 10, now())
    _commit(store, old, 0, "first")  # renews the lease for 60 s
    clock.advance(61)
    new = claim_run(store, run_id, "w-b", 10, now())
    assert new.fence == old.fence + 1
    assert new.attempt == 2
    journal_before = journal_for(store, run_id)
    checkpoint_before = load_checkpoint(store, run_id)
    run_before = get_run(store, run_id)
    with pytest.raises(FenceRefused):
        _commit(store, old, 1)
    with pytest.raises(FenceRefused):
        settle_run(store, old, status="succeeded", reason="check_passed", message="stale", now=now())
    assert journal_for(store, run_id) == journal_before
    assert load_checkpoint(store, run_id) == checkpoint_before
    assert get_run(store, run_id) == run_before
    assert not store.conn.in_transaction


def _tables(store, run_id: str) -> tuple:
    """The run's rows in each table a plain step or a fold writes (the tail, the rows, the checkpoint)."""
    return tuple(store.conn.execute(f"SELECT {columns} FROM {table} WHERE run_id = ? ORDER BY 1", (run_id,)).fetchall()
                 for table, columns in (("journal_tail", "position, fence"), ("journal_rows", "position, fence"),
                                        ("checkpoints", "current_step, used_steps, used_wall_s, updated_at")))


@pytest.mark.parametrize("write", ["plain-step", "fold"])
def test_a_plain_step_or_its_fold_with_an_old_fence_is_refused_and_moves_nothing(store, clock, write):
    """A plain step and the plain step that folds the checkpoint (on a server each one statement, its fence
    checked inside it): refused after a takeover, the tail the old worker wrote left where it is, uncounted."""
    run_id, _ = start(store, _noop_agent(), agent_name="noop", request={})
    old = claim_run(store, run_id, "w-a", 10, now())
    for position in range(2):   # plain steps: the tail a fold would move
        add_step(store, old, Entry(position=position, name=f"s{position}", kind="step", result="1", started_at=now(),
                                   duration_s=0.0))
    clock.advance(11)
    assert claim_run(store, run_id, "w-b", 10, now()).fence == old.fence + 1
    before = (_tables(store, run_id), journal_for(store, run_id), load_checkpoint(store, run_id))
    assert before[0][0] == [(0, old.fence), (1, old.fence)]
    at = now()
    with pytest.raises(FenceRefused):
        if write == "fold":
            fold_step(store, old, Entry(position=2, name="s2", kind="step", result="1", started_at=at, duration_s=0.0),
                      load_checkpoint(store, run_id), at)
        else:
            add_step(store, old, Entry(position=2, name="s2", kind="step", result="1", started_at=at, duration_s=0.0))
    assert (_tables(store, run_id), journal_for(store, run_id), load_checkpoint(store, run_id)) == before
    assert not store.conn.in_transaction


def test_a_worker_whose_fence_is_stale_stops_the_run_without_writing(store, clock):
    registry = _noop_agent()
    run_id, _ = start(store, registry, agent_name="noop", request={})
    stale = claim_run(store, run_id, "w-a", 10, now())
    clock.advance(11)
    claim_run(store, run_id, "w-b", 10, now())
    events_before = events_for(store, run_id)
    outcome = execute(store, registry, claim=stale)
    assert (outcome.kind, outcome.settled, outcome.status) == (TurnEnd.REFUSED, None, "refused")
    assert journal_for(store, run_id) == []
    assert events_for(store, run_id) == events_before
    assert get_run(store, run_id)["worker"] == "w-b"


def test_an_expired_lease_is_claimed_again_with_an_event(store, clock):
    registry = _noop_agent()
    run_id, _ = start(store, registry, agent_name="noop", request={})
    first = claim_run(store, run_id, "w-a", 30, now())
    clock.advance(29)
    assert claim_next(store, "w-b", lease_s=30, agents=["noop"], now=now()) is None, "the lease has not expired yet"
    clock.advance(2)
    second = claim_next(store, "w-b", lease_s=30, agents=["noop"], now=now())
    assert second is not None
    assert second.run_id == run_id
    assert (second.attempt, second.fence) == (2, first.fence + 1)
    kinds = [(e["kind"], e["message"]) for e in events_for(store, run_id)]
    assert kinds[-1] == ("takeover", f"lease of w-a expired; claimed by w-b (attempt 2, fence {second.fence})")


def test_steps_renew_the_lease_once_half_of_it_is_gone(store, clock):
    stolen = []

    def slow_step(i):
        clock.advance(20)                      # each step takes 20 s of a 30 s lease
        if i == 2:
            stolen.append(claim_next(store, "w-b", lease_s=30, agents=["slow"], now=now()))
        return i

    def slow_steps(ctx, request):
        return {"done": [ctx.step(f"s{i}", slow_step, i) for i in range(3)]}

    registry = registry_of(Agent(name="slow", run=slow_steps))
    run_id, _ = start(store, registry, agent_name="slow", request={})
    claim = claim_run(store, run_id, "w-a", 30, now())
    assert execute(store, registry, claim=claim).status == "succeeded"
    assert stolen == [None], "60 s into a 30 s lease the run was still held: the steps renewed it"


def test_a_run_whose_lease_is_not_renewed_can_be_taken(store, clock):
    registry = _noop_agent()
    run_id, _ = start(store, registry, agent_name="noop", request={})
    claim = claim_run(store, run_id, "w-a", 30, now())
    clock.advance(25)
    _commit(store, claim, 0, "one")             # renews for 60 s more
    clock.advance(50)
    assert claim_next(store, "w-b", lease_s=30, agents=["noop"], now=now()) is None
    clock.advance(11)
    assert claim_next(store, "w-b", lease_s=30, agents=["noop"], now=now()) is not None


def test_fences_only_grow(store, clock):
    registry = _noop_agent()
    run_id, _ = start(store, registry, agent_name="noop", request={})
    fences = []
    for _ in range(4):
        fences.append(claim_run(store, run_id, "w-a", 1, now()).fence)
        clock.advance(2)
    assert fences == sorted(set(fences))
    assert len(fences) == 4


def test_a_worker_only_claims_agents_it_knows(store):
    registry = _noop_agent()
    start(store, registry, agent_name="noop", request={})
    assert claim_next(store, "w-x", lease_s=30, agents=["other"], now=now()) is None
    assert claim_next(store, "w-x", lease_s=30, agents=["noop"], now=now()) is not None



def test_a_turn_that_settles_the_run_says_so_apart_from_its_status(store, clock):
    registry = _noop_agent()
    run_id, _ = start(store, registry, agent_name="noop", request={})
    outcome = execute(store, registry, claim=claim_run(store, run_id, "w-a", 10, now()))
    assert (outcome.kind, outcome.settled, outcome.status) == (TurnEnd.SETTLED, "succeeded", "succeeded")
    assert get_run(store, run_id)["status"] == outcome.settled


def test_a_settle_with_an_old_fence_is_refused_and_writes_nothing(store, clock):
    """A settle is one batch whose statements each check the fence (one round trip on a server): after a takeover
    it adds no event, moves none of the tail the old worker wrote, counts none of its running time and leaves
    the run's row as the new claim wrote it."""
    run_id, _ = start(store, _noop_agent(), agent_name="noop", request={})
    old = claim_run(store, run_id, "w-a", 10, now())
    for position in range(2):
        add_step(store, old, Entry(position=position, name=f"s{position}", kind="step", result="1", started_at=now(),
                                   duration_s=0.0, wall_s=0.5))
    clock.advance(11)
    assert claim_run(store, run_id, "w-b", 10, now()).fence == old.fence + 1
    before = (_tables(store, run_id), events_for(store, run_id), get_run(store, run_id))
    with pytest.raises(FenceRefused):
        settle_run(store, old, status="failed", reason="error", message="stale", now=now(), error="late",
                   wall_s=30.0)
    assert (_tables(store, run_id), events_for(store, run_id), get_run(store, run_id)) == before
    assert not store.conn.in_transaction


def test_a_settle_folds_the_tail_and_counts_its_time_with_one_event(store, clock):
    """The same batch with the run's own fence: the tail moved into the rows, the checkpoint brought up to it with
    the time since the last entry added, the run's row ended and one event for it."""
    run_id, _ = start(store, _noop_agent(), agent_name="noop", request={})
    claim = claim_run(store, run_id, "w-a", 10, now())
    for position in range(2):
        add_step(store, claim, Entry(position=position, name=f"s{position}", kind="step", result="1",
                                     started_at=now(), duration_s=0.0, wall_s=0.5))
    events = len(events_for(store, run_id))
    settle_run(store, claim, status="succeeded", reason="returned", message="done", now=now(), result="1", wall_s=2.0)
    tail, rows, ((current, used_steps, used_wall_s, _),) = _tables(store, run_id)
    assert tail == [] and rows == [(0, claim.fence), (1, claim.fence)]
    assert (current, used_steps, used_wall_s) == (2, 2, pytest.approx(3.0))
    run = get_run(store, run_id)
    assert (run["status"], run["reason"], run["worker"], run["lease_expires_at"]) == ("succeeded", "returned", None, None)
    assert run["fence"] == claim.fence and run["finished_at"] is not None
    added = events_for(store, run_id)[events:]
    assert [(e["kind"], e["message"], e["fence"]) for e in added] == [("succeeded", "done", claim.fence)]
