"""`R` on the run screen: the run replayed with the current code in a thread; a toast when it reproduces, a
modal with the diff when it diverges, whose button selects the entry where it did."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from helpers import ROOT, click, key, open_run, registry_of, start_and_work, tui

from tui_agent import Agent
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.replay import DivergenceModal


def _steps(*names: str) -> Agent:
    def run(ctx, request):
        return [ctx.step(name, lambda n=name: n) for name in names]

    return Agent(name="steps", run=run)


async def _replay(pilot, done) -> None:
    """Press R, then let the app run until `done()` (the worker's message was handled)."""
    await key(pilot, "R")
    await _replay_done(pilot, done)


async def _replay_done(pilot, done) -> None:
    """Let the app run until `done()`, at most 20 s."""
    for _ in range(400):
        if done():
            return
        await pilot.pause(0.05)
    raise AssertionError("the replay's outcome never showed")


async def test_r_replays_a_run_that_the_code_reproduces_and_says_so(store):
    outcome = start_and_work(store, load_registry([]), "nightly-report", {})
    toasts: list[str] = []
    async with tui(store.path, toasts=toasts) as (app, pilot):
        screen = await open_run(app, pilot, outcome.run_id)
        said = f"{outcome.run_id}: reproduced by the current code (7 of 7 entries; the code returned the " \
               "recorded result)"
        await _replay(pilot, lambda: said in toasts)
        assert toasts == [f"replaying {outcome.run_id} with the current code of nightly-report", said]
        assert app.screen is screen, "no modal for a reproduction"


async def test_r_on_changed_code_shows_the_divergence_and_goes_to_it(store):
    outcome = start_and_work(store, registry_of(_steps("a", "b", "c", "d")), "steps", {})
    async with tui(store.path) as (app, pilot):
        app.registry = registry_of(_steps("a", "b", "c2", "d"))   # the code as it is now
        screen = await open_run(app, pilot, outcome.run_id)
        await key(pilot, "home")
        await _replay(pilot, lambda: isinstance(app.screen, DivergenceModal))
        modal = app.screen
        assert modal.replay.divergence.position == 2
        assert str(modal.query_one("#divergence-message").render()) == \
            "#2: the journal holds 'c' here, the code now calls 'c2'"
        await click(pilot, "#confirm")
        assert app.screen is screen
        assert screen.selected.position == 2


async def test_r_for_an_agent_this_process_does_not_know_is_one_error_toast(store):
    outcome = start_and_work(store, registry_of(_steps("a")), "steps", {})
    toasts: list[str] = []
    async with tui(store.path, toasts=toasts) as (app, pilot):
        await open_run(app, pilot, outcome.run_id)
        await _replay(pilot, lambda: len(toasts) == 2)
        assert toasts[1].startswith(f"{outcome.run_id}: cannot replay: no agent named 'steps'")


async def test_the_palette_on_the_run_screen_offers_replay_diff_and_edit_for_the_selected_entry(store):
    from tui_agent.screens.palette import RunCommands
    from tui_agent.screens.replay import DivergenceModal

    def measured(first: str) -> Agent:
        def run(ctx, request):
            ctx.step(first, lambda: 1)
            ctx.progress(1)     # a progress entry: not a result a person may edit
            return {}

        return Agent(name="measured", run=run)

    run_id = start_and_work(store, registry_of(measured("a")), "measured", {}).run_id
    async with tui(store.path) as (app, pilot):
        app.registry = registry_of(measured("a2"))
        screen = await open_run(app, pilot, run_id)
        await key(pilot, "home")
        titles = [str(hit.text) async for hit in RunCommands(screen).discover()]
        assert {f"Replay {run_id} with the current code", f"Diff {run_id} with another run",
                "Edit #0 a and fork"} <= set(titles)
        (replay,) = [hit async for hit in RunCommands(screen).search("replay")]
        replay.command()
        await _replay_done(pilot, lambda: isinstance(app.screen, DivergenceModal))
    async with tui(store.path) as (app, pilot):   # the progress entry selected: no edit offered
        screen = await open_run(app, pilot, run_id)
        await key(pilot, "end")
        titles = [str(hit.text) async for hit in RunCommands(screen).discover()]
        assert not any(title.startswith("Edit") for title in titles), titles


_LOOPING_REPLAY = textwrap.dedent("""
    import asyncio, sys, time
    from helpers import key, open_run, recorded_toasts, registry_of, start_and_work, tui
    from tui_agent import Agent
    from tui_agent.store import open_store

    def recorded(ctx, request):
        return ctx.step("a", lambda: 1)

    def loops(ctx, request):   # the code as it is now: it never returns after its last journaled call
        ctx.step("a", lambda: 1)
        while True:
            time.sleep(0.05)

    store = open_store(sys.argv[1])
    run_id = start_and_work(store, registry_of(Agent(name="x", run=recorded)), "x", {}).run_id

    async def main():
        toasts = []
        async with tui(store.path, toasts=toasts) as (app, pilot):
            app.registry = registry_of(Agent(name="x", run=loops))
            await open_run(app, pilot, run_id)
            await key(pilot, "R")
            await pilot.pause(0.5)
            await key(pilot, "R")   # a second R while the first still runs
            print(toasts[-1], flush=True)

    asyncio.run(main())
    print("quit", flush=True)
""")


def test_quitting_while_rs_agent_code_never_returns_ends_the_process(tmp_path):
    """The replay's thread is a daemon: code stuck in a loop neither holds the TUI open at quit nor is started
    twice."""
    tests = ROOT / "tests"   # where helpers is
    done = subprocess.run([sys.executable, "-c", _LOOPING_REPLAY, str(tmp_path / "runs.db")], cwd=tests,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said, quit_ = done.stdout.splitlines()
    assert "is still running: the agent's code has not returned" in said
    assert quit_ == "quit"
