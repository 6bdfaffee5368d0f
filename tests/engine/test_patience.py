"""A dropped network waits; it does not fail. A service that is not reachable (the fake Messages API taken off its
port, a step's ConnectionError or TimeoutError) is retried for a length of time, the retry policy's patience,
rather than three quick attempts: the run waits to retry with no worker holding it, goes on when the service is
back, and parks with reason `environment` when the patience runs out (never `failed`). The clock fixture moves
time, so six hours of patience take no time at all."""

from __future__ import annotations

import json
import random

import pytest
from fake_messages import message
from helpers import key, ok, registry_of, select, strip, tui, work

from tui_agent import Agent, RetryPolicy
from tui_agent.errors import NotReachable, PermanentError, TemporaryError
from tui_agent.operate import resume, start
from tui_agent.report import runs_listing
from tui_agent.runtime.agent import DEFAULT_RETRY, PATIENCE_S
from tui_agent.runtime.clock import iso, now
from tui_agent.runtime.retry import after_failure
from tui_agent.store import open_store
from tui_agent.store.effects import effects_for
from tui_agent.store.journal import checkpoint_for, journal_for
from tui_agent.store.runs import claim_next, events_for, get_run

QUICK = 5         # draws that keep the first back-offs short (slept in the worker)
LONG = 0.99       # then a draw whose back-off is longer than wait_over_s: a durable wait


@pytest.fixture
def draws(monkeypatch):
    """The back-off's jitter: QUICK tiny draws, then LONG ones, so the default policy's waits are slept for
    milliseconds until the one that grows past 30 s (attempt 6's, 0.99 x 32 s) becomes a durable wait."""
    drawn = iter([0.001] * QUICK)
    monkeypatch.setattr(random, "random", lambda: next(drawn, LONG))


