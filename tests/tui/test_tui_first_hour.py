"""What a new user tripped over in the TUI during the first hour (issue 13, items 3, 4, 5, 7, 8, 13, 14 and
19): Pilot tests over the demo's executed runs, or over one queued run of the hello agent."""

from __future__ import annotations

import os
import re
import socket

import pytest
from helpers import changed, click, key, screen_of, select, selected, shown_ids, strip, tui
from textual.command import CommandList, CommandPalette
from textual.widgets import DataTable, Footer
from textual.widgets._footer import FooterKey

from tui_agent import operate
from tui_agent.report import budget_stop
from tui_agent.runtime.clock import now, parse_instant
from tui_agent.runtime.registry import load_registry
from tui_agent.screens import runs as runs_module
from tui_agent.screens.modals import ConfirmModal
from tui_agent.screens.palette import RunCommands
from tui_agent.screens.run import RunScreen
from tui_agent.screens.runs import RunsScreen
from tui_agent.store import open_store
from tui_agent.store.runs import events_for, get_run, list_runs, recorded_positions
from tui_agent.store.workers import register, stopped
from tui_agent.widgets.status import badge

pytestmark = pytest.mark.demo_on_both   # on the SQLite demo and on PostgreSQL

NO_WORKER = "no worker is running: press w then + to start one, or run `tui-agent worker`"


@pytest.fixture
def frozen_clock(clock):
    """The clock standing still at 2026-11-29 14:00 UTC (the `clock` fixture puts it back)."""
    clock.freeze(parse_instant("2026-11-29T14:00:00Z"))
    return clock


@pytest.fixture
def one_queued(db_path) -> str:
    """A database holding one queued run of the hello agent (no worker)."""
    store = open_store(db_path)
    run_id, _ = operate.start(store, load_registry(), agent_name="hello", request={"name": "first hour"})
    store.close()
    return run_id


def columns(app) -> list[str]:
    return [column.key.value for column in screen_of(app).query_one(DataTable).columns.values()]


def footer_keys(screen) -> dict[str, bool]:
    """Each key the footer holds and whether it can be read: inside the screen, not under the palette key
    docked on the right (its own trailing space may be)."""
    footer = screen.query_one(Footer)
    palette = footer.query_one(".-command-palette").region
    return {k.key: k.region.right - 1 <= palette.x for k in footer.query(FooterKey)
            if not k.has_class("-command-palette")}


async def palette_offers(pilot) -> list[str]:
    """ctrl+p, nothing typed: the commands the palette lists (first line of each)."""
    await key(pilot, "ctrl+p")
    assert isinstance(pilot.app.screen, CommandPalette)
    listed = pilot.app.screen.query_one(CommandList)
    for _ in range(40):                       # the providers answer in a worker
        await pilot.pause(0.05)
        if any(str(listed.get_option_at_index(i).prompt).startswith("Start a new run")
               for i in range(listed.option_count)):
            break
    return [str(listed.get_option_at_index(i).prompt).split("\n")[0] for i in range(listed.option_count)]


async def discovered(app) -> dict[str, object]:
    return {str(hit.display): hit.command async for hit in RunCommands(app.screen).discover()}


def stopped_at(app, run_id: str) -> int:
    """Where a fork from the runs screen starts: after every entry the run recorded."""
    return recorded_positions(app.reader.conn, run_id, get_run(app.reader, run_id)["generation"])


def forks_of(app, parent: str) -> list[dict]:
    return [run for run in (get_run(app.reader, r["id"]) for r in list_runs(app.reader)) if run["parent_id"] == parent]


# -- 3. widths follow the content on a refresh that updates cells in place ------------------------------


async def test_a_cell_that_grows_on_refresh_widens_its_column(db_path, one_queued):
    async with tui(db_path) as (app, pilot):
        await pilot.pause()
        table = screen_of(app).query_one(DataTable)
        queued = table.columns[next(k for k in table.columns if k.value == "status")].content_width
        operate.park(app.store, one_queued)   # same run, same place: "○ queued" becomes "■ parked: person"
        await changed(pilot)
        await pilot.pause()
        grown = badge("parked", "person")
        assert str(table.get_cell(one_queued, "status")) == grown.plain
        status = table.columns[next(k for k in table.columns if k.value == "status")]
        assert status.content_width == grown.cell_len > queued


# -- 4. ages advance without a database change -------------------------------------------------------------


