"""A PostgreSQL restart under long-running workers (issue 36, item 10): a worker waits the server out, as it waits
out a locked SQLite file, and goes on when it is back; each run's writes wait while its lease allows, and a run
whose lease ran out meanwhile is claimed anew with a new fence. A step whose COMMIT was in flight when the
connection dropped is read back on a new connection (journal.write_entry): never written twice, never lost."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg
import pytest
from helpers import registry_of, start_and_work, until
from pg_cluster import PgServer, find_bin_dir

from tui_agent import Agent
from tui_agent.agents.outbox import Outbox
from tui_agent.operate import start
from tui_agent.runtime.registry import load_registry
from tui_agent.store import open_store

pytestmark = pytest.mark.postgres


class _CutAtCommit:
    """The store's first psycopg connection, whose session the server ends at the COMMIT of the journal entry
    at `position`: just after the server committed it (`committed`), or just before (the COMMIT then goes to a
    session that is gone). Either way the client sees what a restart shows it: the connection lost under its
    COMMIT, not knowing whether it committed."""

    def __init__(self, raw: psycopg.Connection, admin: psycopg.Connection, position: int, committed: bool) -> None:
        self._raw, self._admin, self._position, self._committed = raw, admin, position, committed
        self._armed = self.cut = False

    def __getattr__(self, name: str):
        return getattr(self._raw, name)

    def execute(self, sql: str, params=()):
        if not self._armed and sql.startswith("INSERT INTO journal_") and len(params) > 2 \
                and params[2] == self._position:
            self._armed = True
        if not self._armed or self.cut or not sql.endswith("COMMIT"):
            return self._raw.execute(sql, params)
        self.cut = True
        if self._committed:
            self._raw.execute(sql, params)
        pid = self._raw.info.backend_pid
        self._admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        while self._admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            time.sleep(0.01)
        return self._raw.execute("SELECT 1" if self._committed else sql)   # raises: the session is gone


def _planned_steps(calls: list[str]) -> Agent:
    """Three steps after a plan: the first commits as a folded entry (the plan changes the checkpoint row), the
    others as plain steps (their journal row alone, one statement: tests/postgres/test_pg_round_trips.py cuts those)."""
    def run(ctx, request):
        ctx.plan(total_steps=3)
        return [ctx.step(f"s{i}", calls.append, f"s{i}") for i in range(3)]
    return Agent(name="planned", run=run)


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "not-committed"])
def test_a_folded_entry_whose_commit_lost_its_connection_is_read_back_and_never_written_twice(pg_url, committed):
    position = 0
    calls: list[str] = []
    store = open_store(pg_url)
    sent: list[str] = []
    try:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            cut = store.conn.raw = _CutAtCommit(store.conn.raw, admin, position, committed)
            store.conn.set_trace_callback(sent.append)
            outcome = start_and_work(store, registry_of(_planned_steps(calls)), "planned", {})
            store.conn.set_trace_callback(None)
        assert cut.cut, "the session was never cut"
        assert (outcome.status, outcome.reason) == ("succeeded", "returned"), outcome
        assert calls == ["s0", "s1", "s2"], "no step ran again"
        rows = store.conn.execute("SELECT position, name, fence FROM journal WHERE run_id = ? ORDER BY position",
                                  (outcome.run_id,)).fetchall()
        assert rows == [(0, "s0", 1), (1, "s1", 1), (2, "s2", 1)]
    finally:
        store.close()
    inserts = [s for s in sent if s.startswith("INSERT INTO journal_rows") and f"'{outcome.run_id}', 1, {position}," in s]
    assert len(inserts) == (1 if committed else 2), inserts   # written again only when it had not committed
    assert any(s.startswith("SELECT fence FROM journal WHERE") for s in sent), "the entry was read back"


# -- a real restart under two long-running workers ------------------------------------------------------------

RUNS = 6
OUTAGE_S = 10.0
AWAY = "waiting for the server: the runs in hand go on when it is back"


@pytest.fixture
def restartable(monkeypatch):
    """A PostgreSQL server of this test's own (the session's is shared), named by TUI_AGENT_DB."""
    server = PgServer(find_bin_dir())
    try:
        server.start()
        monkeypatch.setenv("TUI_AGENT_DB", f"{server.url}/postgres")
        yield server
    finally:
        server.stop()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def _steps(store) -> dict[tuple[str, int, int], str]:
    """Every journal entry by (run, generation, position), with the worker whose claim (by its fence) wrote it."""
    claims = {(run_id, fence): worker for run_id, fence, worker in store.conn.execute(
        "SELECT run_id, fence, worker FROM events WHERE kind IN ('claimed', 'takeover')")}
    return {(run_id, generation, position): claims[(run_id, fence)] for run_id, generation, position, fence in
            store.conn.execute("SELECT run_id, generation, position, fence FROM journal")}


def test_a_server_stopped_for_10_s_under_two_workers_is_waited_out_and_every_run_finishes_once(restartable, spawn,
                                                                                              tmp_path):
    """Two long-running workers, two runs each in hand and more queued, nightly-report mailing through the outbox
    (a service that sends every time, and answers lookups): the server stopped immediately for 10 s. Both workers
    stay up and say one line each while it is away; w-long's leases (60 s) outlast it, so its runs go on under
    their claims; w-short's (3 s) run out, so its runs are claimed anew, each with a new fence. Every run succeeds
    and each report is mailed exactly once."""
    url = f"{restartable.url}/postgres"
    store = open_store(url)
    registry = load_registry()
    dates = [f"2026-11-{10 + i}" for i in range(RUNS)]
    runs = [start(store, registry, agent_name="nightly-report",
                  request={"date": date, "service": "every", "lookup": True, "delay_s": 0.4})[0] for date in dates]
    store.close()
    workers = {"w-long": spawn("worker", "--name", "w-long", "--concurrency", "2", label="w-long"),
               "w-short": spawn("worker", "--name", "w-short", "--concurrency", "2", "--lease", "3", label="w-short")}
    errs = {name: tmp_path / f"{name}.err" for name in workers}

    store = open_store(url)
    until("both workers to hold two runs inside their steps", lambda: sorted(w for (w,) in store.conn.execute(
        "SELECT worker FROM runs r WHERE status = 'running' AND EXISTS (SELECT 1 FROM journal j WHERE"
        " j.run_id = r.id AND j.fence = r.fence)")) == ["w-long", "w-long", "w-short", "w-short"], deadline_s=30)
    held = dict(store.conn.execute("SELECT id, worker FROM runs WHERE status = 'running'").fetchall())
    fences = dict(store.conn.execute("SELECT id, fence FROM runs").fetchall())
    before = _steps(store)
    store.close()
    said_before = {name: len(_lines(err)) for name, err in errs.items()}

    restartable.crash()
    time.sleep(OUTAGE_S)
    said_away = {name: _lines(err)[said_before[name]:] for name, err in errs.items()}
    restartable.start_again()
    back = time.monotonic()

    store = open_store(url)
    first: dict[str, float] = {}

    def first_steps() -> bool:
        for worker in {w for key, w in _steps(store).items() if key not in before} - set(first):
            first[worker] = time.monotonic() - back
        return len(first) == 2
    until("a new step from each worker", first_steps, deadline_s=60)
    print(f"seconds from the server's return to each worker's first step: {first}")
    until("every run to end", lambda: store.conn.execute(
        "SELECT count(*) FROM runs WHERE status IN ('succeeded', 'failed', 'cancelled', 'parked', 'waiting')"
    ).fetchone()[0] == RUNS, deadline_s=90)
    statuses = dict(store.conn.execute("SELECT id, status FROM runs").fetchall())
    last_fences = dict(store.conn.execute("SELECT id, fence FROM runs").fetchall())
    outbox = Outbox(store.data_dir / "outbox", mode="every")
    store.close()

    assert all(proc.poll() is None for proc in workers.values()), "both workers stayed up"
    for name, lines in said_away.items():   # one line each while the server was away, not one per retry
        assert len(lines) == 1 and lines[0].startswith(f"tui-agent: {name}: "), (name, lines)
        assert AWAY in lines[0] and "postgresql://postgres@127.0.0.1" in lines[0], lines[0]
    assert statuses == dict.fromkeys(runs, "succeeded"), statuses
    subjects = sorted(str(m["Subject"]) for m in outbox.messages())
    assert subjects == [f"Nightly report {date} (team)" for date in dates], subjects   # each mailed once
    for run_id, worker in held.items():   # within the leases' rules
        if worker == "w-long":
            assert last_fences[run_id] == fences[run_id], f"{run_id} went on under its claim"
        else:
            assert last_fences[run_id] > fences[run_id], f"{run_id} was claimed anew"
    for proc in workers.values():
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    for name, err in errs.items():   # nothing more was said: no second line, no traceback
        assert [line for line in _lines(err) if line.startswith("tui-agent:")] == said_away[name], _lines(err)
        assert "Traceback" not in err.read_text()
