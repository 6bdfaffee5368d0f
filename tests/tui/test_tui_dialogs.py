"""Every modal of the app at 80x24, and no choice that cannot be undone without a question (issue 37, item 6),
through Pilot on the demo: the modal classes are found by importing the TUI's modules, and each must have a case
here that opens it; at the initial scroll position its title, its buttons, its fields and its selected choice are
all on the screen. A choice that ends a run asks first however it is given (the button, enter in any field), and
no run action or palette command writes anything before its dialog is answered unless it can be undone."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import key, open_run, opened, screen_of, select, tui, work
from textual.errors import NoWidget
from textual.screen import ModalScreen
from textual.widgets import Button, Input, OptionList, RadioButton, RadioSet

import tui_agent.app
import tui_agent.screens
import tui_agent.widgets
from tui_agent import operate
from tui_agent.runtime.clock import now
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.diff import PickRunModal
from tui_agent.screens.help import HelpScreen
from tui_agent.screens.modals import (
    ApproveModal,
    BudgetModal,
    BulkModal,
    ConfirmModal,
    GotoModal,
    LogModal,
    NewRunModal,
    PredictModal,
    ReconcileModal,
    RuleModal,
    SaveFilterModal,
)
from tui_agent.screens.palette import RunCommands
from tui_agent.screens.replay import DivergenceModal
from tui_agent.screens.run_actions import RUN_ACTIONS
from tui_agent.screens.schedules import ScheduleDetail
from tui_agent.screens.simulator import SimulatorApp
from tui_agent.services.replay import DIFF_LINES, Divergence, Replay
from tui_agent.sim import Settings
from tui_agent.states import TERMINAL, RunStatus
from tui_agent.store import open_store
from tui_agent.store.host import this_host
from tui_agent.store.runs import get_run, list_runs
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
    operate.schedule_add(store, load_registry(), name="nightly", agent="nightly-report", cron="0 2 * * *",
                         tz="Europe/Berlin", overlap="wait")
    store.close()


def with_a_worker_here(db: Path) -> None:
    """A worker row for this very process: alive on this host, so K offers to kill it (the test never says yes)."""
    store = open_store(db)
    register(store, "w-here", pid=os.getpid(), host=this_host(), concurrency=1, lease_s=60, now=now())
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


@asynccontextmanager
async def rule(demo):
    """The harness's rule dialog (`u` opens it on a harness run that waits; the demo has none)."""
    async with tui(demo[0], size=SMALL) as (app, pilot):
        await pilot.pause()
        app.push_screen(RuleModal())
        await pilot.pause()
        yield app, pilot


@asynccontextmanager
async def coding_agent_log(demo):
    """A harness iteration's coding-agent log, longer than the screen (enter on the iteration's row; the demo has
    no harness run)."""
    async with tui(demo[0], size=SMALL) as (app, pilot):
        await pilot.pause()
        app.push_screen(LogModal("#4 iteration 1 · add-f · commands/g1-00004-coding-agent.stdout",
                                 "".join(f"line {i} of what the coding agent printed\n" for i in range(200))))
        await pilot.pause()
        yield app, pilot


@asynccontextmanager
async def saving_a_filter(demo):
    """The runs list filtered, then "Save the filter" (the palette's command) asks its name."""
    async with tui(demo[0], size=SMALL) as (app, pilot):
        await pilot.pause()
        screen_of(app).apply_filter("status:waiting agent:nightly-report since:3d cost>:0.0001")
        await pilot.pause()
        screen_of(app).save_filter()
        await pilot.pause()
        yield app, pilot


