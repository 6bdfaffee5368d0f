"""Every modal of the app at 80x24 (issue 37, item 6), through Pilot on the demo: the modal classes are found by
importing the TUI's modules, and each must have a case here that opens it; at the initial scroll position its
title, its buttons, its fields and its selected choice are all on the screen."""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import key, opened, select, tui
from textual.errors import NoWidget
from textual.screen import ModalScreen
from textual.widgets import Button, OptionList, RadioButton

import tui_agent.app
import tui_agent.screens
import tui_agent.widgets
from tui_agent import operate
from tui_agent.replay import DIFF_LINES, Divergence, Replay
from tui_agent.runtime.clock import now
from tui_agent.runtime.liveness import HOST
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.diff import PickRunModal
from tui_agent.screens.help import HelpScreen
from tui_agent.screens.modals import (
    ApproveModal,
    BudgetModal,
    ConfirmModal,
    GotoModal,
    NewRunModal,
    PredictModal,
    ReconcileModal,
)
from tui_agent.screens.replay import DivergenceModal
from tui_agent.screens.schedules import ScheduleDetail
from tui_agent.screens.simulator import SimulatorApp
from tui_agent.sim import Settings
from tui_agent.store import open_store
from tui_agent.store.workers import register

SMALL = (80, 24)


def modal_classes() -> set[type]:
    """Every modal screen the TUI's own modules define (a base others derive from, such as Dialog, is not shown
    itself): found by importing them all, so a new one is found without being listed anywhere."""
    for package in (tui_agent.screens, tui_agent.widgets):     # tui_agent.app is imported above
        for found in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            importlib.import_module(found.name)
    classes, todo = set(), [ModalScreen]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("tui_agent."):
                classes.add(sub)
    return {c for c in classes if not any(other is not c and issubclass(other, c) for other in classes)}


# -- how each modal is opened: a small app state each, at 80x24 --------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    modal: type
    opens: Callable[[tuple[Path, dict]], object]   # demo -> an async context manager of (app, pilot)


def on_run(role: str, *keys: str):
    """The run screen of the demo run playing `role`, then `keys` pressed."""
    @asynccontextmanager
    async def opens(demo):
        async with opened(demo, role, size=SMALL) as (app, pilot, _):
            for name in keys:
                await key(pilot, name)
            yield app, pilot
    return opens


def on_runs(*keys: str, role: str | None = None, before: Callable[[Path], None] = lambda db: None):
    """The Runs screen (after `before(db)` prepared the demo), the run playing `role` selected, then `keys`."""
    @asynccontextmanager
    async def opens(demo):
        before(demo[0])
        async with tui(demo[0], size=SMALL) as (app, pilot):
            await pilot.pause()
            if role is not None:
                await select(pilot, demo[1][role])
            for name in keys:
                await key(pilot, name)
            yield app, pilot
    return opens


def in_simulator(*keys: str, settings: Settings | None = None):
    @asynccontextmanager
    async def opens(demo):
        app = SimulatorApp(settings)
        async with app.run_test(size=SMALL) as pilot:
            for name in keys:
                await app.workers.wait_for_complete()     # the scenario's thread reaches its next stop
                await key(pilot, name)
            await app.workers.wait_for_complete()
            await pilot.pause()
            yield app, pilot
    return opens


def with_schedule(db: Path) -> None:
    store = open_store(db)
    operate.schedule_add(store, load_registry(), "nightly", "nightly-report", "0 2 * * *", tz="Europe/Berlin",
                         overlap="wait")
    store.close()


def with_a_worker_here(db: Path) -> None:
    """A worker row for this very process: alive on this host, so K offers to kill it (the test never says yes)."""
    store = open_store(db)
    register(store, "w-here", os.getpid(), HOST, 1, 60, now())
    store.close()


@asynccontextmanager
async def divergence(demo):
    """The replay's modal with the longest diff it shows (DIFF_LINES lines, each wider than the screen)."""
    async with opened(demo, "succeeded", size=SMALL) as (app, pilot, run_id):
        diff = tuple(f"- entry {i}: " + "recorded text " * 8 for i in range(DIFF_LINES))
        replay = Replay(run_id, "nightly-report", "succeeded", 7, 2, "diverged", Divergence(
            2, "changed-request", "fetch:incidents", "fetch:incidents", "#2: the request the code makes now differs "
            "from the one the journal holds, field by field below", diff))
        app.push_screen(DivergenceModal(replay))
        await pilot.pause()
        yield app, pilot


