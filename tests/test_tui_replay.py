"""`R` on the run screen: the run replayed with the current code in a thread; a toast when it reproduces, a
modal with the diff when it diverges, whose button selects the entry where it did."""

from __future__ import annotations

from helpers import click, key, open_run, registry_of, start_and_work, tui

from tui_agent import Agent
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.replay import DivergenceModal


def _steps(*names: str) -> Agent:
    def run(ctx, request):
        return [ctx.step(name, lambda n=name: n) for name in names]

    return Agent(name="steps", run=run)


async def _replay(pilot, done) -> None:
    """Press R, then let the app run until `done()` (the worker's message was handled), at most 20 s."""
    await key(pilot, "R")
    for _ in range(400):
        if done():
            return
        await pilot.pause(0.05)
    raise AssertionError("the replay's outcome never showed")


async def test_r_replays_a_run_that_the_code_reproduces_and_says_so(store, db_path):
    outcome = start_and_work(store, load_registry([]), "nightly-report", {})
    toasts: list[str] = []
    async with tui(db_path, toasts=toasts) as (app, pilot):
        screen = await open_run(app, pilot, outcome.run_id)
        said = f"{outcome.run_id}: reproduced by the current code (7 of 7 entries; the code returned the " \
               "recorded result)"
        await _replay(pilot, lambda: said in toasts)
        assert toasts == [f"replaying {outcome.run_id} with the current code of nightly-report", said]
        assert app.screen is screen, "no modal for a reproduction"


async def test_r_on_changed_code_shows_the_divergence_and_goes_to_it(store, db_path):
    outcome = start_and_work(store, registry_of(_steps("a", "b", "c", "d")), "steps", {})
    async with tui(db_path) as (app, pilot):
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


async def test_r_for_an_agent_this_process_does_not_know_is_one_error_toast(store, db_path):
    outcome = start_and_work(store, registry_of(_steps("a")), "steps", {})
    toasts: list[str] = []
    async with tui(db_path, toasts=toasts) as (app, pilot):
        await open_run(app, pilot, outcome.run_id)
        await _replay(pilot, lambda: len(toasts) == 2)
        assert toasts[1].startswith(f"{outcome.run_id}: cannot replay: no agent named 'steps'")
