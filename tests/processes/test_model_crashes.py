"""Claude calls across `kill -9`, with real worker processes against the fake Messages API on 127.0.0.1:
a recorded reply is never asked for again; a call in flight when its worker died stays visible and counted
(the API may have billed it), and its retry is exactly one new request. On both stores: on PostgreSQL the
killed worker's lease is waited out, as the server's clock judges it (tests/helpers.py, `taken_over`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from fake_messages import USAGE, message
from helpers import ROOT, ok, short_lease, show_json, taken_over

from tui_agent.models import cost_usd
from tui_agent.models.anthropic import DEFAULT_MODEL

AGENTS = ["--agents", "model_agents"]
ANSWERS = ("Four.", "Twelve.")
# what an uninterrupted run ends with: both answers, and the two replies' cost at the default model's price
WHOLE_RESULT = {"answers": list(ANSWERS), "request_ids": ["req_fake01", "req_fake01"]}
WHOLE_COST = 2 * cost_usd(DEFAULT_MODEL, USAGE)


def _start(tui_agent) -> str:
    return ok(tui_agent(*AGENTS, "start", "two-questions", "--model", "anthropic")).stdout.strip()


def _worker(tui_agent, name: str, lease: str = "3", **env: str):
    return tui_agent(*AGENTS, "worker", "--once", "--lease", lease, "--name", name, env=env)


def _play_answers(fake) -> None:
    fake.play(*({"body": message(text)} for text in ANSWERS))


def test_an_uninterrupted_run_asks_twice(tui_agent, fake, database):
    _play_answers(fake)
    run_id = _start(tui_agent)
    ok(_worker(tui_agent, "w-whole"))
    whole = show_json(tui_agent, run_id, *AGENTS)
    assert (whole["run"]["status"], whole["run"]["result"]) == ("succeeded", WHOLE_RESULT)
    assert whole["budget"]["dimensions"]["cost_usd"]["used"] == pytest.approx(WHOLE_COST)
    assert len(fake.requests) == 2
    assert all(r["body"]["stream"] for r in fake.requests)


def test_a_worker_killed_after_a_recorded_reply_is_never_asked_it_again(tui_agent, fake, database):
    _play_answers(fake)
    run_id = _start(tui_agent)
    crashed = _worker(tui_agent, "w-1", short_lease(database, 3), TUI_AGENT_CRASH_AT="after-model-commit:1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(fake.requests) == 1
    assert [e["name"] for e in show_json(tui_agent, run_id, *AGENTS)["journal"]] == ["ask"]

    ok(_worker(tui_agent, "w-2", **taken_over(database, run_id)))
    report = show_json(tui_agent, run_id, *AGENTS)
    assert report["run"]["status"] == "succeeded"
    assert report["run"]["result"] == WHOLE_RESULT
    assert len(fake.requests) == 2  # the recorded reply was replayed: only the follow-up went out
    assert [r["body"]["messages"][-1]["content"] for r in fake.requests] == ["What is two and two?",
                                                                             "And times three?"]
    assert [(c["name"], c["state"]) for c in report["model_calls"]] == [("ask", "answered"), ("follow-up", "answered")]
    assert report["budget"]["dimensions"]["cost_usd"]["used"] == pytest.approx(WHOLE_COST)


def _kill_mid_request(fake, kill_after_s: float) -> None:
    worker = subprocess.Popen([sys.executable, "-m", "tui_agent", *AGENTS, "worker", "--once", "--lease", "3",
                               "--name", "w-1"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert fake.wait_for_requests(1, timeout=30), "the worker never asked"
        time.sleep(kill_after_s)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)


# where the stream was cut (before any byte, or mid-stream) is the HTTP client's difference, not the store's: the
# call in flight, its death and its retry are the same rows; SQLite has both, PostgreSQL the mid-stream one
@pytest.mark.postgres_case(kill_after_s=0.8)
@pytest.mark.parametrize("slow, kill_after_s", [
    pytest.param({"hang_s": 30}, 0.0, id="before-any-byte"),
    pytest.param({"event_delay_s": 0.3}, 0.8, id="mid-stream"),
])
def test_a_worker_killed_mid_request_leaves_the_call_in_flight_counted_and_retries_it_once(tui_agent, fake, database,
                                                                                           slow, kill_after_s):
    fake.play({"body": message("Four, and a long way to say it " * 20), **slow})
    run_id = _start(tui_agent)
    _kill_mid_request(fake, kill_after_s)
    shown = show_json(tui_agent, run_id, *AGENTS)
    (in_flight,) = shown["model_calls"]
    assert (in_flight["name"], in_flight["state"]) == ("ask", "in_flight")  # its lease has not run out yet
    held = in_flight["reserved_usd"]
    assert held > 0
    assert shown["budget"]["dimensions"]["cost_usd"]["used"] == pytest.approx(held)

    _play_answers(fake)
    # its lease (3 s, renewed by the heartbeat until the kill) must not have run out before the `show` above;
    # on PostgreSQL the test then waits it out, at most 3 s
    ok(_worker(tui_agent, "w-2", **taken_over(database, run_id)))
    report = show_json(tui_agent, run_id, *AGENTS)
    assert report["run"]["status"] == "succeeded"
    assert report["run"]["result"] == WHOLE_RESULT
    assert len(fake.requests) == 3  # the call in flight was asked once more; nothing else was repeated
    assert [(c["position"], c["call"], c["state"]) for c in report["model_calls"]] == [
        (0, 1, "died"), (0, 2, "answered"), (1, 1, "answered")]
    # the budget counts both: the dead call's reservation (possibly billed) and what the others really cost
    assert report["budget"]["dimensions"]["cost_usd"]["used"] == pytest.approx(WHOLE_COST + held)
    assert report["budget"]["possibly_billed_usd"] == pytest.approx(held)
    assert report["budget"]["dimensions"]["model_calls"]["used"] == 3
    shown = ok(tui_agent(*AGENTS, "show", run_id)).stdout
    assert f"in flight when the worker died, possibly billed ${held:.4f}" in shown


def test_a_worker_killed_after_its_call_is_committed_but_before_it_is_sent(tui_agent, fake, database):
    _play_answers(fake)
    run_id = _start(tui_agent)
    crashed = _worker(tui_agent, "w-1", short_lease(database, 3), TUI_AGENT_CRASH_AT="in-model-call:1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert fake.requests == []
    ok(_worker(tui_agent, "w-2", **taken_over(database, run_id)))
    report = show_json(tui_agent, run_id, *AGENTS)
    assert report["run"]["status"] == "succeeded"
    assert len(fake.requests) == 2
    # nobody can tell whether a request left before the kill, so the call counts as possibly billed
    assert [c["state"] for c in report["model_calls"]] == ["died", "answered", "answered"]
