"""Retries: temporary errors only, full-jitter back-off within bounds, attempts that survive a
crash, and a long back-off that becomes a durable wait."""

import random

import pytest
from helpers import registry_of, start_and_work, work
from hypothesis import given
from hypothesis import strategies as st

from tui_agent import Agent, RetryPolicy
from tui_agent.errors import PermanentError, TemporaryError
from tui_agent.operate import start
from tui_agent.runtime import faults
from tui_agent.runtime.clock import now
from tui_agent.runtime.retry import backoff_s, is_temporary
from tui_agent.store import open_store
from tui_agent.store.journal import journal_for
from tui_agent.store.runs import claim_next, events_for, get_run

FAST = RetryPolicy(attempts=3, base_s=0.001, cap_s=0.002)


@given(base=st.floats(0.001, 100), cap=st.floats(0.001, 1000), attempt=st.integers(1, 60),
       draw=st.floats(0, 1, exclude_max=True))
def test_backoff_stays_within_full_jitter_bounds(base, cap, attempt, draw):
    policy = RetryPolicy(attempts=attempt + 1, base_s=base, cap_s=cap)
    delay = backoff_s(policy, attempt, lambda: draw)
    assert 0 <= delay <= min(cap, base * 2 ** (attempt - 1))


def test_backoff_grows_then_caps():
    policy = RetryPolicy(attempts=10, base_s=1, cap_s=10)
    assert [backoff_s(policy, n, lambda: 0.999999) for n in (1, 2, 3, 4, 5)] == pytest.approx(
        [1, 2, 4, 8, 10], rel=1e-5)


@pytest.mark.parametrize("error, temporary", [
    (TemporaryError("429"), True), (TimeoutError(), True), (ConnectionResetError(), True),
    (PermanentError("400"), False), (ValueError("bad"), False), (KeyError("x"), False),
])
def test_only_temporary_errors_are_retried(error, temporary):
    assert is_temporary(error) is temporary


class Flaky:
    """Fails with `error` the first `failures` calls, then returns 'ok'."""

    def __init__(self, failures, error=TimeoutError("slow")):  # noqa: B008 - raised, never changed
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def _agent(fn, retry=FAST):
    return registry_of(Agent(name="flaky", run=lambda ctx, r: {"v": ctx.step("call", fn)}, retry=retry))


def test_a_temporary_error_is_retried_until_it_succeeds(store):
    fn = Flaky(2)
    outcome = start_and_work(store, _agent(fn), "flaky", {})
    assert outcome.status == "succeeded"
    assert fn.calls == 3
    assert journal_for(store, outcome.run_id)[0]["attempts"] == 3
    retries = [e["message"] for e in events_for(store, outcome.run_id) if e["kind"] == "retry"]
    assert len(retries) == 2
    assert retries[0].startswith("call: attempt 1 failed (TimeoutError: slow)")


@pytest.mark.parametrize("error", [ValueError("bad input"), PermanentError("refused")])
def test_other_errors_fail_at_once(store, error):
    fn = Flaky(1, error)
    outcome = start_and_work(store, _agent(fn), "flaky", {})
    assert (outcome.status, outcome.reason, fn.calls) == ("failed", "error", 1)


def test_when_attempts_run_out_the_run_fails_and_says_so(store):
    fn = Flaky(10)
    outcome = start_and_work(store, _agent(fn), "flaky", {})
    assert (outcome.status, outcome.reason, fn.calls) == ("failed", "error", 3)
    assert get_run(store, outcome.run_id)["error"] == \
        "step 0 'call' raised TimeoutError: slow (attempt 3, the last allowed)"


def test_the_attempt_count_survives_a_crash(db_path, clock):
    calls = []

    def fails_then_crashes():
        calls.append(1)
        if len(calls) == 2:
            raise faults.SimulatedCrash("mid-attempt")   # the worker dies during attempt 2
        raise TimeoutError("slow")

    store = open_store(db_path)
    registry = _agent(fails_then_crashes)
    run_id, _ = start(store, registry, agent_name="flaky", request={})
    with pytest.raises(faults.SimulatedCrash):
        work(store, registry, run_id)
    store = open_store(db_path)
    clock.advance(61)
    outcome = work(store, registry, run_id, worker="w-2")
    # attempt 1 failed and was recorded; attempt 2 died with the worker before anything was recorded, so
    # the new worker makes attempts 2 and 3: four calls. Had the count been reset, there would be five.
    assert len(calls) == 4
    assert outcome.status == "failed"
    assert "(attempt 3, the last allowed)" in outcome.error


def test_a_long_backoff_becomes_a_wait(store, clock, monkeypatch):
    monkeypatch.setattr(random, "random", lambda: 0.9)
    fn = Flaky(1)
    registry = _agent(fn, RetryPolicy(attempts=3, base_s=100, cap_s=600, wait_over_s=30))
    first = start_and_work(store, registry, "flaky", {})
    run = get_run(store, first.run_id)
    assert (run["status"], run["reason"]) == ("waiting", "retry")
    assert run["wake_at"] - now() == pytest.approx(90, abs=2)
    assert claim_next(store, "w-2", lease_s=30, agents=["flaky"], now=now()) is None, "no worker is held or woken early"
    clock.advance(91)
    second = work(store, registry, first.run_id, worker="w-2")
    assert second.status == "succeeded"
    assert fn.calls == 2
    assert journal_for(store, first.run_id)[0]["attempts"] == 2
