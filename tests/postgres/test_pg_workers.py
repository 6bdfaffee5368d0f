"""Workers on several machines against one PostgreSQL database (docs/architecture.md section 7): real worker
processes, each registered under its own host name (TUI_AGENT_HOST), are killed, paused past their lease and
started with a clock a day ahead. Leases and heartbeats are judged by the server's clock, so a kill -9 is taken
over once its lease ends, a paused worker's late writes are refused by the fence, no claim is ever held by two
workers at once, and a worker whose own clock is wrong neither strands a run nor steals one."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from helpers import later, process_state, ran_steps, until

from tui_agent.operate import start
from tui_agent.runtime.registry import load_registry
from tui_agent.store import open_store
from tui_agent.store.runs import events_for, get_run
from tui_agent.store.workers import workers_listing

pytestmark = pytest.mark.postgres
AGENTS = ["--agents", "counting_agents"]
LEASE = "1.5"
DAY = 86400


@pytest.fixture
def db(pg_url, monkeypatch):
    """One fresh PostgreSQL database that every process of the test opens (TUI_AGENT_DB)."""
    monkeypatch.setenv("TUI_AGENT_DB", pg_url)
    store = open_store(pg_url)
    yield store
    store.close()


def _start(store, log: Path, steps: int, delay_s: float) -> str:
    registry = load_registry(["counting_agents"])
    return start(store, registry, agent_name="counting",
                 request={"log": str(log), "steps": steps, "delay_s": delay_s})[0]


def _worker(spawn, name: str, host: str, *extra: str, env: dict | None = None):
    return spawn(*AGENTS, "worker", "--lease", LEASE, "--name", name, *extra, label=name,
                 env={"TUI_AGENT_HOST": host, **(env or {})})


def _journal(store, run_id: str) -> list[tuple]:
    return store.conn.execute("SELECT position, name, fence FROM journal WHERE run_id = ? ORDER BY position",
                              (run_id,)).fetchall()


def one_holder_at_a_time(events: list[dict]) -> list[int]:
    """The fences claimed, in order; asserts that no worker wrote an event under a fence older than the latest
    claim (a claim held by two workers would show as the older holder writing after the takeover)."""
    current, claims = 0, []
    for event in events:
        if event["kind"] in ("claimed", "takeover"):
            assert event["fence"] > current, events
            current = event["fence"]
            claims.append(current)
        elif event["worker"] is not None and event["fence"] is not None:
            assert event["fence"] == current, ("a stale holder wrote", event, events)
    return claims


def _holding(store, run_id: str, worker: str) -> bool:
    run = get_run(store, run_id)
    return run["status"] == "running" and run["worker"] == worker and bool(_journal(store, run_id))


def _lease_over(store, run_id: str) -> None:
    """Until the run's lease has ended by the server's clock: a `--once` worker started before finds nothing due
    and exits."""
    until("the lease to end by the server's clock", lambda: store.conn.execute(
        "SELECT lease_expires_at < extract(epoch from clock_timestamp()) FROM runs WHERE id = ?",
        (run_id,)).fetchone()[0], deadline_s=30)


def _finished(store, run_id: str) -> dict | None:
    run = get_run(store, run_id)
    return run if run["status"] == "succeeded" else None


def test_a_worker_killed_on_one_machine_is_finished_by_a_worker_on_another(db, spawn, tmp_path):
    log = tmp_path / "calls.log"
    run_id = _start(db, log, steps=6, delay_s=0.3)
    a = _worker(spawn, "w-a", "machine-a")
    until("w-a to record a step", lambda: _holding(db, run_id, "w-a"))
    b = _worker(spawn, "w-b", "machine-b")
    a.send_signal(signal.SIGKILL)
    a.wait(timeout=10)
    killed_at = time.time()
    recorded_by_a = len(_journal(db, run_id))

    run = until("w-b to finish the run", lambda: _finished(db, run_id), deadline_s=30)
    assert (run["attempt"], run["fence"]) == (2, 2), run
    assert time.time() - killed_at < 10, "the lease was judged by the server's clock: taken over within seconds"
    events = events_for(db, run_id)
    assert one_holder_at_a_time(events) == [1, 2]
    [takeover] = [e for e in events if e["kind"] == "takeover"]
    assert (takeover["worker"], takeover["message"]) == ("w-b", "lease of w-a expired; claimed by w-b (attempt 2, "
                                                                 "fence 2)")
    journal = _journal(db, run_id)
    assert [(p, n) for p, n, _ in journal] == [(i, f"s{i}") for i in range(6)]
    assert [f for _, _, f in journal] == [1] * recorded_by_a + [2] * (6 - len(journal[:recorded_by_a]))
    ran = ran_steps(log)
    in_flight = f"s{recorded_by_a}"   # its function may have started before the kill: only it may run twice
    assert {k: v for k, v in ran.items() if k != in_flight} == {f"s{i}": 1 for i in range(6) if f"s{i}" != in_flight}

    hosts = {w["name"]: w["host"] for w in workers_listing(db)}
    assert (hosts["w-a"], hosts["w-b"]) == ("machine-a", "machine-b")
    b.send_signal(signal.SIGTERM)
    b.wait(timeout=15)


def test_a_worker_paused_past_its_lease_on_one_machine_is_fenced_off_when_it_wakes(db, spawn, tmp_path):
    log = tmp_path / "calls.log"
    run_id = _start(db, log, steps=5, delay_s=0.4)
    a = _worker(spawn, "w-a", "machine-a", "--once")
    until("w-a to record a step", lambda: _holding(db, run_id, "w-a"))
    a.send_signal(signal.SIGSTOP)
    until("w-a to stop", lambda: process_state(a.pid) == "T")
    paused_with = len(_journal(db, run_id))
    _lease_over(db, run_id)
    b = _worker(spawn, "w-b", "machine-b", "--once")
    run = until("w-b to take over and finish", lambda: _finished(db, run_id), deadline_s=30)
    b.wait(timeout=15)
    after_b = (events_for(db, run_id), _journal(db, run_id), get_run(db, run_id))

    a.send_signal(signal.SIGCONT)
    a.wait(timeout=20)
    out = (tmp_path / "w-a.out").read_text()
    refused = out.count(f"{run_id} was taken by another worker or a person")
    assert refused == 1, (out, (tmp_path / "w-a.err").read_text())
    assert (events_for(db, run_id), _journal(db, run_id), get_run(db, run_id)) == after_b, \
        "the woken worker's late writes changed the run"
    assert (run["attempt"], run["fence"]) == (2, 2), run
    assert one_holder_at_a_time(after_b[0]) == [1, 2]
    journal = after_b[1]
    assert [n for _, n, _ in journal] == [f"s{i}" for i in range(5)]   # each position recorded once
    assert [f for _, _, f in journal] == [1] * paused_with + [2] * (5 - paused_with)
    ran = ran_steps(log)
    in_flight = f"s{paused_with}"   # the step w-a was inside when paused may run again, once; nothing else does
    assert ran[in_flight] in (1, 2), ran
    assert {k: v for k, v in ran.items() if k != in_flight} == {f"s{i}": 1 for i in range(5) if f"s{i}" != in_flight}


def test_a_worker_whose_clock_is_a_day_ahead_neither_steals_nor_strands_a_run(db, spawn, tmp_path):
    tomorrow = {"TUI_AGENT_NOW": later(DAY)}
    # 1. a live lease of w-a is not stolen by w-ahead, whose clock says w-a's lease ended a day ago
    log = tmp_path / "first.log"
    first = _start(db, log, steps=6, delay_s=0.3)
    a = _worker(spawn, "w-a", "machine-a", "--once")
    until("w-a to record a step", lambda: _holding(db, first, "w-a"))
    ahead = _worker(spawn, "w-ahead", "machine-c", env=tomorrow)
    until("w-ahead to register", lambda: "w-ahead" in {w["name"] for w in workers_listing(db)})
    a.wait(timeout=30)
    run = get_run(db, first)
    assert (run["status"], run["attempt"], run["fence"]) == ("succeeded", 1, 1), run
    assert one_holder_at_a_time(events_for(db, first)) == [1]
    assert set(ran_steps(log).values()) == {1}

    # its heartbeat is the server's instant; its own clock shows as a skew and "clock ahead"
    [row] = [w for w in workers_listing(db) if w["name"] == "w-ahead"]
    assert DAY - 60 < row["clock_skew_s"] <= DAY, row
    assert abs(row["server_heartbeat_at"] - time.time()) < 30, row
    from tui_agent.runtime.liveness import worker_state
    assert worker_state(row, time.time()) == "clock_ahead"

    # 2. a run w-ahead claims gets a lease as long as the server says, so its kill strands nothing
    second_log = tmp_path / "second.log"
    second = _start(db, second_log, steps=6, delay_s=0.3)
    until("w-ahead to record a step", lambda: _holding(db, second, "w-ahead"), deadline_s=20)
    lease_left = get_run(db, second)["lease_expires_at"] - time.time()
    assert lease_left <= float(LEASE) + 1, f"a lease written by a clock a day ahead: {lease_left}s left"
    ahead.send_signal(signal.SIGKILL)
    ahead.wait(timeout=10)
    recorded = len(_journal(db, second))
    _lease_over(db, second)
    d = _worker(spawn, "w-d", "machine-d", "--once")
    run = until("w-d to finish w-ahead's run", lambda: _finished(db, second), deadline_s=30)
    d.wait(timeout=15)
    assert (run["attempt"], run["fence"]) == (2, 2), run
    assert one_holder_at_a_time(events_for(db, second)) == [1, 2]
    assert [f for _, _, f in _journal(db, second)] == [1] * recorded + [2] * (6 - recorded)


def test_workers_shows_the_skew_of_a_worker_whose_clock_is_ahead_or_behind(db, tui_agent):
    for name, host, moved in (("w-tomorrow", "machine-t", DAY), ("w-late", "machine-l", -3600), ("w-on-time", "machine-o", 0)):
        done = tui_agent(*AGENTS, "worker", "--once", "--name", name,
                         env={"TUI_AGENT_NOW": later(moved), "TUI_AGENT_HOST": host})
        assert done.returncode == 0, done.stderr
    listed = tui_agent("workers", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {w["name"]: w for w in json.loads(listed.stdout)}
    assert DAY - 120 < rows["w-tomorrow"]["clock_skew_s"] <= DAY, rows
    assert -3600 - 120 < rows["w-late"]["clock_skew_s"] <= -3600 + 120, rows
    assert abs(rows["w-on-time"]["clock_skew_s"]) < 5, rows
    assert rows["w-tomorrow"]["host"] == "machine-t"
    text = tui_agent("workers", "--all").stdout
    header, *lines = text.splitlines()
    assert "CLOCK" in header, text
    said = {line.split()[0]: line for line in lines}
    assert "clock ahead 23h" in said["w-tomorrow"] and "23h 59m ahead" in said["w-tomorrow"], text
    assert "behind" in said["w-late"] and ("59m behind" in said["w-late"] or "1h behind" in said["w-late"]), text
    assert "ahead" not in said["w-on-time"].split("ago", 1)[1] and "behind" not in said["w-on-time"], text
