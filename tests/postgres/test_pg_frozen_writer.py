"""A tui-agent process stopped inside a write on PostgreSQL (Ctrl-Z on a worker, a laptop put to sleep, a
debugger): the server ends its session after IDLE_IN_WRITE_MS, so every other writer goes on instead of waiting
behind its lock, and nothing of that write commits. On SQLite a stopped holder of the write lock is waited out
(tests/processes/test_environment.py); a server can do better."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import psycopg
import pytest
from helpers import ROOT, show_json, until

from tui_agent.store import open_store
from tui_agent.store.copying import copy_database, open_source, open_target
from tui_agent.store.environment import BUSY
from tui_agent.store.postgres import BUSY_TIMEOUT_MS, IDLE_IN_WRITE_MS

pytestmark = pytest.mark.postgres

AGENTS = ["--agents", "counting_agents"]
IDLE_S = 1.0   # the holder's own timeout, so the test waits one second, not ten; the code path is the same
# The CLI with the idle timeout of its sessions at argv[1] seconds.
SHORT_IDLE = ("import sys; import tui_agent.store.postgres as pg; pg.IDLE_IN_WRITE_MS = int(float(sys.argv.pop(1)) * 1000);"
              " from tui_agent.cli import main; main()")
# A tui-agent process that writes a marker inside a write, then stops itself (SIGSTOP) before committing; once
# continued it reports how its write ended.
HOLDER = """
import os, signal, sys
import tui_agent.store.postgres as pg
pg.IDLE_IN_WRITE_MS = int(float(sys.argv[2]) * 1000)
from tui_agent.store.copying import copy_database, open_source, open_target
from tui_agent.store import open_store
from tui_agent.errors import EnvironmentStop
store = open_store(sys.argv[1])
try:
    with store.write() as conn:
        conn.execute("INSERT INTO meta (key, value) VALUES ('marker', 'from the stopped writer')")
        print("holding", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        conn.execute("SELECT 1")
except EnvironmentStop as e:
    print(f"{e.kind}: {e}", flush=True)
    with store.write() as conn:   # the store opens a new session: this process writes on
        conn.execute("INSERT INTO meta (key, value) VALUES ('after', 'written after waking')")
    sys.exit(4)
print("committed", flush=True)
"""


def test_the_session_timeout_is_set_and_shorter_than_a_waiting_writers_patience(pg_url):
    assert IDLE_IN_WRITE_MS < BUSY_TIMEOUT_MS   # a command waiting behind a stopped writer outlasts it
    store = open_store(pg_url)
    try:
        shown = store.conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0]
        assert shown == f"{IDLE_IN_WRITE_MS // 1000}s"
    finally:
        store.close()


def test_a_writer_stopped_inside_its_write_holds_up_nobody_and_commits_nothing(tui_agent, pg_url, monkeypatch):
    monkeypatch.setenv("TUI_AGENT_DB", pg_url)
    queued = tui_agent("start", "hello").stdout.strip()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, pg_url, str(IDLE_S)], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        cancelled = tui_agent("cancel", queued)   # waits on the writers' lock the stopped process holds
        waited = time.monotonic() - started
        assert cancelled.returncode == 0, cancelled.stderr
        assert IDLE_S * 0.9 <= waited < BUSY_TIMEOUT_MS / 1000, waited
        assert show_json(tui_agent, queued)["run"]["status"] == "cancelled"
    finally:
        holder.send_signal(signal.SIGCONT)
        out, err = holder.communicate(timeout=60)
    assert holder.returncode == 4, (out, err)
    assert out.startswith(f"{BUSY}: ") and "ended this session (idle inside a transaction" in out, out
    assert "Traceback" not in err
    with psycopg.connect(pg_url, autocommit=True) as conn:
        keys = {key for (key,) in conn.execute("SELECT key FROM meta WHERE key IN ('marker', 'after')")}
    assert keys == {"after"}   # the stopped write is gone; the process wrote again once it woke



def test_a_copy_whose_transactions_wait_on_the_other_side_is_not_cut_short(demo, pg_url, tmp_path, monkeypatch):
    """A copy's transactions sit idle while the other side is read or written (a large artifact, a slow disk):
    not a stopped process. Both ways, with the timeout at 0.3 s and the copy idle 0.6 s in each."""
    monkeypatch.setattr("tui_agent.store.postgres.IDLE_IN_WRITE_MS", 300)
    path, _ = demo
    paused = []

    def slow_side(table, done, total):
        if table == "journal" and not paused:   # once per copy, with both transactions open
            paused.append(table)
            time.sleep(0.6)

    for source_where, target_where in ((str(path), pg_url), (pg_url, str(tmp_path / "back.db"))):
        source, target = open_source(source_where), open_target(target_where)
        try:
            counts = copy_database(source, target, slow_side)
        finally:
            source.close(), target.close()
        assert counts["journal"] > 0 and paused
        paused.clear()


def _stopped_inside_a_transaction(worker: subprocess.Popen, admin: psycopg.Connection) -> bool:
    """Stop the worker; True if one of its sessions is now idle inside a transaction (else continue it)."""
    worker.send_signal(signal.SIGSTOP)
    time.sleep(0.05)   # a statement in flight finishes on the server; the session then waits on the client
    inside = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND application_name = 'tui-agent' AND state = 'idle in transaction'").fetchone()[0]
    if not inside:
        worker.send_signal(signal.SIGCONT)
    return bool(inside)


def test_a_worker_stopped_inside_a_commit_holds_up_nobody_and_goes_on_once_continued(tui_agent, pg_url, tmp_path,
                                                                                    monkeypatch):
    """A real worker stopped (SIGSTOP) at a moment one of its sessions is inside a transaction, past the
    timeout and past its lease: a person's command goes on meanwhile; continued, the worker neither exits nor
    fails the run, which it (or its next claim) finishes with every effect done exactly once.

    The agent's steps are effects: a plain step commits in one pipelined round trip, so a session is never
    left inside a transaction by one, while an effect's attempt reads its key's ledger rows before it writes."""
    monkeypatch.setenv("TUI_AGENT_DB", pg_url)
    log, steps = tmp_path / "calls.log", 400
    run_id = tui_agent(*AGENTS, "start", "sending", "--budget", f"steps={10 * steps}",
                       "--input", json.dumps({"log": str(log), "steps": steps})).stdout.strip()
    worker = subprocess.Popen([sys.executable, "-c", SHORT_IDLE, str(IDLE_S), *AGENTS, "worker", "--lease", "2"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            until("the worker's first steps", lambda: log.exists())
            tries = 0
            while not _stopped_inside_a_transaction(worker, admin):
                tries += 1
                assert tries < 300, "never caught the worker inside a transaction"
                time.sleep(random.uniform(0.002, 0.02))
            started = time.monotonic()
            person = tui_agent("start", "hello")
            assert person.returncode == 0, person.stderr
            assert time.monotonic() - started < BUSY_TIMEOUT_MS / 1000
            time.sleep(max(0.0, 2.5 - (time.monotonic() - started)))   # past the lease too
            worker.send_signal(signal.SIGCONT)
            until("the run to end", lambda: show_json(tui_agent, run_id)["run"]["status"] != "running",
                  deadline_s=60)
        assert worker.poll() is None, "the continued worker went on working"
    finally:
        worker.send_signal(signal.SIGCONT)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert show_json(tui_agent, run_id)["run"]["status"] == "succeeded", err
    ran = Counter(log.read_text().split())
    assert set(ran) == {f"e{i}" for i in range(steps)}
    assert [key for key, n in ran.items() if n > 1] == []
    assert "Traceback" not in err
