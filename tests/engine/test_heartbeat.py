"""The heartbeat thread renews held leases with their fences, marks the worker alive, and tells a
run whose lease was taken to stop at its next journaled call."""

import time

import pytest
from helpers import registry_of

from tui_agent import Agent, operate
from tui_agent.runtime.clock import now
from tui_agent.runtime.heartbeat import Heartbeat
from tui_agent.store import FenceRefused
from tui_agent.store.runs import claim_run, get_run
from tui_agent.store.workers import workers_listing


def _wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def held(store):
    """A queued run claimed by w-hb, whose heartbeat (a 0.6 s lease) holds it: (run id, heartbeat, control)."""
    registry = registry_of(Agent(name="idle", run=lambda ctx, r: {}))
    run_id, _ = operate.start(store, registry, agent_name="idle", request={})
    heartbeat = Heartbeat(store.path, "full", worker="w-hb", lease_s=0.6)
    try:
        yield run_id, heartbeat, heartbeat.hold(claim_run(store, run_id, "w-hb", 0.6, now()))
    finally:
        heartbeat.close()


def test_heartbeats_renew_the_lease_and_the_worker_row(store, held):
    run_id, heartbeat, _ = held
    first = get_run(store, run_id)["lease_expires_at"]
    assert _wait_for(lambda: get_run(store, run_id)["lease_expires_at"] > first + 0.3), "the lease was not renewed"
    (row,) = workers_listing(store)
    assert row["name"] == "w-hb"
    assert now() - row["heartbeat_at"] < 0.6
    assert row["stopped_at"] is None
    assert row["runs"][0]["id"] == run_id
    heartbeat.close()
    (row,) = workers_listing(store)
    assert row["stopped_at"] is not None


def test_a_refused_heartbeat_stops_the_run_at_its_next_call(store, held):
    run_id, _, control = held
    operate.park(store, run_id)               # a person takes the run: the fence grows
    assert _wait_for(lambda: control._error is not None), "the heartbeat did not notice"
    with pytest.raises(FenceRefused):
        control.check()
