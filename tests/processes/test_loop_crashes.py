"""An agent loop across `kill -9`, with real worker processes against the fake Messages API: no recorded turn
is asked again, no recorded tool runs again, and the effect tool's email goes out once. On both stores: on
PostgreSQL the killed worker's lease is a short one that the test waits out, as the server's clock judges it
(tests/helpers.py, `taken_over`)."""

from __future__ import annotations

import json
import mailbox
import signal
from collections import Counter

import pytest
from fake_messages import message
from helpers import ok, short_lease, show_json, taken_over

AGENTS = ["--agents", "model_agents"]
TURNS = (
    {**message(), "stop_reason": "tool_use",
     "content": [{"type": "tool_use", "id": "toolu_read", "name": "read_note", "input": {"name": "today"}}]},
    {**message(), "stop_reason": "tool_use",
     "content": [{"type": "tool_use", "id": "toolu_send", "name": "send_note",
                  "input": {"to": "ops@example.com", "body": "deploy at noon"}}]},
    message("Sent."),
)
WHOLE = {"stopped": "end_turn", "turns": 3, "tool_calls": 2, "text": "Sent."}


def _emails(tmp_path) -> int:
    return len(mailbox.Maildir(tmp_path / "outbox", factory=None, create=False))


def _ran(tmp_path) -> Counter:
    log = tmp_path / "calls.log"
    return Counter(line.split()[0] for line in log.read_text().splitlines()) if log.exists() else Counter()


def _start(tui_agent, tmp_path) -> str:
    request = {"log": str(tmp_path / "calls.log"), "outbox": str(tmp_path / "outbox")}
    return ok(tui_agent(*AGENTS, "start", "note-taker", "--model", "anthropic", "--input",
                         json.dumps(request))).stdout.strip()


def _worker(tui_agent, name: str, lease: str = "3", **env: str):
    return tui_agent(*AGENTS, "worker", "--once", "--lease", lease, "--name", name, env=env)


def test_an_uninterrupted_loop_reads_sends_and_ends(tui_agent, fake, tmp_path, database):
    fake.play(*({"body": turn} for turn in TURNS))
    run_id = _start(tui_agent, tmp_path)
    ok(_worker(tui_agent, "w-whole"))
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["result"]) == ("succeeded", WHOLE)
    assert len(fake.requests) == 3
    assert _emails(tmp_path) == 1
    assert _ran(tmp_path) == Counter({"read_note": 1, "send_note": 1})
    assert [(e["name"], e["kind"]) for e in report["journal"]] == [
        ("notes/turn 1", "model"), ("notes/read_note", "tool"), ("notes/turn 2", "model"),
        ("notes/send_note", "effect"), ("notes/send_note", "tool"), ("notes/turn 3", "model")]


@pytest.mark.parametrize("point, asked_first", [
    ("after-model-commit:2", 2),   # the reply asking to send is recorded; the email is not sent yet
    ("after-tool-commit:1", 1),    # the note's content is recorded; the model has not seen it yet
])
def test_a_worker_killed_after_a_recorded_turn_or_tool_result_repeats_neither(tui_agent, fake, tmp_path, database,
                                                                              point, asked_first):
    fake.play(*({"body": turn} for turn in TURNS))
    run_id = _start(tui_agent, tmp_path)
    crashed = _worker(tui_agent, "w-1", short_lease(database, 3), TUI_AGENT_CRASH_AT=point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert len(fake.requests) == asked_first
    ok(_worker(tui_agent, "w-2", **taken_over(database, run_id)))
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["result"]) == ("succeeded", WHOLE)
    assert len(fake.requests) == 3   # each turn asked once, across both workers
    assert _ran(tmp_path) == Counter({"read_note": 1, "send_note": 1})
    assert _emails(tmp_path) == 1


@pytest.mark.parametrize("point", ["after-attempted", "after-do"])
def test_an_effect_tool_killed_mid_send_is_reconciled_and_the_email_goes_out_once(tui_agent, fake, tmp_path, database,
                                                                                  point):
    fake.play(*({"body": turn} for turn in TURNS))
    run_id = _start(tui_agent, tmp_path)
    crashed = _worker(tui_agent, "w-1", short_lease(database, 3), TUI_AGENT_CRASH_AT=point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    (effect,) = show_json(tui_agent, run_id, *AGENTS)["effects"]
    assert (effect["name"], effect["state"], effect["key"]) == ("notes/send_note", "attempted", "note-to:ops@example.com")
    ok(_worker(tui_agent, "w-2", **taken_over(database, run_id)))
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["result"]) == ("succeeded", WHOLE)
    assert report["effects"][0]["state"] == "confirmed"
    assert _emails(tmp_path) == 1   # resent under the same key, which the outbox remembered
    assert len(fake.requests) == 3
    assert _ran(tmp_path)["read_note"] == 1
