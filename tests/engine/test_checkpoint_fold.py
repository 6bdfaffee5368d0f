"""A plain step commits its journal row alone (one page, not two); the checkpoint row is folded up every
FOLD_EVERY steps and by any entry that changes more than the step count and running time. Readers read
`checkpoints_now`, which adds the rows past the fold, so nothing a person, a budget or a resume sees may lag:
proved here across a kill -9 inside the tail, a restart, a stale fence and a database migrated from v6."""

from __future__ import annotations

import json
import signal
import sqlite3

import pytest
from helpers import (
    database_at_version,
    later,
    ok,
    on_sqlite,
    registry_of,
    show_json,
    start_and_work,
    work,
)

from tui_agent import Agent
from tui_agent.operate import start
from tui_agent.store import FenceRefused, open_store
from tui_agent.store.journal import FOLD_EVERY, Entry, add_entry, add_step, load_checkpoint
from tui_agent.store.runs import claim_run, restart

STEPS = 3 * FOLD_EVERY + 5
TICK = 0.125


def _row(store, table: str, run_id: str) -> tuple:
    return store.conn.execute(f"SELECT current_step, used_steps, used_wall_s FROM {table} WHERE run_id = ?",
                              (run_id,)).fetchone()


def _ticking(clock, steps: int):
    """An agent whose every step takes an eighth of a second of the run's clock (exact in binary, and short of the
    half lease that would renew it, and so fold, on its own): its running time is known exactly."""
    def run(ctx, request):
        for i in range(steps):
            ctx.step(f"s{i}", clock.advance, TICK)
        return {}
    return Agent(name="ticking", run=run)


def _traced(store, clock, steps: int) -> tuple[str, list[str]]:
    """A run of `steps` ticking steps; (its id, every statement the store's connection ran for it)."""
    statements = []
    store.conn.set_trace_callback(statements.append)
    try:
        outcome = start_and_work(store, registry_of(_ticking(clock, steps)), "ticking", {})
    finally:
        store.conn.set_trace_callback(None)
    assert outcome.status == "succeeded"
    return outcome.run_id, statements


def _rows(store, table: str, run_id: str) -> int:
    return store.conn.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", (run_id,)).fetchone()[0]


def _count(statements: list[str], start: str) -> int:
    return sum(s.startswith(start) for s in statements)


def _within(statements: list[str], part: str) -> int:
    return sum(part in s for s in statements)


def test_plain_steps_commit_their_row_alone_and_the_checkpoint_every_fold(store, clock):
    clock.freeze(1_000_000.0)
    run_id, statements = _traced(store, clock, STEPS)
    folds = STEPS // FOLD_EVERY
    assert _count(statements, "INSERT INTO journal_tail") == STEPS - folds   # the plain steps
    # the folds: each a transaction of add_entry's statements, on PostgreSQL one statement holding all of them
    assert _within(statements, "INSERT INTO journal_rows (run_id, generation, position, name, kind, result, artifact,"
                   " attempts, started_at, duration_s, fence, cost_usd, inputs, wall_s) ") == folds
    assert _within(statements, "UPDATE checkpoints SET current_step") == folds
    # each fold moves the tail into journal_rows, and so does the worker's last write: the row then holds every
    # step, and the tail is empty again
    assert sum("INSERT INTO journal_rows" in s and "journal_tail" in s for s in statements) == folds + 1
    assert _row(store, "checkpoints", run_id) == _row(store, "checkpoints_now", run_id) == (STEPS, STEPS, STEPS * TICK)
    assert _rows(store, "journal_tail", run_id) == 0 and _rows(store, "journal_rows", run_id) == STEPS
    # a plain step opens no transaction: only the folds add to what starting and settling a run take (on
    # PostgreSQL not even they: a fold is one statement, its transaction the implicit one of its single Sync)
    _, short = _traced(store, clock, 1)
    assert _count(statements, "BEGIN") - _count(short, "BEGIN") == (folds if on_sqlite(store) else 0)


def test_show_and_the_budget_count_the_rows_past_the_fold(store, clock, tui_agent):
    clock.freeze(1_000_000.0)
    outcome = start_and_work(store, registry_of(_ticking(clock, FOLD_EVERY + 3)), "ticking", {})
    report = show_json(tui_agent, outcome.run_id)
    assert report["checkpoint"]["current_step"] == FOLD_EVERY + 3
    assert report["budget"]["dimensions"]["steps"]["used"] == FOLD_EVERY + 3
    assert report["budget"]["dimensions"]["wall_s"]["used"] == (FOLD_EVERY + 3) * TICK


