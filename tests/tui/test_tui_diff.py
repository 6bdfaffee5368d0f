"""The diff screen (Pilot): `d` on a run screen offers the other run (a fork's parent first), choosing opens the
diff, the first divergence is marked when the background search posts it (and not before), `n` jumps there
reading its page, and the rows page as the cursor moves."""

from __future__ import annotations

import io
import threading
import time

import pytest
from diff_agents import COUNTING, asker
from helpers import key, open_run, registry_of, start_and_work, tui, work
from rich.console import Console
from textual.widgets import Input, OptionList

from tui_agent.operate import fork, resume, start
from tui_agent.screens import diff as diff_screen
from tui_agent.screens.diff import (
    DIVERGES,
    SHARED,
    AlignedRows,
    DiffScreen,
    PickRunModal,
)

pytestmark = pytest.mark.demo_on_both   # on the SQLite demo and on PostgreSQL


def shown(app, selector: str) -> str:
    """What a Static on the diff screen shows, as plain text (a table rendered at 160 columns)."""
    console = Console(width=160, file=io.StringIO(), record=True)
    console.print(app.screen.query_one(selector).content)
    return console.export_text()


def rows(app) -> AlignedRows:
    return app.screen.query_one(AlignedRows)


def marks(app) -> dict[int, str]:
    """The mark of each row held, by position."""
    return {row["position"]: str(rows(app).get_option_at_index(i).prompt)[0] for i, row in enumerate(rows(app).rows)}


async def settle(app, pilot, until, deadline_s: float = 10) -> None:
    """Let the app run until `until()` holds (the search is a thread)."""
    end = time.monotonic() + deadline_s
    while not until():
        assert time.monotonic() < end, "timed out"
        await pilot.pause(0.02)


@pytest.fixture
def forked(store):
    parent = start_and_work(store, registry_of(asker("all quiet")), "asker", {"team": "ops"}).run_id
    child = fork(store, parent, 2)
    assert work(store, registry_of(asker("three incidents")), child).status == "succeeded"
    other = start_and_work(store, registry_of(asker("x")), "asker", {"team": "ops"}).run_id
    return store.path, parent, child, other


async def test_d_on_a_forks_run_screen_offers_its_parent_first_and_opens_the_diff(forked):
    db, parent, child, other = forked
    async with tui(db) as (app, pilot):
        await open_run(app, pilot, child)
        await key(pilot, "d")
        assert isinstance(app.screen, PickRunModal)
        offered = app.screen.query_one("#choices", OptionList)
        assert [offered.get_option_at_index(i).id for i in range(offered.option_count)] == [parent, other]
        assert "its parent (forked at #2)" in str(offered.get_option_at_index(0).prompt)
        await key(pilot, "enter")                   # the parent, highlighted first
        screen = app.screen
        assert isinstance(screen, DiffScreen)
        assert (screen.a_id, screen.b_id) == (parent, child)     # the parent on the left
        await settle(app, pilot, lambda: screen.searched)
        assert marks(app) == {0: SHARED, 1: SHARED, 2: DIVERGES, 3: "≠"}
        header = shown(app, "#diff-header")
        assert f"A {parent}" in header and f"B {child}" in header and "fork of A at #2" in header
        assert "first divergence at #2" in shown(app, "#diff-found")
        totals = shown(app, "#diff-totals")
        assert "steps" in totals and "wall time" in totals and "-2" in totals     # 4 steps against the fork's 2
        await key(pilot, "escape")
        assert app.screen.__class__.__name__ == "RunScreen"


async def test_a_typed_id_in_the_picker_opens_that_diff(forked):
    db, parent, child, other = forked
    async with tui(db) as (app, pilot):
        await open_run(app, pilot, parent)
        await key(pilot, "d")
        await pilot.press("tab", *other[2:8])        # from the list to the id field; the r- may be left out
        assert app.screen.query_one("#typed", Input).value == other[2:8]
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DiffScreen)
        assert (app.screen.a_id, app.screen.b_id) == (parent, other)