async def test_ages_and_the_strips_minutes_advance_on_a_timer_without_reading_the_database(
        db_path, frozen_clock, monkeypatch):
    monkeypatch.setattr(runs_module, "AGE_TICK_S", 0.05, raising=False)
    store = open_store(db_path)
    run_id, _ = operate.start(store, load_registry(), agent_name="hello", request={"name": "first hour"})
    store.close()
    async with tui(db_path) as (app, pilot):
        await pilot.pause()
        table = screen_of(app).query_one(DataTable)
        assert str(table.get_cell(run_id, "age")) == "0s"
        assert "queued (new) 0 min ago" in strip(app)
        statements: list[str] = []
        app.reader.conn.set_trace_callback(statements.append)
        frozen_clock.advance(65)
        await pilot.pause(0.3)                # a few ticks, and no commit anywhere
        app.reader.conn.set_trace_callback(None)
        assert str(table.get_cell(run_id, "age")) == "1m"
        assert "queued (new) 1 min ago" in strip(app)
        assert statements == []


# -- 5. a filter that matches nothing --------------------------------------------------------------------


async def test_a_filter_that_matches_nothing_says_so_and_an_unknown_status_is_named(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        await pilot.press("slash", *"status:bogus", "enter")
        await pilot.pause()
        assert shown_ids(app) == []
        assert strip(app) == ('no run matches "status:bogus": bogus is not a status (statuses are: queued, '
                              'running, waiting, parked, succeeded, failed, cancelled); escape clears the filter')
        await key(pilot, "escape")
        await pilot.press("slash", *"status:failed nosuchagent", "enter")
        await pilot.pause()
        assert strip(app) == 'no run matches "status:failed nosuchagent"; escape clears the filter'
        await key(pilot, "escape")
        assert len(shown_ids(app)) == len(roles)
        assert shown_ids(app)[0] in strip(app)                 # the cursor is back on the top run


async def test_an_empty_database_still_says_how_to_start(db_path):
    open_store(db_path).close()
    async with tui(db_path) as (app, pilot):
        await pilot.pause()
        assert strip(app) == "No runs yet: press n to start one."


# -- 7. the palette offers what applies, fork included, before anything is typed --------------------------


async def test_ctrl_p_lists_the_selected_runs_actions_before_anything_is_typed(demo):
    async with selected(demo, "parked on cost") as (app, pilot, parked):
        fork = f"Fork {parked} from where it stopped (#{stopped_at(app, parked)})"
        mine = [text for text in await palette_offers(pilot) if parked in text]
        assert sorted(mine) == sorted([f"Resume {parked}", f"Cancel {parked}", f"Raise a budget ceiling {parked}",
                                       fork])


async def test_the_palette_never_offers_what_does_not_apply(demo):
    db, roles = demo
    async with tui(db) as (app, pilot):
        done = roles["succeeded"]
        await select(pilot, done)
        assert sorted(await discovered(app)) == [f"Fork {done} from where it stopped (#{stopped_at(app, done)})",
                                                 "Start a new run"]


async def test_fork_from_the_palette_on_the_runs_screen_goes_on_from_where_the_run_stopped(demo):
    async with selected(demo, "failed") as (app, pilot, failed):
        recorded = stopped_at(app, failed)
        (await discovered(app))[f"Fork {failed} from where it stopped (#{recorded})"]()
        await pilot.pause()
        assert isinstance(app.screen, ConfirmModal)
        await click(pilot, "#confirm")
        children = forks_of(app, failed)
        assert [(c["fork_step"], c["status"]) for c in children] == [(recorded, "queued")]
        assert isinstance(app.screen, RunScreen)
        assert app.screen.run_id == children[0]["id"]


async def test_fork_from_the_palette_on_the_run_screen_starts_at_the_selected_position(demo):
    db, roles = demo
    done = roles["succeeded"]
    async with tui(db) as (app, pilot):
        await pilot.pause()
        app.push_screen(RunScreen(done))
        await pilot.pause()
        await pilot.press("k", "k")          # from #6 to #4 (summarize)
        await pilot.pause()
        commands = await discovered(app)
        assert f"Resume {done}" not in commands
        commands[f"Fork {done} at #4 summarize"]()
        await pilot.pause()
        await click(pilot, "#confirm")
        [child] = forks_of(app, done)
        assert child["fork_step"] == 4
        assert app.screen.run_id == child["id"]


# -- 8. a queued run with nobody to claim it ------------------------------------------------------------


async def test_a_queued_run_without_a_live_worker_says_how_to_start_one(demo):
    db, roles = demo
    queued = roles["running"]              # the demo leaves it queued for the worker the TUI starts
    async with tui(db) as (app, pilot):
        await select(pilot, queued)
        assert NO_WORKER in strip(app)
        assert "will claim" not in strip(app)
        register(app.store, "w-here", pid=os.getpid(), host=socket.gethostname(), concurrency=1, lease_s=60.0,
                 now=now())   # this process: alive
        await changed(pilot)
        await pilot.pause()
        assert "a worker will claim it" in strip(app)
        assert NO_WORKER not in strip(app)
        stopped(app.store, "w-here", now())
        await changed(pilot)
        await pilot.pause()
        assert NO_WORKER in strip(app)


# -- 13. 80x24: the footer keeps quit and help; the table keeps BUDGET and AGE -----------------------------


@pytest.mark.layout_only   # keys and layout: the reads are the module's other tests', on both stores
async def test_at_80x24_every_screen_keeps_quit_and_help_and_the_table_drops_worker_and_att_first(demo):
    async with tui(demo[0], size=(140, 30)) as (app, pilot):
        await pilot.pause()
        assert columns(app) == ["id", "agent", "status", "step", "att", "worker", "cost", "tokens", "budget", "burn",
                                "age"]
        await pilot.resize_terminal(120, 30)    # then ATT and TOKENS go, the running run's BURN sparkline stays
        await pilot.pause()
        assert columns(app) == ["id", "agent", "status", "step", "cost", "budget", "burn", "age"]
        wide = footer_keys(app.screen)
        assert all(wide.values())
        # the run actions go first (the strip names the key for the selected run): at 120, `a` before the Simulator
        assert {"slash", "n", "r", "p", "x", "c", "w", "s", "m", "q", "question_mark"} <= set(wide)

        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert columns(app) == ["id", "agent", "status", "step", "cost", "age"]
        narrow = footer_keys(app.screen)
        assert all(narrow[k] for k in ("q", "question_mark", "w", "s", "slash", "n", "m")), narrow

        await key(pilot, "enter")            # the run screen: its lower panes are tabs, and t switches them
        assert isinstance(app.screen, RunScreen)
        await pilot.pause()
        shown = footer_keys(app.screen)
        assert all(shown.get(k) for k in ("q", "question_mark", "t", "escape")), shown
        await key(pilot, "escape")

        for screen_key in ("w", "s"):
            await key(pilot, screen_key)
            shown = footer_keys(app.screen)
            assert shown.get("q"), (screen_key, shown)
            assert shown.get("question_mark"), (screen_key, shown)
            await key(pilot, "escape")
        assert isinstance(app.screen, RunsScreen)


# -- 14. help: the current screen first, and nothing cut ---------------------------------------------------


@pytest.mark.layout_only   # keys and layout: the reads are the module's other tests', on both stores
async def test_help_starts_with_the_current_screens_keys_and_wraps_to_its_width(demo):
    async with tui(demo[0], size=(80, 24)) as (app, pilot):
        await pilot.pause()
        for opened_from, heading in (("w", "Workers"), ("enter", "Run"), (None, "Runs")):
            if opened_from:
                await key(pilot, opened_from)
            await key(pilot, "question_mark")
            help_screen = app.screen
            headings = [str(label.content) for label in help_screen.query(".help-heading")]
            assert headings[:2] == [f"{heading} (this screen)", "Everywhere"], headings
            scroll = help_screen.query_one(".help-keys")
            assert scroll.virtual_size.width <= scroll.size.width
            assert scroll.max_scroll_x == 0
            await key(pilot, "escape")       # closes help
            if opened_from:
                await key(pilot, "escape")   # back to the runs


# -- 19. a run its cost budget stopped: the figure the next call needed ----------------------------------


def needed(store, run_id: str) -> str:
    """The figure the runtime's refusal recorded, as its event says it."""
    message = next(e["message"] for e in events_for(store, run_id) if "exhausted" in e["message"])
    return re.search(r"the next call needs \$([0-9.]+)", message).group(1)


async def test_the_strip_says_what_the_next_model_call_needs_against_the_ceiling(demo):
    async with selected(demo, "parked on cost") as (app, pilot, parked):
        figure = f"{float(needed(app.reader, parked)):g}"
        assert strip(app) == (f"{parked} · nightly-report · stopped by its cost_usd budget\n"
                              f"the next model call may cost up to ${figure} and the ceiling is $0.002: raise it with b")


def test_show_says_it_too_with_the_command_that_raises_it(demo, invoke):
    db, roles = demo
    parked = roles["parked on cost"]
    store = open_store(db)
    figure = f"{float(needed(store, parked)):g}"
    result = invoke("--db", str(db), "show", parked)
    assert result.exit_code == 0, result.output
    assert (f"stopped   the next model call may cost up to ${figure} and the ceiling is $0.002: raise it with "
            f"tui-agent resume {parked} --budget cost_usd=VALUE") in result.output.splitlines()
    with store.write() as conn:              # once something was spent, the sentence says how much
        conn.execute("UPDATE checkpoints SET used_cost_usd = 0.0015 WHERE run_id = ?", (parked,))
    assert budget_stop(store, parked, raise_with="b") == (
        f"the next model call may cost up to ${figure} and $0.0015 of the $0.002 ceiling is spent: raise it with b")
    assert budget_stop(store, roles["failed"], raise_with="b") is None
    store.close()
