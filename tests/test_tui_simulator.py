"""The Simulator screen: each key runs the real runtime one boundary on (or to the end), a person answers in
the same reconcile modal real runs use, and the screen shows what the execution gave. Snapshots show each
lesson run to its end at 80x24."""

import json
from contextlib import asynccontextmanager

import pytest
from helpers import recorded_toasts, tui
from textual.widgets import RadioButton

from tui_agent.screens.modals import PredictModal, ReconcileModal
from tui_agent.screens.simulator import SimulatorApp, SimulatorScreen
from tui_agent.sim import LESSONS, Settings


@asynccontextmanager
async def simulator(settings: Settings | None = None, size=(100, 30)):
    app = SimulatorApp(settings)
    toasts = recorded_toasts(app)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        yield app, pilot, toasts


async def settled(pilot) -> None:
    """Let the scenario's thread reach its next stop and the screen show it."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def press(pilot, *keys: str) -> None:
    for key in keys:
        await pilot.press(key)
        await settled(pilot)


def screen(app) -> SimulatorScreen:
    assert isinstance(app.screen, SimulatorScreen), app.screen
    return app.screen


def fates(app, worker: int) -> list[tuple[str, str]]:
    return [(row.step, row.fate) for row in screen(app).view.workers[worker - 1]]


def text(app, pane: str) -> str:
    return str(screen(app).query_one(f"#sim-{pane}").content)


async def test_space_runs_the_real_runtime_one_boundary_at_a_time():
    async with simulator(Settings(crash_at="none")) as (app, pilot, _):
        assert screen(app).view.stop.boundary == "before-fetch-1"
        assert screen(app).view.counts["fetches"] == 0
        await press(pilot, "space")
        assert screen(app).view.stop.boundary == "after-fetch-1"
        assert screen(app).view.counts["fetches"] == 1       # the source counted the fetch: it really ran
        assert fates(app, 1) == [("fetch sales", "done")]
        await press(pilot, "space", "space")
        assert screen(app).view.stop.boundary == "after-fetch-2"
        assert screen(app).view.counts["fetches"] == 2
        assert "▸ after fetch incidents" in text(app, "worker-1")


async def test_crash_here_then_worker_2_carries_on_from_what_was_saved():
    async with simulator(Settings(crash_at="none")) as (app, pilot, toasts):
        await press(pilot, "space", "space", "space")               # worker 1 stands after fetch incidents
        await press(pilot, "n")
        assert any("worker 2 starts once worker 1 has crashed" in t for t in toasts)
        assert screen(app).view.stop.boundary == "after-fetch-2"    # refused: nothing moved
        await press(pilot, "exclamation_mark")
        assert fates(app, 1)[-1] == ("fetch incidents", "crashed")
        assert "worker 1 crashed" in screen(app).view.stop.label
        await press(pilot, "n")
        assert fates(app, 2) == [("fetch sales", "recorded")]       # worker 2's first stop: a saved step skipped
        await press(pilot, "enter")
        outcome = screen(app).view.outcome
        assert outcome.counts["fetches"] == 3 and outcome.counts["emails_received"] == 1
        assert ("fetch deploys", "done") in fates(app, 2)
        assert "ends: succeeded" in text(app, "outcome")


async def test_crash_here_is_refused_for_worker_2_and_after_the_end():
    async with simulator(Settings(crash_at="after-fetch-1")) as (app, pilot, toasts):
        await press(pilot, "space", "space", "space")    # worker 1 crashes where the setting says; worker 2 starts
        assert screen(app).view.stop.worker == 2
        await press(pilot, "exclamation_mark")
        assert any("only worker 1 crashes" in t for t in toasts)
        await press(pilot, "enter", "space")
        assert any("this execution has ended" in t for t in toasts)


async def test_a_person_answers_in_the_reconcile_modal_on_the_scenario_clock():
    async with simulator(Settings(after_crash="ask-person")) as (app, pilot, _):
        await press(pilot, "enter")
        modal = app.screen
        assert isinstance(modal, ReconcileModal)
        shown = " ".join(str(s.content) for s in modal.query("Static"))
        # Counted on the scenario's clock: worker 2 started "now", so the whole 24-hour window is left, though the
        # scenario's night is days before this machine's clock.
        assert "dedupes this key 24h 00m more" in shown
        assert "attempted  2026-11-28T02:00:00.000Z" in shown
        assert [b.id for b in modal.query(RadioButton)] == ["happened", "not-done"]
        assert not modal.query("Input")                     # the scenario records no result or note
        modal.query_one("#not-done", RadioButton).value = True
        await pilot.click("#confirm")
        await settled(pilot)
        outcome = screen(app).view.outcome
        assert outcome.person == "not-done"
        assert outcome.counts["send_requests"] == 2 and outcome.counts["emails_received"] == 1
        assert fates(app, 2)[-3:] == [("send", "waits"), ("send", "decided"), ("send", "deduplicated")]
        assert "A person said the email had not gone out" in text(app, "why")


async def test_closing_the_modal_leaves_the_run_waiting_for_a_person():
    async with simulator(Settings(after_crash="ask-person")) as (app, pilot, _):
        await press(pilot, "enter")
        assert isinstance(app.screen, ReconcileModal)
        await press(pilot, "escape")
        outcome = screen(app).view.outcome
        assert outcome.waiting and outcome.effect_state == "unknown"
        assert "ends: waits for a person" in text(app, "outcome")
        assert "the policy after a crash is to ask a person" in text(app, "why")


async def test_predict_then_run_shows_the_prediction_beside_the_result():
    async with simulator(LESSONS[1].phases[0]) as (app, pilot, _):
        await press(pilot, "p")
        assert isinstance(app.screen, PredictModal)
        app.screen.query_one("#emails").value = "1"
        app.screen.query_one("#fetches").value = "3"
        await pilot.click("#confirm")
        await settled(pilot)
        assert screen(app).view.outcome.counts["emails_received"] == 2
        outcome = text(app, "outcome")
        assert "you said" in outcome and "emails got     1 ✗" in outcome and "fetches        3 ✓" in outcome
        assert text(app, "why").startswith("You predicted 1 email and 3 fetches; it came out 2 and 3.")


async def test_lesson_keys_load_a_lesson_and_pressed_again_its_second_part():
    async with simulator() as (app, pilot, _):
        await press(pilot, "4")
        assert screen(app).settings == LESSONS[3].phases[0]
        assert "lesson 4 of 5, part 1 of 2" in str(screen(app).query_one("#sim-title").content)
        await press(pilot, "enter")
        assert "Press 4 again for part 2" in text(app, "why")
        await press(pilot, "4")
        assert screen(app).settings == LESSONS[3].phases[1]
        assert screen(app).view.outcome is None              # a new execution, at its first stop


async def test_a_setting_key_moves_to_its_next_choice_and_starts_again():
    async with simulator(Settings(saving="nothing")) as (app, pilot, _):
        await press(pilot, "space")
        await press(pilot, "S")
        assert screen(app).settings.saving == "steps"
        assert screen(app).view.counts["fetches"] == 0 and screen(app).view.stop.boundary == "before-fetch-1"
        await press(pilot, "C")
        assert screen(app).settings.crash_at == "none"          # after-send wraps round to none


async def test_m_opens_the_simulator_from_the_runs_screen_and_escape_returns(tmp_path):
    async with tui(tmp_path / "runs.db") as (app, pilot):
        await press(pilot, "m")
        assert isinstance(app.screen, SimulatorScreen)
        await press(pilot, "escape")
        assert not isinstance(app.screen, SimulatorScreen)
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == ["runs.db"]   # no store of its own here


def test_simulate_headless_never_touches_the_users_database(tmp_path, tui_agent):
    db = tmp_path / "mine.db"
    done = tui_agent("--db", str(db), "simulate", "--headless", "--json", "--key", "meaning", "--saving", "nothing")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["emails_received"] == 1
    assert not db.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("lesson", [lesson.number for lesson in LESSONS])
def test_each_lesson_run_to_its_end_at_80x24(lesson, snap_compare):
    async def run_it(pilot):
        await settled(pilot)
        await press(pilot, str(lesson), "enter")

    assert snap_compare(SimulatorApp(), run_before=run_it, terminal_size=(80, 24))