CASES = [
    Case("reconcile", ReconcileModal, on_runs("c", role="outcome unknown")),
    Case("abandon asks", ConfirmModal, on_runs("c", "down", "down", "enter", "tab", "tab", "enter",
                                               role="outcome unknown")),
    Case("send again asks", ConfirmModal, on_runs("c", "down", "enter", "tab", "tab", "enter",
                                                  role="outcome unknown")),
    Case("approve", ApproveModal, on_runs("a", role="waiting for approval")),
    Case("approve a long question", ApproveModal, on_runs("a", role="patch waiting for approval")),
    Case("deny asks", ConfirmModal, on_runs("a", "down", "enter", "tab", "enter", role="waiting for approval")),
    Case("cancel asks", ConfirmModal, on_runs("x", role="waiting for approval")),
    Case("budget", BudgetModal, on_runs("b", role="parked on cost")),
    Case("marked runs", BulkModal, on_runs("space", "space", "space", "asterisk", "x", role="outcome unknown")),
    Case("new run", NewRunModal, on_runs("n")),
    Case("help", HelpScreen, on_runs("question_mark")),
    Case("kill asks", ConfirmModal, on_runs("w", "K", before=with_a_worker_here)),
    Case("fire asks", ConfirmModal, on_runs("s", "F", before=with_schedule)),
    Case("schedule detail", ScheduleDetail, on_runs("s", "enter", before=with_schedule)),
    Case("fork asks", ConfirmModal, on_run("succeeded", "f")),
    Case("go to", GotoModal, on_run("succeeded", "g")),
    Case("diff picker", PickRunModal, on_run("succeeded", "d")),
    Case("replay divergence", DivergenceModal, divergence),
    Case("harness rule", RuleModal, rule),
    Case("coding agent log", LogModal, coding_agent_log),
    Case("save a filter", SaveFilterModal, saving_a_filter),
    Case("simulator predict", PredictModal, in_simulator("p")),
    Case("simulator reconcile", ReconcileModal, in_simulator("enter", settings=Settings(saving="steps", key="saved",
                                                                                  after_crash="ask-person"))),
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


# -- a choice that ends a run asks first, however it is given ----------------------------------------------------


@contextmanager
def commits(db: Path) -> Iterator[Callable[[], bool]]:
    """`since()`: whether any other connection committed to the SQLite file since the last call (SQLite's
    data_version, which the app's change poll reads too)."""
    conn = sqlite3.connect(db)
    seen = [conn.execute("PRAGMA data_version").fetchone()[0]]

    def since() -> bool:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        changed, seen[0] = version != seen[0], version
        return changed

    try:
        yield since
    finally:
        conn.close()


def entries(modal) -> list[str]:
    """Each way to give the dialog's answer: enter in each of its fields, then on its button."""
    return [*(f"#{field.id}" for field in modal.query(Input)), "#confirm"]


async def give(pilot, entry: str) -> None:
    pilot.app.screen.query_one(entry).focus()
    await key(pilot, "enter")


async def choose(pilot, choice: str) -> None:
    """Move the choices' cursor to `choice` with the arrow keys and press it, as a person would."""
    choices = pilot.app.screen.query_one(RadioSet)
    choices.focus()
    await pilot.pause()
    ids = [b.id for b in choices.query(RadioButton)]
    for _ in range(len(ids) * 2):
        cursor = next(b.id for b in choices.query(RadioButton) if b.has_class("-selected"))
        if cursor == choice:
            break
        await key(pilot, "down" if ids.index(choice) > ids.index(cursor) else "up")
    await key(pilot, "enter")
    assert choices.pressed_button.id == choice


def events_of(store, run_id: str) -> list[str]:
    return [row["message"] for row in store.query("SELECT message FROM events WHERE run_id = ?", (run_id,))]


async def answered(db: Path, run_id: str, press: str, choice: str) -> bool:
    """`choice` given in the dialog `press` opens on `run_id`, by each entry in turn while the
    dialog asks about it (no to each question, then yes to the last): whether it asked. A question is asked
    from every entry or from none, names the run, takes the harmless answer from a reflex enter and comes
    back to the dialog as it was left; nothing is written until the answer is given."""
    with commits(db) as since:
        async with tui(db, size=SMALL) as (app, pilot):
            await select(pilot, run_id)
            await key(pilot, press)
            dialog = app.screen
            await choose(pilot, choice)
            for field in dialog.query(Input):
                if field.id == "note":
                    field.value = f"note for {choice}"
            since()
            asked = []
            for entry in entries(dialog):
                await give(pilot, entry)
                if not isinstance(app.screen, ConfirmModal):
                    break                                        # given at once
                asked.append(entry)
                assert run_id in str(app.screen.query_one(".title").render()), "the question names the run"
                assert not since(), f"{choice} via {entry}: written before the answer"
                await key(pilot, "enter")                        # a reflex enter: the harmless button
                assert app.screen is dialog, "a no comes back to the dialog"
                assert dialog.query_one(RadioSet).pressed_button.id == choice
            if asked:
                assert asked == entries(dialog), f"{choice} asked from some entries only: {asked}"
                await give(pilot, entries(dialog)[-1])
                await key(pilot, "shift+tab")                    # from "Don't ..." to the button that says yes
                assert app.screen.focused.id == "confirm"
                await key(pilot, "enter")
            assert app.screen is not dialog and not isinstance(app.screen, ModalScreen), f"{choice}: given"
            assert since(), f"{choice}: written once given"
    return bool(asked)


@pytest.mark.parametrize(("role", "press"), [("outcome unknown", "c"), ("waiting for approval", "a")],
                         ids=["reconcile", "approve"])
async def test_a_choice_that_ends_the_run_asks_first_from_every_entry_and_no_other_does(role, press, demo,
                                                                                        demo_template, tmp_path):
    """Each choice the dialog offers, given on a copy of the demo of its own; then a worker works the run. The
    choices that asked are exactly those after which the run ended (cancelled), with the person's note, and
    "It did not happen" of an effect whose service does not deduplicate it now (the demo's outbox): it may send
    twice."""
    db, roles = demo
    run_id = roles[role]
    async with tui(db, size=SMALL) as (app, pilot):
        await select(pilot, run_id)
        await key(pilot, press)
        choices = [b.id for b in app.screen.query(RadioButton) if not b.disabled]
    outcomes = {}
    for choice in choices:
        copy = tmp_path / choice
        shutil.copytree(demo_template[0], copy)
        asked = await answered(copy / "demo.db", run_id, press, choice)
        store = open_store(copy / "demo.db")
        try:
            if get_run(store, run_id)["status"] not in TERMINAL:
                work(store, load_registry(), run_id)
            status = get_run(store, run_id)["status"]
            outcomes[choice] = (asked, status)
            assert not asked or any(f"note for {choice}" in said for said in events_of(store, run_id))
        finally:
            store.close()
    assert {choice: asked for choice, (asked, _) in outcomes.items()} == \
        {choice: status in TERMINAL - {RunStatus.SUCCEEDED} or choice == "not-done"
         for choice, (_, status) in outcomes.items()}, outcomes
    assert any(asked for asked, _ in outcomes.values()), "the dialog offers a choice that ends the run"


# -- nothing is written before a dialog is answered, unless it can be undone -------------------------------------


async def acts_safely(app, pilot, since, what: str, act: Callable[[], object]) -> None:
    """`act()` either opens a modal, writing nothing until it is answered (escape, the harmless answer, writes
    nothing either), or acts at once without ending a run or making one."""
    before = {run["id"]: run["status"] for run in list_runs(app.reader)}
    since()
    done = act()
    if inspect.isawaitable(done):
        await done
    await pilot.pause()
    if isinstance(app.screen, ModalScreen):
        assert not since(), f"{what}: written before its dialog was answered"
        await key(pilot, "escape")
        assert not since(), f"{what}: written by escape"
        return
    after = {run["id"]: run["status"] for run in list_runs(app.reader)}
    assert set(after) == set(before), f"{what}: made a run without asking"
    ended = [run_id for run_id, status in after.items() if status in TERMINAL and before[run_id] not in TERMINAL]
    assert ended == [], f"{what}: ended {ended} without asking"


async def test_no_run_action_or_palette_command_writes_before_its_dialog_is_answered_or_ends_a_run(demo):
    """Each run action (RUN_ACTIONS), on a demo run it applies to as the run is then, by its command in the palette
    and by its key on the Runs screen (or the run screen, where only that one binds it); then every command the
    palette offers on the run screen."""
    db, roles = demo
    with commits(db) as since:
        async with tui(db, size=SMALL) as (app, pilot):
            await pilot.pause()
            for action in RUN_ACTIONS.values():
                run_id = next(run_id for run_id in roles.values()
                              if action.why_not(app, get_run(app.reader, run_id)) is None)
                await select(pilot, run_id)
                (hit,) = [hit async for hit in RunCommands(app.screen).discover()
                          if str(hit.text).startswith(f"{action.title} {run_id}")]
                await acts_safely(app, pilot, since, f"{hit.text} (palette)", hit.command)
                if action.why_not(app, get_run(app.reader, run_id)) is None:     # it did not act at once
                    elsewhere = action.binding().action not in {b.action for b in app.screen.BINDINGS}
                    if elsewhere:                                    # a key of the run screen only
                        await open_run(app, pilot, run_id)
                    await acts_safely(app, pilot, since, f"{action.key} on {run_id}",
                                      lambda name=action.key: pilot.press(name))
                    if elsewhere:
                        await key(pilot, "escape")
            screen = await open_run(app, pilot, roles["succeeded"])
            for hit in [hit async for hit in RunCommands(screen).discover()]:
                await acts_safely(app, pilot, since, f"{hit.text} (palette, run screen)", hit.command)
                assert app.screen is screen