async def test_the_mark_appears_when_the_search_posts_its_message_and_n_jumps_there(store, monkeypatch):
    registry = registry_of(COUNTING)
    a = start_and_work(store, registry, "counting", {"steps": 400}).run_id
    b = start_and_work(store, registry, "counting", {"steps": 400, "odd_at": 333}).run_id
    release, searches = threading.Event(), []
    search = diff_screen.search

    def held(*args, **kwargs):
        searches.append(threading.current_thread() is not threading.main_thread())
        assert release.wait(10)
        return search(*args, **kwargs)

    monkeypatch.setattr(diff_screen, "search", held)
    async with tui(store.path) as (app, pilot):
        await pilot.pause()
        screen = DiffScreen(a, b)
        app.push_screen(screen)
        await settle(app, pilot, lambda: searches)
        assert searches == [True]                    # in a thread worker
        await pilot.pause(0.1)
        assert not screen.searched
        assert DIVERGES not in marks(app).values()
        assert "searching" in shown(app, "#diff-found")
        held_positions = [r["position"] for r in rows(app).rows]
        assert held_positions == list(range(100))    # one page read to open
        await key(pilot, "n")                        # nothing found yet: n stays
        assert rows(app).selected_position == 0
        release.set()
        await settle(app, pilot, lambda: screen.searched)
        assert screen.divergence["position"] == 333 and screen.divergence["why"] == "result"
        assert "first divergence at #333" in shown(app, "#diff-found")
        await key(pilot, "n")                        # reads the page around it
        assert rows(app).selected_position == 333
        assert marks(app)[333] == DIVERGES
        assert [p for p, m in marks(app).items() if m != " "] == [333]
        assert "-1" in shown(app, "#detail-b")
        await key(pilot, "end")
        assert rows(app).selected_position == 399
        await key(pilot, "home")
        assert rows(app).selected_position == 0


async def test_the_rows_page_as_the_cursor_moves(store):
    registry = registry_of(COUNTING)
    a = start_and_work(store, registry, "counting", {"steps": 260}).run_id
    b = start_and_work(store, registry, "counting", {"steps": 250}).run_id
    async with tui(store.path) as (app, pilot):
        await pilot.pause()
        screen = DiffScreen(a, b)
        app.push_screen(screen)
        await settle(app, pilot, lambda: screen.searched)
        assert screen.divergence == {"position": 250, "why": "only_a",
                                     "message": "only A has an entry here ('s250'); B has none from here on"}
        assert rows(app).rows[-1]["position"] == 99
        await pilot.press("g", *"90", "enter")                # held: only the cursor moves
        await pilot.pause()
        assert rows(app).selected_position == 90 and rows(app).rows[-1]["position"] == 99
        await pilot.press(*"j" * 6)
        await pilot.pause()
        assert rows(app).selected_position == 96
        assert rows(app).rows[-1]["position"] == 199          # the next page came as the cursor neared the end
        await key(pilot, "k")
        assert rows(app).selected_position == 95
        await key(pilot, "end")
        assert rows(app).selected_position == 259
        assert rows(app).rows[-1]["b"] is None and marks(app)[250] == DIVERGES
        assert "only A" in shown(app, "#detail-b") or \
            "no entry" in shown(app, "#detail-b")



async def test_a_diff_whose_runs_could_not_be_read_takes_only_escape_and_the_cursor_keys(store):
    """A run gone before the diff read it: g, n, home and end do nothing (they raised on the missing pair);
    escape goes back."""
    a = start_and_work(store, registry_of(COUNTING), "counting", {"steps": 3}).run_id
    async with tui(store.path) as (app, pilot):
        await pilot.pause()
        screen = DiffScreen(a, "r-gone")
        app.push_screen(screen)
        await settle(app, pilot, lambda: screen.searched)     # the search could not read the pair either
        assert screen.pair is None
        await pilot.press("g", "n", "home", "end", "j")
        await pilot.pause()
        assert app.screen is screen and rows(app).rows == []
        await key(pilot, "escape")
        assert app.screen is not screen