def test_a_kill_inside_the_tail_loses_no_count_and_the_step_ceiling_holds(tui_agent, db_path, tmp_path):
    """counting has a ceiling of 100 steps; killed after committing position 39 (rows 33-39 past the fold), a
    second worker must resume from 40 steps used, not from the fold's 33, and park at exactly 100."""
    log = tmp_path / "calls.log"
    run_id = ok(tui_agent("--agents", "counting_agents", "start", "counting", "--input",
                          json.dumps({"steps": 120, "log": str(log)}))).stdout.strip()
    crashed = tui_agent("--agents", "counting_agents", "worker", "--once",
                        env={"TUI_AGENT_CRASH_AT": "after-step-commit:40"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    store = open_store(db_path)
    folded = _row(store, "checkpoints", run_id)[0]
    assert folded < 40 == _row(store, "checkpoints_now", run_id)[0]
    # the rows past the fold are the tail's, and only they: the view counts the tail alone
    assert _rows(store, "journal_tail", run_id) == 40 - folded and _rows(store, "journal_rows", run_id) == folded
    store.close()
    assert show_json(tui_agent, run_id)["budget"]["dimensions"]["steps"]["used"] == 40

    ok(tui_agent("--agents", "counting_agents", "worker", "--once", env={"TUI_AGENT_NOW": later(600)}))  # past the lease
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "budget:steps")
    assert report["budget"]["dimensions"]["steps"]["used"] == 100 and len(report["journal"]) == 100
    assert sorted(log.read_text().split()) == sorted(f"s{i}" for i in range(100))   # each ran once


def test_a_restart_counts_the_old_generations_tail(store, clock):
    clock.freeze(1_000_000.0)
    outcome = start_and_work(store, registry_of(_ticking(clock, FOLD_EVERY + 7)), "ticking", {})
    with store.write() as conn:
        restart(conn, outcome.run_id, "succeeded", "restarted as generation {generation}", clock.now())
    assert _row(store, "checkpoints_now", outcome.run_id) == (0, FOLD_EVERY + 7, (FOLD_EVERY + 7) * TICK)


def test_a_plain_step_under_a_stale_fence_is_refused_and_not_written(store):
    agent = _ticking(None, 0)
    run_id, _ = start(store, registry_of(agent), agent_name=agent.name, request={})
    first = claim_run(store, run_id, "w-old", 0.0, 1_000.0)          # a lease that has already run out
    second = claim_run(store, run_id, "w-new", 60.0, 1_001.0)
    assert second.fence > first.fence
    with pytest.raises(FenceRefused):
        add_step(store, first, Entry(position=0, name="s0", kind="step", result="1",
                                     started_at=1_000.0, duration_s=0.0))
    with pytest.raises(FenceRefused), store.write() as conn:   # nor a folding one
        add_entry(conn, first, Entry(position=0, name="s0", kind="step", result="1",
                                     started_at=1_000.0, duration_s=0.0),
                  load_checkpoint(store, run_id), 1_000.0)
    assert store.conn.execute("SELECT count(*) FROM journal WHERE run_id = ?", (run_id,)).fetchone()[0] == 0


def test_a_v6_database_opens_with_its_counts_as_they_were(db_path):
    database_at_version(
        db_path, 6,
        "INSERT INTO runs (id, agent, request, status, reason, attempt, fence, generation, created_at, updated_at)"
        " VALUES ('r1', 'hello', '{}', 'succeeded', 'check_passed', 1, 1, 1, 1.0, 2.0)",
        "INSERT INTO checkpoints (run_id, generation, schema_version, current_step, used_steps, used_wall_s,"
        " updated_at) VALUES ('r1', 1, 1, 2, 2, 3.5, 2.0)",
        "INSERT INTO journal (run_id, generation, position, name, kind, result, attempts, fence)"
        " VALUES ('r1', 1, 0, 'a', 'step', '1', 1, 1), ('r1', 1, 1, 'b', 'step', '2', 1, 1)")
    store = open_store(db_path)
    assert _row(store, "checkpoints_now", "r1") == (2, 2, 3.5)
    store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT wall_s FROM journal").fetchall() == [(None,), (None,)]


def test_a_v10_database_moves_the_rows_past_each_checkpoint_into_the_tail_and_its_run_goes_on(db_path, clock):
    """Version 11 splits the journal: a run stopped inside its tail (positions 2-3 past a checkpoint at 2) keeps
    those rows in journal_tail, where the view of the checkpoint now looks; the counts read the same, and a worker
    replays all four and goes on from 4."""
    rows = ", ".join(f"('r1', 1, {p}, 's{p}', 'step', 'null', 1, 1, {10.0 + p}, 0.0, {'NULL' if p < 2 else 0.5})"
                     for p in range(4))
    database_at_version(
        db_path, 10,
        "INSERT INTO runs (id, agent, request, status, reason, attempt, fence, generation, artifact_dir, created_at,"
        " updated_at) VALUES ('r1', 'ticking', '{}', 'queued', 'new', 1, 1, 1, 'artifacts/r1', 1.0, 2.0),"
        " ('r0', 'ticking', '{}', 'succeeded', 'check_passed', 1, 1, 2, 'artifacts/r0', 1.0, 2.0)",
        "INSERT INTO checkpoints (run_id, generation, schema_version, current_step, used_steps, used_wall_s,"
        " updated_at) VALUES ('r1', 1, 1, 2, 2, 3.5, 2.0), ('r0', 2, 1, 0, 0, 0.0, 2.0)",
        "INSERT INTO journal (run_id, generation, position, name, kind, result, attempts, fence, started_at,"
        f" duration_s, wall_s) VALUES {rows}, ('r0', 1, 0, 's0', 'step', 'null', 1, 1, 1.0, 0.0, NULL)")
    store = open_store(db_path)
    assert _row(store, "checkpoints_now", "r1") == (4, 4, 4.5)
    positions = {table: store.conn.execute(f"SELECT run_id, generation, position FROM {table} ORDER BY 1, 2, 3")
                 .fetchall() for table in ("journal_rows", "journal_tail")}
    assert positions == {"journal_rows": [("r0", 1, 0), ("r1", 1, 0), ("r1", 1, 1)],
                         "journal_tail": [("r1", 1, 2), ("r1", 1, 3)]}
    clock.freeze(1_000_000.0)
    outcome = work(store, registry_of(_ticking(clock, 6)), "r1")
    assert outcome.status == "succeeded"
    assert _row(store, "checkpoints", "r1") == (6, 6, 4.5 + 2 * TICK)   # two new steps, each an eighth
    assert _rows(store, "journal_tail", "r1") == 0 and _rows(store, "journal_rows", "r1") == 6
    store.close()
