"""`e` on the run screen (Pilot): the selected step result or model reply in the person's editor (a private file,
removed afterwards), a confirmation, then a fork with the edit in place of the recorded entry, opened at once.

Textual's headless driver cannot hand its terminal to another program (`app.suspend()` raises
SuspendNotSupported), so the tests put `run_actions.run_editor` aside for one that runs the same argument list as a
real subprocess (the editor script of edit_fork_agents), and one test keeps the real one to see the refusal."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
from edit_fork_agents import Counter, decider, journal_rows, leftovers, make_editor, planner, replacement
from helpers import click, key, open_run, registry_of, start_and_work, tui, work
from rich.console import Console

from tui_agent import Agent, operate
from tui_agent.screens import run_actions
from tui_agent.screens.help import HelpScreen
from tui_agent.screens.modals import ConfirmModal
from tui_agent.screens.run import RunScreen
from tui_agent.widgets.timeline import Timeline


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.delenv("VISUAL", raising=False)
    return tmp


@pytest.fixture
def editor_runs(monkeypatch) -> list[list[str]]:
    """Each argument list the run screen asked to run as its editor, run as a real subprocess."""
    runs = []

    def run(app, argv):
        runs.append(argv)
        return subprocess.run(argv, check=False).returncode

    monkeypatch.setattr(run_actions, "run_editor", run)
    return runs


def runs_count(store) -> int:
    return store.conn.execute("SELECT count(*) FROM runs").fetchone()[0]


async def select(pilot, app, position: int) -> None:
    await pilot.press("g", *str(position), "enter")
    await pilot.pause()
    assert app.screen.query_one(Timeline).selected.position == position


async def test_e_edits_the_selected_model_reply_and_opens_the_fork(store, tmp_path, private_tmp,
                                                                   editor_runs, monkeypatch):
    counter, asked = Counter(), []
    registry = registry_of(decider(counter, asked))
    parent = start_and_work(store, registry, "decider", {})
    recorded = operate.recorded_entry(store, parent.run_id, 1)["result"]
    edited = {**recorded, "content": [{"type": "text", "text": "wait for Monday"}]}
    command, record = make_editor(tmp_path, replacement(tmp_path, json.dumps(edited)))
    monkeypatch.setenv("EDITOR", command)
    async with tui(store.path) as (app, pilot):
        await open_run(app, pilot, parent.run_id)
        await select(pilot, app, 1)
        await key(pilot, "e")
        assert len(editor_runs) == 1 and editor_runs[0][-1].endswith(f"{parent.run_id}-1-decide.json")
        seen = json.loads(record.read_text())
        assert (seen["mode"], seen["folder_mode"]) == (0o600, 0o700)
        assert json.loads(seen["text"]) == recorded
        assert not Path(seen["path"]).parent.exists() and leftovers(private_tmp) == []
        assert isinstance(app.screen, ConfirmModal)
        assert "holds your edit of #1 decide in place of the recorded model reply" in str(app.screen.question)
        assert runs_count(store) == 1, "nothing is forked before the person confirms"
        await click(pilot, "#confirm")
        assert isinstance(app.screen, RunScreen) and app.screen.run_id != parent.run_id
        child = app.screen.run_id
    assert [r["edited"] for r in journal_rows(store, child)] == [None, 1]
    assert work(store, registry, child).result == {"did": "acted on 'wait for Monday'"}
    assert counter.calls == {"fetch": 1, "act": 2} and asked == [0]


async def test_e_on_a_step_result_and_dont_fork_forks_nothing(store, tmp_path, private_tmp,
                                                              editor_runs, monkeypatch):
    registry = registry_of(planner(Counter()))
    parent = start_and_work(store, registry, "planner", {})
    command, record = make_editor(tmp_path, replacement(tmp_path, '{"files": 5}'))
    monkeypatch.setenv("EDITOR", command)
    async with tui(store.path) as (app, pilot):
        await open_run(app, pilot, parent.run_id)
        await select(pilot, app, 1)
        await key(pilot, "e")
        assert isinstance(app.screen, ConfirmModal)
        assert "in place of the recorded step result" in str(app.screen.question)
        await key(pilot, "escape")
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == parent.run_id
    assert runs_count(store) == 1
    assert leftovers(private_tmp) == []



async def _press_e_on_entry_1(db_path, run_id: str) -> list[str]:
    """`e` on entry #1 of the run's screen; the toasts it gave. The run screen stays (nothing was forked)."""
    toasts: list[str] = []
    async with tui(db_path, toasts=toasts) as (app, pilot):
        await open_run(app, pilot, run_id)
        await select(pilot, app, 1)
        await key(pilot, "e")
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == run_id
    return toasts