async def test_help_lists_d_on_the_run_screen_and_the_diff_screens_keys(forked):
    db, parent, child, other = forked
    async with tui(db) as (app, pilot):
        await pilot.pause()
        app.push_screen(DiffScreen(parent, child))
        await pilot.pause()
        await key(pilot, "question_mark")
        headings = [str(label.content) for label in app.screen.query(".help-heading")]
        assert headings[0] == "Diff (this screen)" and "Run" in headings
        texts = []
        for section in app.screen.query(".help-section"):
            console = Console(width=160, file=io.StringIO(), record=True)
            console.print(section.content)
            texts.append(console.export_text())
        by_heading = dict(zip(headings, texts))
        assert "First divergence" in by_heading["Diff (this screen)"]
        assert "Diff with…" in by_heading["Run"] and by_heading["Run"].count("\nd ") == 1

# -- how it looks (the snapshot fixture: executed demo runs, frozen clock, seeded ids) --------------------


def _diff_of_a_fork(roles):
    """The succeeded demo run and a fork of it at #4 that no worker has taken yet: the kept entries once, then
    only the parent's."""
    from tui_fixture import FROZEN_AT

    from tui_agent.runtime.clock import CLOCK
    from tui_agent.store import open_store

    store = open_store("runs.db")
    CLOCK.freeze(FROZEN_AT - 60)
    child = fork(store, roles["succeeded"], 4)
    CLOCK.freeze(FROZEN_AT)
    store.close()

    async def opened(pilot):
        pilot.app.push_screen(DiffScreen(roles["succeeded"], child))
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    return opened


def test_the_diff_of_a_fork_and_its_parent(snapshot_roles, snap_compare):
    from tui_agent.app import TuiAgentApp

    assert snap_compare(TuiAgentApp("runs.db", poll_s=None), run_before=_diff_of_a_fork(snapshot_roles),
                        press=["n"], terminal_size=(120, 40))


async def test_a_stored_request_that_cannot_be_read_shows_as_null_in_the_header(forked):
    # As an older tui-agent could have left it: a request nested past what Python's parser can read.
    path, parent, child, _ = forked
    deep = "[" * 1200 + "]" * 1200
    async with tui(path) as (app, pilot):
        with app.store.write() as conn:
            conn.execute("UPDATE runs SET request = ? WHERE id = ?", (deep, parent))
        app.push_screen(DiffScreen(parent, child))
        await settle(app, pilot, lambda: app.screen.searched)
        header = shown(app, "#diff-header")
        assert f"A {parent}" in header and f"B {child}" in header and "null" in header, header


async def test_after_a_run_restarts_the_rows_paged_in_are_its_new_generations(store):
    registry = registry_of(COUNTING)
    a = start_and_work(store, registry, "counting", {"steps": 260}).run_id
    b = start(store, registry, agent_name="counting", request={"steps": 250}, budget={"steps": 200})[0]
    assert work(store, registry, b).status == "parked"      # at its budget, with steps 0-199 in generation 1
    async with tui(store.path) as (app, pilot):
        await pilot.pause()
        screen = DiffScreen(a, b)
        app.push_screen(screen)
        await settle(app, pilot, lambda: screen.searched)
        assert rows(app).rows[0]["b"] is not None
        resume(store, b, restart=True)                      # a new generation of b, with no entry yet
        screen.reload()
        await settle(app, pilot, lambda: screen.read_pair.b["generation"] == 2)
        assert [row["b"] for row in rows(app).rows if row["b"] is not None] == []
        await key(pilot, "end")                             # pages in the rest: none of them b's old ones
        assert rows(app).selected_position == 259
        assert [row["position"] for row in rows(app).rows if row["b"] is not None] == []