class Fetches:
    """A step before the model call, counting how often it runs: a resumed run must not run it again."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return "the sources"


def summarizer(fetch: Fetches, retry: RetryPolicy | None = None) -> Agent:
    def run(ctx, request):
        sources = ctx.step("fetch", fetch)
        reply = ctx.model("summarize", messages=[{"role": "user", "content": sources}], max_tokens=64)
        return reply["content"][0]["text"]

    return Agent(name="summarizer", run=run, retry=retry)


def waiting_to_retry(store, fake, fetch: Fetches, **budget) -> tuple[object, str]:
    """A summarizer run (default retry policy) worked while the API is down: it ends waiting to retry."""
    registry = registry_of(summarizer(fetch))
    fake.down()
    run_id, _ = start(store, registry, agent_name="summarizer", request={}, model="anthropic", budget=budget or None)
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("waiting", "retry"), outcome
    return registry, run_id


def test_with_default_settings_a_run_waits_out_an_api_that_is_down_and_then_succeeds(fake, store, clock, draws):
    fetch = Fetches()
    registry, run_id = waiting_to_retry(store, fake, fetch)
    run = get_run(store, run_id)
    assert (run["worker"], run["lease_expires_at"]) == (None, None)      # no worker holds it while it waits
    assert run["wake_at"] - now() == pytest.approx(LONG * 32, abs=1)
    assert claim_next(store, "w-2", lease_s=60, agents=["summarizer"], now=now()) is None   # not before its next try
    retry = next(r for r in runs_listing(store) if r["id"] == run_id)["retry"]
    assert retry["attempt"] == QUICK + 2                                  # six attempts failed
    assert retry["last_error"] == "step 1 'summarize' raised NotReachable: could not reach Claude: Connection error."
    assert retry["next_try_at"] == iso(run["wake_at"])

    clock.advance(20)
    fake.up()                                                             # back after 20 s
    fake.play({"body": message("summed up")})
    clock.advance(LONG * 32 - 20 + 1)
    done = work(store, registry, run_id, worker="w-2")
    assert (done.status, done.result) == ("succeeded", "summed up")
    assert fetch.calls == 1 and len(fake.requests) == 1
    assert journal_for(store, run_id)[1]["attempts"] == QUICK + 2
    assert get_run(store, run_id)["error"] is None


def test_an_agents_own_short_policy_still_fails_when_the_api_is_down(fake, store):
    registry = registry_of(summarizer(Fetches(), RetryPolicy(attempts=3, base_s=0.001, cap_s=0.002)))
    fake.down()
    run_id, _ = start(store, registry, agent_name="summarizer", request={}, model="anthropic")
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("failed", "error")
    assert get_run(store, run_id)["error"] == ("step 1 'summarize' raised NotReachable: could not reach Claude: "
                                               "Connection error. (attempt 3, the last allowed)")


def test_past_its_patience_a_run_parks_environment_and_resumes_from_its_failed_step(fake, store, clock, draws):
    fetch = Fetches()
    # a wall-clock ceiling far below the patience: a run waiting to retry is not running, so it does not count
    registry, run_id = waiting_to_retry(store, fake, fetch, wall_s=60)
    first_failure = min(e["at"] for e in events_for(store, run_id) if e["kind"] == "retry")

    clock.set(first_failure + PATIENCE_S - 45)      # the worker comes back 45 s before the patience ends
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("waiting", "retry")
    assert get_run(store, run_id)["wake_at"] == pytest.approx(first_failure + PATIENCE_S)  # the last try, then

    clock.set(first_failure + PATIENCE_S + 1)
    parked = work(store, registry, run_id)
    assert (parked.status, parked.reason) == ("parked", "environment")
    assert parked.message.startswith("parked: step 1 'summarize' has not reached its service for 6h (8 attempts, "
                                     "the last raised NotReachable: could not reach Claude: Connection error.), "
                                     "past its retry policy's patience of 6h; once the service is reachable, "
                                     f"tui-agent resume {run_id}")
    assert get_run(store, run_id)["error"] == \
        "step 1 'summarize' raised NotReachable: could not reach Claude: Connection error."

    fake.up()
    fake.play({"body": message("at last")})
    resume(store, run_id)
    assert checkpoint_for(store, run_id)["step_attempts"] == 0   # a fresh set of attempts, and of patience
    done = work(store, registry, run_id, worker="w-2")
    assert (done.status, done.result) == ("succeeded", "at last")
    assert fetch.calls == 1                                      # from its failed step: the fetch is not run again


@pytest.mark.parametrize("error", [ConnectionResetError("reset"), TimeoutError("slow"), NotReachable("503")])
def test_not_reachable_is_retried_past_the_attempts_for_as_long_as_the_patience(error):
    assert after_failure(DEFAULT_RETRY, error, 50, lambda: PATIENCE_S - 1).again
    assert after_failure(DEFAULT_RETRY, error, 50, lambda: PATIENCE_S - 1).delay_s <= 1
    out = after_failure(DEFAULT_RETRY, error, 50, lambda: PATIENCE_S)
    assert (out.again, out.out_of_patience) == (False, True)
    assert not after_failure(RetryPolicy(), error, 3, lambda: 0).again   # no patience: the attempts decide


@pytest.mark.parametrize("error", [TemporaryError("409 conflict"), PermanentError("400"), ValueError("bad")])
def test_other_errors_get_no_patience(error):
    later = after_failure(DEFAULT_RETRY, error, 3, lambda: 0)
    assert (later.again, later.out_of_patience) == (False, False)


def test_an_effect_whose_do_raises_connection_error_is_reconciled_not_retried(store):
    sent = []

    def send(key):
        sent.append(key)
        raise ConnectionError("the connection dropped after the request went out")

    agent = Agent(name="mailer", run=lambda ctx, r: ctx.effect("send", key="mail:1", do=send))
    registry = registry_of(agent)
    run_id, _ = start(store, registry, agent_name="mailer", request={})
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("waiting", "reconcile")   # a person decides; no blind resend
    assert sent == ["mail:1"]
    assert [e["state"] for e in effects_for(store, run_id)] == ["unknown"]


def test_resume_of_a_run_waiting_to_retry_tries_now(fake, database, clock, draws, tui_agent):
    store = open_store(database)
    registry, run_id = waiting_to_retry(store, fake, Fetches())
    listed = ok(tui_agent("ls")).stdout
    assert f"{run_id} waits to retry: attempt 7 at " in listed
    assert "; the last: step 1 'summarize' raised NotReachable: could not reach Claude" in listed
    assert json.loads(ok(tui_agent("ls", "--json")).stdout)[0]["retry"]["attempt"] == 7
    assert "tries now" in ok(tui_agent("show", run_id)).stdout

    said = ok(tui_agent("resume", run_id)).stdout
    assert said == f"{run_id}: tries again now (it was waiting to retry); a worker will pick it up\n"
    run = get_run(store, run_id)
    assert (run["status"], run["reason"], run["wake_at"]) == ("queued", "resumed", None)
    assert claim_next(store, "w-2", lease_s=60, agents=["summarizer"], now=now()) is not None   # claimable at once
    assert checkpoint_for(store, run_id)["step_attempts"] == QUICK + 1      # counted on, not started over


async def test_the_tui_shows_a_run_waiting_to_retry_and_r_tries_now(fake, db_path, clock, draws):
    store = open_store(db_path)
    _, run_id = waiting_to_retry(store, fake, Fetches())
    toasts = []
    async with tui(db_path, toasts=toasts) as (app, pilot):
        await select(pilot, run_id)
        said = strip(app)
        assert f"{run_id} · summarizer · waiting to retry: attempt 7 at " in said
        assert "r tries now" in said
        assert "the last: step 1 'summarize' raised NotReachable: could not reach Claude: Connection error." in said
        await key(pilot, "enter")
        header = str(app.screen.query_one("#run-header").content)
        assert "waiting: retry" in header and " · next try: attempt 7 at " in header
        await key(pilot, "r")
        assert (get_run(store, run_id)["status"], get_run(store, run_id)["reason"]) == ("queued", "resumed")
        assert f"{run_id} tries again now (it was waiting to retry); a worker will pick it up" in toasts
        await key(pilot, "escape")
        assert f"{run_id} · summarizer · queued (resumed)" in strip(app)