@pytest.mark.parametrize(("action", "toast"), [
    ("invalid", "is not valid JSON (Expecting ',' delimiter at line 2 column 3)"),
    ("keep", "the same as the recorded one: nothing to fork"),
    ("fail", "exited with status 3; nothing was forked"),
    ("not-a-reply", '"content" must be a list of blocks'),
    ("deep", "holds arrays and objects nested deeper than 200 levels, which cannot be stored and read back"),
    ("surrogate", "holds a lone surrogate (\\udfff) at $.content[0].text, half of a character"),
])
async def test_what_e_refuses_is_a_toast_and_forks_nothing(store, tmp_path, private_tmp, editor_runs,
                                                           monkeypatch, action, toast):
    registry = registry_of(decider(Counter(), []))
    parent = start_and_work(store, registry, "decider", {})
    text = {"invalid": '{"role": "assistant"\n  "content": []}', "not-a-reply": '{"role": "assistant", "content": 1}',
            "deep": '{"role": "assistant", "content": ' + "[" * 1500 + "]" * 1500 + "}",   # past Python's reader
            "surrogate": '{"role": "assistant", "content": [{"type": "text", "text": "\\udfff"}]}'}
    command, record = make_editor(tmp_path, replacement(tmp_path, text[action]) if action in text else action)
    monkeypatch.setenv("EDITOR", command)
    toasts = await _press_e_on_entry_1(store.path, parent.run_id)
    assert any(toast in t for t in toasts), toasts
    assert runs_count(store) == 1
    assert not Path(json.loads(record.read_text())["path"]).parent.exists()
    assert leftovers(private_tmp) == []


async def test_e_on_an_effect_says_why_not_and_opens_no_editor(store, editor_runs):
    def run(ctx, request):
        ctx.step("first", lambda: 1)
        ctx.effect("send", key="k:1", do=lambda key: {"sent": key})
        return {}

    registry = registry_of(Agent(name="sender", run=run))
    parent = start_and_work(store, registry, "sender", {})
    toasts = await _press_e_on_entry_1(store.path, parent.run_id)
    assert editor_runs == []
    assert any("decided through reconcile" in t for t in toasts), toasts
    assert runs_count(store) == 1


async def test_the_headless_terminal_cannot_be_handed_over_and_the_file_is_still_removed(
        store, tmp_path, private_tmp, monkeypatch):
    registry = registry_of(planner(Counter()))
    parent = start_and_work(store, registry, "planner", {})
    command, record = make_editor(tmp_path, replacement(tmp_path, '{"files": 5}'))
    monkeypatch.setenv("EDITOR", command)
    toasts = await _press_e_on_entry_1(store.path, parent.run_id)
    assert any("cannot be handed to an editor; use tui-agent fork RUN --edit N" in t for t in toasts), toasts
    assert not record.exists(), "the editor never ran"
    assert leftovers(private_tmp) == []
    assert runs_count(store) == 1


async def test_e_is_in_the_help(store):
    async with tui(store.path) as (app, pilot):
        await key(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        console = Console(record=True, width=120, file=io.StringIO())
        for section in app.screen.query(".help-section"):
            console.print(section.content)
    shown = console.export_text()
    assert "Edit the selected step or reply, then fork" in shown
    assert any(line.split()[:1] == ["e"] and "then fork" in line for line in shown.splitlines()), shown