CASES = [
    Case("reconcile", ReconcileModal, on_runs("c", role="outcome unknown")),
    Case("approve", ApproveModal, on_runs("a", role="waiting for approval")),
    Case("approve a long question", ApproveModal, on_runs("a", role="patch waiting for approval")),
    Case("cancel asks", ConfirmModal, on_runs("x", role="waiting for approval")),
    Case("budget", BudgetModal, on_runs("b", role="parked on cost")),
    Case("new run", NewRunModal, on_runs("n")),
    Case("help", HelpScreen, on_runs("question_mark")),
    Case("kill asks", ConfirmModal, on_runs("w", "K", before=with_a_worker_here)),
    Case("fire asks", ConfirmModal, on_runs("s", "F", before=with_schedule)),
    Case("schedule detail", ScheduleDetail, on_runs("s", "enter", before=with_schedule)),
    Case("fork asks", ConfirmModal, on_run("succeeded", "f")),
    Case("go to", GotoModal, on_run("succeeded", "g")),
    Case("diff picker", PickRunModal, on_run("succeeded", "d")),
    Case("replay divergence", DivergenceModal, divergence),
    Case("simulator predict", PredictModal, in_simulator("p")),
    Case("simulator reconcile", ReconcileModal, in_simulator("enter", settings=Settings(after_crash="ask-person"))),
]


def test_every_modal_of_the_app_has_a_case_here():
    covered = {case.modal for case in CASES}
    missing = sorted(f"{c.__module__}.{c.__qualname__}" for c in modal_classes() - covered)
    assert not missing, f"no case opens {missing}: add one to CASES"
    assert covered <= modal_classes(), "a case for a class that is gone, or for a base"


def shown(screen, widget) -> bool:
    """Whether all of `widget` is on the screen: inside it, and not cut off by a container that scrolls."""
    try:
        geometry = screen.find_widget(widget)
    except NoWidget:
        return False
    return (widget.display and screen.region.contains_region(geometry.region)
            and geometry.clip.contains_region(geometry.region))


def not_shown(screen) -> list[str]:
    """What of the modal on top is not on the screen: its title, its buttons, whatever the focus can reach, the
    choice pressed and the one under the cursor of each set, the highlighted option of each list."""
    wanted = [*screen.query(".title"), *screen.query(Button), *screen.focus_chain]
    wanted += [b for b in screen.query(RadioButton) if b.value or b.has_class("-selected")]
    missing = [repr(widget) for widget in wanted if not shown(screen, widget)]
    for options in screen.query(OptionList).results(OptionList):
        if not options.display:                          # a Select's list, closed
            continue
        line = options._index_to_line[options.highlighted]
        if not options.scroll_y <= line < options.scroll_y + options.scrollable_content_region.height:
            missing.append(f"{options!r}'s highlighted option")
    return missing


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_the_modal_shows_its_choice_fields_and_buttons_at_80x24(case, demo):
    async with case.opens(demo) as (app, pilot):
        modal = app.screen
        assert type(modal) is case.modal, modal
        assert modal.query(Button) or case.modal is HelpScreen
        assert not_shown(modal) == []
        if isinstance(modal, ConfirmModal):                  # asked: the reflex enter is the harmless one
            assert modal.focused.id == "cancel"


async def test_page_down_and_up_scroll_a_dialog_body_taller_than_the_screen_between_its_title_and_buttons(demo):
    async with divergence(demo) as (app, pilot):
        body = app.screen.query_one(".dialog-body")
        assert body.max_scroll_y > 0, "the longest diff does not fit 80x24"
        last = app.screen.query_one("#divergence-diff").region.bottom
        await key(pilot, "pagedown")
        assert body.scroll_y > 0
        await key(pilot, "pagedown")
        assert body.scroll_y == body.max_scroll_y
        assert app.screen.query_one("#divergence-diff").region.bottom < last
        assert not_shown(app.screen) == []
        await key(pilot, "pageup")
        await key(pilot, "pageup")
        assert body.scroll_y == 0
