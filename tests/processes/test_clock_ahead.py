"""Leases assume one clock. A worker whose clock runs ahead (TUI_AGENT_NOW) stamps its heartbeat in the
future: `workers` says "clock ahead", never alive with a negative age (the TUI: test_tui_workers.py)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from datetime import UTC, datetime, timedelta

from tui_agent.format import ago
from tui_agent.runtime.clock import now
from tui_agent.runtime.liveness import worker_state
from tui_agent.store.workers import register

DAY = 86400


def rows(invoke, *args: str) -> dict[str, dict]:
    done = invoke("workers", "--json", *args)
    assert done.exit_code == 0, done.output
    return {row["name"]: row for row in json.loads(done.stdout)}


def line_of(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(name))


def test_a_heartbeat_a_day_ahead_reads_clock_ahead_never_a_negative_age(invoke, store):
    at = now()
    register(store, "w-ahead", pid=os.getpid(), host=socket.gethostname(), concurrency=1, lease_s=60,
             now=at + DAY)   # this process: it lives
    register(store, "w-here", pid=os.getpid(), host=socket.gethostname(), concurrency=1, lease_s=60, now=at - 5)
    gone = subprocess.Popen(["true"])
    gone.wait()
    register(store, "w-gone", pid=gone.pid, host=socket.gethostname(), concurrency=1, lease_s=60,
             now=at + DAY)   # killed, its clock ahead

    listing = rows(invoke)
    ahead, here, dead = listing["w-ahead"], listing["w-here"], listing["w-gone"]
    assert ahead["state"] == "clock_ahead", ahead
    assert DAY - 60 < ahead["clock_ahead_s"] <= DAY, ahead
    assert here["state"] == "alive", here
    assert here["clock_ahead_s"] is None, here
    assert dead["state"] == "dead", dead
    assert dead["clock_ahead_s"] > DAY - 60, dead

    text = invoke("workers").output
    assert re.search(r"w-ahead\s+\d+\s+clock ahead\s+clock ahead 23h", text), text
    assert "clock ahead 23h" in line_of(text, "w-gone")
    assert " dead " in line_of(text, "w-gone")
    assert re.search(r"w-here\s+\d+\s+alive\s+5\.\ds ago", text), text
    assert not re.search(r"\s-\d", text), text          # no negative age anywhere


def test_a_worker_started_with_its_clock_a_day_ahead(tui_agent, invoke):
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat(timespec="seconds")
    done = tui_agent("worker", "--once", "--name", "w-tomorrow", env={"TUI_AGENT_NOW": tomorrow})
    assert done.returncode == 0, done.stderr
    row = rows(invoke, "--all")["w-tomorrow"]         # stopped: listed with --all only
    assert row["state"] == "stopped", row
    assert DAY - 120 < row["clock_ahead_s"] <= DAY, row
    text = line_of(invoke("workers", "--all").output, "w-tomorrow")
    assert "clock ahead 23h" in text, text
    assert not re.search(r"\s-\d", text), text


def test_a_small_wall_clock_step_is_not_a_clock_ahead():
    at = now()
    assert ago(at + 0.4, at) == "0.0s ago"
    assert ago(at + 3 * 3600 + 5, at) == "clock ahead 3h"
    worker = {"stopped_at": None, "host": "elsewhere", "pid": 1, "heartbeat_at": at + 0.4, "lease_s": 60}
    assert worker_state(worker, at) == "alive"
    assert worker_state(worker | {"heartbeat_at": at + 30}, at) == "clock_ahead"
    assert worker_state(worker | {"heartbeat_at": at - 61}, at) == "silent"


def test_a_server_read_worker_whose_clock_runs_ahead_says_by_how_much_when_this_clock_runs_ahead_too():
    """Read from a server, a worker is judged by the server's clock: ahead of it by a day, it is clock_ahead even
    when this reader's clock runs a day ahead as well, and the Workers screen's line says by how much."""
    from tui_agent.runtime.liveness import ahead_by
    from tui_agent.screens.workers import WorkersScreen

    server = now()
    worker = {"stopped_at": None, "host": "elsewhere", "host_id": "another-host", "pid": 1, "lease_s": 60,
              "runs": [], "heartbeat_at": server + DAY, "server_heartbeat_at": server, "judged_at": server + 1}
    reader = server + DAY + 5          # this clock is a day ahead too: by it, the heartbeat is in the past
    state = worker_state(worker, reader)
    assert state == "clock_ahead"
    assert ahead_by(worker, reader) == DAY
    line = WorkersScreen._situation(worker, state, reader)
    assert line.startswith("its heartbeat is stamped 1d ahead of this clock"), line
    assert ahead_by(worker | {"heartbeat_at": server}, reader) is None   # beating by the server's clock
