"""The states and their rules (tui_agent/states.py) against the two other places that state them: the table in
docs/architecture.md section 3.1, and the SQL (store.runs.NEEDS_PERSON, the partial index runs_needs_person)."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from helpers import ROOT

from tui_agent.states import (
    EXIT_NOT_SUCCEEDED,
    EXIT_OK,
    EXIT_WAITING,
    TERMINAL,
    CallState,
    EntryKind,
    EventKind,
    Reason,
    RunStatus,
    WorkerState,
    budget_dimension,
    budget_reason,
    exit_code,
    needs_person,
    worker_state,
)
from tui_agent.store import open_store
from tui_agent.store.runs import NEEDS_PERSON, insert_run, runs_page

ARCHITECTURE = ROOT / "docs" / "architecture.md"
BUDGET = "budget:<dimension>"


def _table() -> list[tuple[str, list[str], bool]]:
    """Section 3.1's rows as (status, reasons, needs a person)."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("### 3.1"):text.index("### 3.2")]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 3:
            continue
        status = cells[0].strip("`")
        rows.append((status, re.findall(r"`([^`]+)`", cells[1]), cells[2].strip("*") == "yes"))
    return rows


def _pairs() -> list[tuple[str, str | None]]:
    """Every (status, reason) the table lists, with a real budget dimension for `budget:<dimension>`."""
    return [(status, budget_reason("cost_usd") if reason == BUDGET else reason)
            for status, reasons, _ in _table() for reason in reasons or [None]]


def test_the_table_lists_every_status_and_no_other():
    assert {status for status, _, _ in _table()} == set(RunStatus)


def test_the_table_lists_every_reason_the_code_writes_and_no_other():
    listed = {reason for _, reasons, _ in _table() for reason in reasons}
    assert listed - {BUDGET} == set(Reason)
    assert BUDGET in listed


def test_the_needs_a_person_column_agrees_with_needs_person():
    for status, reasons, asks in _table():
        for reason in reasons or [None]:
            reason = budget_reason("steps") if reason == BUDGET else reason
            assert needs_person(status, reason) == asks, (status, reason)


def test_budget_reason_and_dimension_are_inverse():
    assert budget_reason("cost_usd") == "budget:cost_usd"
    assert budget_dimension("budget:cost_usd") == "cost_usd"
    assert budget_dimension(Reason.PLATEAU) is None
    assert budget_dimension(None) is None
    assert budget_dimension("") is None


def test_exit_code_of_each_status():
    assert exit_code(RunStatus.SUCCEEDED) == EXIT_OK
    for status in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.PARKED):
        assert exit_code(status) == EXIT_NOT_SUCCEEDED
    for status in (RunStatus.WAITING, RunStatus.QUEUED, RunStatus.RUNNING):
        assert exit_code(status) == EXIT_WAITING
    assert exit_code("failed") == EXIT_NOT_SUCCEEDED  # a row's plain string works as well


def test_terminal_statuses_are_the_ended_ones():
    assert TERMINAL == {"succeeded", "failed", "cancelled"}


def _worker(**fields) -> dict:
    return {"stopped_at": None, "heartbeat_at": 100.0, "lease_s": 30.0} | fields


@pytest.mark.parametrize(("worker", "at", "gone", "state"), [
    (_worker(stopped_at=90.0), 200.0, True, WorkerState.STOPPED),  # a goodbye wins over a missing process
    (_worker(), 105.0, True, WorkerState.DEAD),
    (_worker(heartbeat_at=200.0), 100.0, False, WorkerState.CLOCK_AHEAD),
    (_worker(heartbeat_at=100.5), 100.0, False, WorkerState.ALIVE),  # within the slack: a clock step, not ahead
    (_worker(), 129.0, False, WorkerState.ALIVE),
    (_worker(), 130.0, False, WorkerState.SILENT),
])
def test_worker_state(worker, at, gone, state):
    assert worker_state(worker, at, gone=gone) == state


def test_the_sql_agrees_with_needs_person_on_every_pair(tmp_path):
    """NEEDS_PERSON, the partial index (runs_page with needs_person=True reads through INDEXED BY, which fails
    when the index's WHERE is not implied) and needs_person select the same runs, over every status and every
    reason, listed or not. No reason at all is written only with `running`: for `waiting` with none, SQL's
    NOT IN (NULL) and needs_person would differ."""
    store = open_store(tmp_path / "runs.db")
    reasons = [*Reason, budget_reason("cost_usd")]
    pairs = [*itertools.product(RunStatus, reasons), (RunStatus.RUNNING, None)]
    expected = {}
    for n, (status, reason) in enumerate(pairs):
        with store.write() as conn:
            run_id, _ = insert_run(conn, agent="hello", agent_version="1", code_version="c", request="{}",
                                   budget="{}", model="scripted", now=float(n))
            conn.execute("UPDATE runs SET status = ?, reason = ? WHERE id = ?", (status, reason, run_id))
        expected[run_id] = needs_person(status, reason)
    by_sql = {row[0] for row in store.conn.execute(f"SELECT id FROM runs WHERE {NEEDS_PERSON}")}
    by_index = {row["id"] for row in runs_page(store, limit=len(expected), needs_person=True)}
    others = {row["id"] for row in runs_page(store, limit=len(expected), needs_person=False)}
    wanted = {run_id for run_id, asks in expected.items() if asks}
    assert by_sql == by_index == wanted
    assert others == set(expected) - wanted
    assert set(_pairs()) <= set(pairs)


def test_the_journal_table_lists_every_entry_kind_and_no_other():
    """Section 11's `journal_rows` row names the kinds a journal entry has: EntryKind's members, and no other."""
    text = ARCHITECTURE.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `journal_rows`"))
    listed = re.search(r"kind \(([^)]*)\)", row)[1]
    assert set(re.findall(r"`([^`]+)`", listed)) == set(EntryKind)


def test_the_vocabularies_are_the_strings_the_database_holds():
    """Str enums: a member is its stored string, so rows, SQL parameters and JSON stay as they were."""
    assert EntryKind.MODEL == "model" and f"{EntryKind.TOOL}" == "tool"
    assert {CallState.IN_FLIGHT, CallState.ANSWERED, CallState.FAILED} == {"in_flight", "answered", "failed"}
    assert EventKind.RETRY == "retry" and json.dumps([EventKind.NOTE]) == '["note"]'
