"""runtime/here.work_here, what `tui-agent run` does after starting its run: claim it, hold it with a heartbeat,
execute it in this process and let go; a run held elsewhere is left alone; ctrl+c hands the run back."""

import threading

import pytest
from helpers import registry_of

from tui_agent import Agent, operate
from tui_agent.runtime.clock import now
from tui_agent.runtime.here import INTERRUPTED, HandedBack, work_here
from tui_agent.states import RunStatus
from tui_agent.store.events import events_page
from tui_agent.store.runs import claim_run, get_run


def _two_steps(ctx, request):
    return {"sum": ctx.step("one", lambda: 1) + ctx.step("two", lambda: 2)}


REGISTRY = registry_of(Agent(name="two-steps", run=_two_steps))


def _heartbeats() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith("heartbeat")}


def test_it_claims_works_the_run_here_and_lets_go(store):
    run_id, _ = operate.start(store, REGISTRY, agent_name="two-steps", request={})
    before = _heartbeats()
    seen = []
    outcome = work_here(store, REGISTRY, run_id=run_id, lease_s=5.0,
                        on_step=lambda ctx, position, name, replayed: seen.append((position, name, replayed)))
    assert (outcome.run_id, outcome.status, outcome.result) == (run_id, RunStatus.SUCCEEDED, {"sum": 3})
    assert seen == [(0, "one", False), (1, "two", False)]
    row = get_run(store, run_id)
    assert (row["status"], row["worker"], row["attempt"]) == ("succeeded", None, 1)
    assert _heartbeats() == before   # its heartbeat thread ended with the run


def test_a_run_another_worker_holds_is_left_alone(store):
    run_id, _ = operate.start(store, REGISTRY, agent_name="two-steps", request={})
    held = claim_run(store, run_id, "w-other", 60.0, now())
    assert work_here(store, REGISTRY, run_id=run_id, lease_s=5.0) is None
    row = get_run(store, run_id)
    assert (row["status"], row["worker"], row["fence"]) == ("running", "w-other", held.fence)


def test_ctrl_c_hands_the_run_back_at_once(store):
    run_id, _ = operate.start(store, REGISTRY, agent_name="two-steps", request={})

    def interrupted(ctx, position, name, replayed):
        if name == "two":
            raise KeyboardInterrupt

    with pytest.raises(HandedBack) as raised:
        work_here(store, REGISTRY, run_id=run_id, lease_s=60.0, on_step=interrupted)
    assert isinstance(raised.value, KeyboardInterrupt)   # a caller that knows nothing of HandedBack still stops
    row = get_run(store, run_id)
    assert (row["status"], row["worker"]) == ("queued", None)   # claimable now, not when the 60 s lease runs out
    assert any(INTERRUPTED in event["message"] for event in events_page(store, run_id))
