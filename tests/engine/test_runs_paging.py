"""The runs list pages by a keyset cursor: `runs_page(before=(created_at, id))` gives the runs after the last
one held, in the index's order, and the Runs screen reads only the next page when the cursor nears the end
(finishing the "needs you" section before it starts the others)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from helpers import Recording, screen_of, shown_ids, tui

import tui_agent.screens.runs as runs_screen
from tui_agent.filters import Filter
from tui_agent.states import Reason, RunStatus, needs_person
from tui_agent.store import open_store
from tui_agent.store.runs import insert_run, runs_page

# (status, reason) in turn: parked and waiting for approval need a person, sleeping and the rest do not
KINDS = [(RunStatus.SUCCEEDED, Reason.CHECK_PASSED), (RunStatus.PARKED, Reason.PERSON),
         (RunStatus.WAITING, Reason.SLEEP), (RunStatus.FAILED, Reason.ERROR), (RunStatus.QUEUED, Reason.NEW),
         (RunStatus.WAITING, Reason.APPROVAL), (RunStatus.SUCCEEDED, Reason.CHECK_PASSED)]


def fill(path: Path, kinds: list[tuple[str, str]], instant=lambda n: float(n // 4)) -> dict[str, dict]:
    """A run of each (status, reason) in `kinds`, in one transaction; created at `instant(n)` (by default four
    runs at each instant, so pages split ties). {run id: {created_at, status, reason}}."""
    store = open_store(path)
    runs = {}
    with store.write() as conn:
        for n, (status, reason) in enumerate(kinds):
            run_id, _ = insert_run(conn, agent="hello", agent_version="1", code_version="c", request="{}",
                                   budget="{}", model="scripted", now=instant(n))
            conn.execute("UPDATE runs SET status = ?, reason = ? WHERE id = ?", (status, reason, run_id))
            runs[run_id] = {"created_at": instant(n), "status": status, "reason": reason}
    store.close()
    return runs


def newest_first(runs: dict[str, dict], keep=lambda run: True) -> list[str]:
    return sorted((run_id for run_id, run in runs.items() if keep(run)),
                  key=lambda run_id: (runs[run_id]["created_at"], run_id), reverse=True)


def in_section(wanted: bool | None, status: str | None = None):
    return lambda run: ((wanted is None or needs_person(run["status"], run["reason"]) == wanted)
                        and (status is None or run["status"] == status))


def paged(store, size: int, **query) -> list[str]:
    """Every run `query` selects, a page of `size` at a time, each page after the last row of the one before."""
    ids, before = [], None
    while True:
        page = runs_page(store, limit=size, before=before, **query)
        assert len(page) <= size
        ids += [row["id"] for row in page]
        if len(page) < size:
            return ids
        before = (page[-1]["created_at"], page[-1]["id"])


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """1,400 runs of every kind, four at each instant, and a tie of 50 runs at one instant in the middle."""
    path = tmp_path_factory.mktemp("paging") / "runs.db"
    kinds = list(itertools.islice(itertools.cycle(KINDS), 1400))
    return path, fill(path, kinds, instant=lambda n: 500.0 if 600 <= n < 650 else float(n // 4))


@pytest.mark.parametrize("size", [200, 7, 50])
@pytest.mark.parametrize("wanted", [True, False, None])
@pytest.mark.parametrize("status", [None, RunStatus.PARKED, RunStatus.SUCCEEDED, RunStatus.WAITING])
def test_paging_by_cursor_gives_every_run_once_newest_first(big, size, wanted, status):
    path, runs = big
    store = open_store(path)
    try:
        expected = newest_first(runs, in_section(wanted, status))
        got = paged(store, size, needs_person=wanted, where=Filter(statuses=(status,) if status else ()))
    finally:
        store.close()
    assert len(got) == len(set(got))
    assert got == expected
    assert expected or (wanted, status) in {(True, RunStatus.SUCCEEDED), (False, RunStatus.PARKED)}


def test_paging_with_a_text_filter(big):
    path, runs = big
    store = open_store(path)
    try:
        approv = Filter(words=("APPROV",))              # matches the reason `approval`, case aside
        got = paged(store, 9, where=approv)
        assert got == newest_first(runs, lambda run: run["reason"] == Reason.APPROVAL)
        assert got
        assert paged(store, 11, where=approv, needs_person=True) == got
        assert paged(store, 11, where=approv, needs_person=False) == []
    finally:
        store.close()


def test_a_cursor_inside_a_tie_gives_the_rest_of_the_tie(tmp_path):
    runs = fill(tmp_path / "runs.db", [KINDS[0]] * 30, instant=lambda n: 7.0)
    store = open_store(tmp_path / "runs.db")
    try:
        ids = newest_first(runs)
        for at in (0, 1, 13, 28, 29):
            after = runs_page(store, limit=100, before=(7.0, ids[at]))
            assert [row["id"] for row in after] == ids[at + 1:]
        assert runs_page(store, limit=100, before=(7.5, "")) == runs_page(store, limit=100)
        assert runs_page(store, limit=100, before=(7.0, "")) == []
    finally:
        store.close()


@pytest.mark.parametrize("wanted", [True, False, None])
@pytest.mark.parametrize("cursor", [False, True])
def test_the_page_reads_an_index_range_in_order(big, monkeypatch, wanted, cursor):
    """EXPLAIN QUERY PLAN of the statement runs_page runs: the runs are read through an index in the order
    asked for (no temporary b-tree to sort them), from the cursor on when there is one."""
    path, runs = big
    store = open_store(path)
    try:
        recording = Recording(store.conn)
        before = (300.0, newest_first(runs)[400]) if cursor else None
        with monkeypatch.context() as patch:
            patch.setattr(store, "conn", recording)
            runs_page(store, limit=200, needs_person=wanted, before=before)
        [(sql, params)] = recording.statements
        plan = " | ".join(row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    finally:
        store.close()
    assert "TEMP B-TREE" not in plan, plan
    index = "runs_needs_person" if wanted else "idx_runs_created_at_id"
    assert f"{'SEARCH' if cursor else 'SCAN'} r USING INDEX {index}" in plan, plan
    if cursor:
        assert f"INDEX {index} (created_at<" in plan, plan


# -- the Runs screen --------------------------------------------------------------------------------------------

PAGE = runs_screen.PAGE


@pytest.fixture
def screenful(tmp_path) -> tuple[Path, dict[str, dict]]:
    """300 runs that need a person and 400 that do not, mixed in time, two at each instant."""
    asks, others = [(RunStatus.PARKED, Reason.PERSON), (RunStatus.WAITING, Reason.APPROVAL)], \
        [(RunStatus.SUCCEEDED, Reason.CHECK_PASSED), (RunStatus.WAITING, Reason.SLEEP)]
    kinds = [asks[n % 2] if n % 7 in (0, 3, 5) else others[n % 2] for n in range(700)]
    assert sum(needs_person(*kind) for kind in kinds) == 300
    return tmp_path / "runs.db", fill(tmp_path / "runs.db", kinds, instant=lambda n: 1000.0 + n // 2)


def counting(monkeypatch) -> list[tuple[dict, list[str]]]:
    """Every runs_page call the Runs screen makes from now on: (its arguments, the ids it returned)."""
    calls = []
    real = runs_screen.runs_page

    def recorded(store, **query):
        rows = real(store, **query)
        calls.append((query, [row["id"] for row in rows]))
        return rows

    monkeypatch.setattr(runs_screen, "runs_page", recorded)
    return calls


@pytest.mark.parametrize("needs_first", [True, False])
async def test_the_next_page_reads_only_the_next_page(screenful, monkeypatch, needs_first):
    db, runs = screenful
    if needs_first:
        expected = newest_first(runs, in_section(True)) + newest_first(runs, in_section(False))
    else:
        expected = newest_first(runs)
    calls = counting(monkeypatch)
    async with tui(db) as (app, pilot):
        screen = screen_of(app)
        if not needs_first:
            await pilot.press("o")
            await pilot.pause()
        assert screen.needs_first is needs_first
        assert shown_ids(app) == expected[:PAGE]
        table = screen.table
        table.move_cursor(row=PAGE - 10, animate=False)
        await pilot.pause()
        assert len(shown_ids(app)) == PAGE          # not near the end yet: nothing more read
        calls.clear()

        await pilot.press("ctrl+end")                    # the last row: the next page
        await pilot.pause()
        read = [run_id for _, ids in calls for run_id in ids]
        assert read == expected[PAGE:2 * PAGE]      # the next page and nothing else: no loaded row read again
        assert all(query["limit"] <= PAGE for query, _ in calls)
        if needs_first:       # 100 needs-you runs finish their section, then the others from their newest
            assert [(query["needs_person"], query["before"] is None, len(ids)) for query, ids in calls] == [
                (True, False, 100), (False, True, 100)]
        else:
            assert [(query["needs_person"], query["before"], len(ids)) for query, ids in calls] == [
                (None, (runs[expected[PAGE - 1]]["created_at"], expected[PAGE - 1]), PAGE)]
        ids = shown_ids(app)
        assert len(ids) == len(set(ids)) == 2 * PAGE
        assert ids == expected[:2 * PAGE]
        assert table.cursor_row == PAGE - 1         # the cursor stayed on the row it was on
        assert screen.selected_id() == expected[PAGE - 1]

        calls.clear()
        await pilot.press("ctrl+end")                    # and on: a third page continues from the cursor
        await pilot.pause()
        ids = shown_ids(app)
        assert ids == expected[:3 * PAGE]
        assert [run_id for _, got in calls for run_id in got] == expected[2 * PAGE:3 * PAGE]
        if needs_first:
            assert [(query["needs_person"], len(got)) for query, got in calls] == [(False, PAGE)]

        calls.clear()
        await pilot.press("ctrl+end")                    # the last 100: then there is nothing more to read
        await pilot.pause()
        assert shown_ids(app) == expected
        await pilot.press("ctrl+end")
        await pilot.pause()
        assert sum(len(got) for _, got in calls) == 100
        assert all(query["limit"] <= PAGE for query, _ in calls)


async def test_a_refresh_rereads_the_loaded_pages_and_sort_goes_back_to_the_first(screenful, monkeypatch):
    db, runs = screenful
    expected = newest_first(runs, in_section(True)) + newest_first(runs, in_section(False))
    async with tui(db) as (app, pilot):
        screen = screen_of(app)
        await pilot.press("ctrl+end")
        await pilot.pause()
        assert shown_ids(app) == expected[:2 * PAGE]
        calls = counting(monkeypatch)
        screen.reload()                             # what a change in the database does
        await pilot.pause()
        assert shown_ids(app) == expected[:2 * PAGE]
        assert sum(len(got) for _, got in calls) == 2 * PAGE   # bounded by what was scrolled to
        assert screen.selected_id() == expected[PAGE - 1]
        await pilot.press("o")
        await pilot.pause()
        assert shown_ids(app) == newest_first(runs)[:PAGE]
        await pilot.press("o")
        await pilot.pause()
        assert shown_ids(app) == expected[:PAGE]
