"""The WAL stays bounded (issue 12, item 3). No checkpoint can pass a reader's snapshot, so the WAL
grows while a reader holds one; once it lets go the file must come back under JOURNAL_SIZE_LIMIT
within a few hundred steps and stay there, an idle worker (or `worker --once` as it exits) empties
it while other connections stay open, and the TUI, polling a busy database, never holds a snapshot.

Real worker processes write thousands of tiny steps (tests/fixtures/wal_agents.py, durability
normal for speed); the test measures the size of runs.db-wal."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import ROOT

from tui_agent.app import TuiAgentApp
from tui_agent.operate import start
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.run import RunScreen
from tui_agent.store.db import JOURNAL_SIZE_LIMIT
from tui_agent.store.wal import CHECKPOINT_EVERY_S, IdleCheckpoint, checkpoint

pytestmark = pytest.mark.sqlite_only

AGENTS = ["--agents", "wal_agents", "--durability", "normal"]
HELD_STEPS = 5_000       # about 27 MiB of WAL behind a held snapshot (a plain step commits one page): past the bound
SHRINK_WITHIN = 300      # steps after the reader lets go
STAY_STEPS = 10_000      # then the WAL must stay under the bound for this many more
# The reader lets go once the test has seen HELD_STEPS, which on a loaded machine is some steps later (a CI run
# let go at 5,012 or more, and the WAL came under the bound at 5,312): room for that, so STAY_STEPS are watched.
RELEASE_LAG = 2_000
EMPTIED = 64 * 1024      # an idle checkpoint empties the WAL (a heartbeat may add a frame or two since)
TUI_STEPS = 4_000        # a TUI holding one snapshot from the start would let the WAL reach about 22 MiB


def _start(store, steps: int) -> str:
    """Queue a run of `steps` tiny steps (tests/fixtures is on the path only once a test runs)."""
    return start(store, load_registry(["wal_agents"]), agent_name="many", request={"steps": steps})[0]


def _wal(db_path: Path) -> int:
    wal = Path(f"{db_path}-wal")
    return wal.stat().st_size if wal.exists() else 0


@contextmanager
def _worker(folder: Path) -> Iterator[subprocess.Popen]:
    """A long-running `tui-agent worker` (a 5 s lease), stopped with SIGTERM on the way out."""
    with open(folder / "worker.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tui_agent", *AGENTS, "worker", "--lease", "5"], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def _snapshot(db_path: Path) -> Iterator[None]:
    """Another program reading in one long transaction (a sqlite3 shell, a backup) until the block ends."""
    reader = sqlite3.connect(db_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM journal").fetchone()
    try:
        yield
    finally:
        reader.execute("ROLLBACK")
        reader.close()


def _progress(store, run_id: str) -> tuple[int, str]:
    """(steps the run has committed, its status): one short read."""
    return store.conn.execute("SELECT c.current_step, r.status FROM runs r JOIN checkpoints_now c ON c.run_id = r.id"
                              " WHERE r.id = ?", (run_id,)).fetchone()


def _finished(step: int, status: str) -> bool:
    assert status in ("queued", "running", "succeeded"), status
    return status == "succeeded"


def _watch(store, db_path: Path, run_id: str, until, deadline_s: float = 90) -> list[tuple[int, int]]:
    """(steps done, WAL bytes) every couple of milliseconds until `until(steps, status)`."""
    samples, deadline = [], time.monotonic() + deadline_s
    while True:
        step, status = _progress(store, run_id)
        samples.append((step, _wal(db_path)))
        if until(step, status):
            return samples
        assert time.monotonic() < deadline, f"the run stopped at step {step} ({status})"
        time.sleep(0.002)


def _until_emptied(db_path: Path, deadline_s: float = CHECKPOINT_EVERY_S + 10) -> float:
    """Seconds until the WAL is (about) empty; fails at the deadline with its size."""
    begun = time.monotonic()
    while _wal(db_path) > EMPTIED:
        assert time.monotonic() - begun < deadline_s, f"the WAL stayed at {_wal(db_path)} bytes"
        time.sleep(0.05)
    return time.monotonic() - begun


def test_the_wal_shrinks_once_a_long_reader_lets_go_and_stays_under_the_bound(store, db_path, tmp_path):
    with _worker(tmp_path):
        with _snapshot(db_path):
            run_id = _start(store, HELD_STEPS + RELEASE_LAG + SHRINK_WITHIN + STAY_STEPS)
            held = _watch(store, db_path, run_id, lambda step, status: step >= HELD_STEPS)
            assert held[-1][1] > JOURNAL_SIZE_LIMIT, "the held snapshot should have let the WAL grow"
        released_at = _progress(store, run_id)[0]
        after = _watch(store, db_path, run_id, _finished)

        drop = next((i for i, (_, size) in enumerate(after) if size <= JOURNAL_SIZE_LIMIT), None)
        assert drop is not None, f"the WAL never came back under the bound: {after[-1][1]} bytes at the end"
        assert after[drop][0] - released_at <= SHRINK_WITHIN
        assert after[-1][0] - after[drop][0] >= STAY_STEPS
        assert max(size for _, size in after[drop:]) <= JOURNAL_SIZE_LIMIT
        _until_emptied(db_path)  # the worker is idle now, and this test's own connection is still open


def test_worker_once_empties_the_wal_as_it_exits_while_another_connection_stays_open(store, db_path, tui_agent):
    with _snapshot(db_path):
        run_id = _start(store, HELD_STEPS)
        done = tui_agent(*AGENTS, "worker", "--once")
        assert done.returncode == 0, done.stderr
        assert _progress(store, run_id)[1] == "succeeded"
        assert _wal(db_path) > JOURNAL_SIZE_LIMIT
    done = tui_agent(*AGENTS, "worker", "--once")  # nothing is due: it only exits, checkpointing on its way
    assert done.returncode == 0, done.stderr
    assert _wal(db_path) <= EMPTIED  # `store` stays open, so closing the last connection did not do it


def test_a_checkpoint_never_waits_for_a_lock_or_a_reader_and_keeps_the_busy_timeout(store, db_path):
    _start(store, 1)
    patience = store.conn.execute("PRAGMA busy_timeout").fetchone()[0]
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a writer (or a sqlite3 shell) holds the write lock
    begun = time.monotonic()
    assert checkpoint(store) is False
    assert time.monotonic() - begun < 1
    holder.execute("ROLLBACK")
    with _snapshot(db_path):
        _start(store, 1)  # a frame the reader's snapshot does not include, so cannot be copied past
        assert checkpoint(store) is False
        assert _wal(db_path) > 0
    assert store.conn.execute("PRAGMA busy_timeout").fetchone()[0] == patience
    assert checkpoint(store) is True
    assert _wal(db_path) == 0
    holder.close()


def test_an_idle_checkpoint_waits_for_a_quiet_moment_and_a_wal_worth_emptying(store, db_path):
    _start(store, 1)
    small = IdleCheckpoint(store, every_s=0)
    small(), small()
    assert 0 < _wal(db_path) < small.from_bytes  # a small WAL is left alone
    idle = IdleCheckpoint(store, every_s=0, from_bytes=0)
    idle()  # the first call only looks
    assert _wal(db_path) > 0
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("INSERT INTO meta (key, value) VALUES ('test', 'another connection commits')")  # not quiet
    other.close()
    idle()
    assert _wal(db_path) > 0
    idle()  # nobody committed since the previous call
    assert _wal(db_path) == 0


async def _watch_tui(pilot, store, db_path: Path, run_id: str) -> list[int]:
    """WAL sizes while the TUI polls: on the runs screen for the first half of the run, then on its own
    screen (which re-reads the whole journal at every change) until it has finished."""
    sizes, deadline, on_run_screen = [], time.monotonic() + 90, False
    while True:
        step, status = _progress(store, run_id)
        sizes.append(_wal(db_path))
        assert not pilot.app.reader.conn.in_transaction
        assert not pilot.app.store.conn.in_transaction
        if (step >= TUI_STEPS // 2 or _finished(step, status)) and not on_run_screen:
            pilot.app.push_screen(RunScreen(run_id))  # (a loaded machine may sample the run only once it is done)
            on_run_screen = True
            await pilot.pause()
        if _finished(step, status):
            return sizes
        assert time.monotonic() < deadline, f"the run stopped at step {step} ({status})"
        await asyncio.sleep(0.01)


async def test_the_tui_polling_a_busy_database_holds_no_snapshot(store, db_path, tmp_path):
    with _worker(tmp_path):
        app = TuiAgentApp(db_path, "normal", agent_modules=["wal_agents"], poll_s=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            run_id = _start(store, TUI_STEPS)
            sizes = await _watch_tui(pilot, store, db_path, run_id)
            assert max(sizes) <= JOURNAL_SIZE_LIMIT
            for _ in range(200):  # the screen catches up at its next poll (slower on a loaded machine)
                if isinstance(app.screen, RunScreen) and app.screen.view["run"]["status"] == "succeeded":
                    break
                await pilot.pause(0.05)
            assert isinstance(app.screen, RunScreen)
            assert app.screen.view["run"]["status"] == "succeeded"
            await asyncio.to_thread(_until_emptied, db_path)  # by the idle worker, while the TUI keeps polling
