"""How the screens look: one small app state per snapshot, on the fixture database (executed runs,
frozen clock, seeded ids). Update with `pytest --snapshot-update` after a deliberate change, and look."""

import pytest

from tui_agent.app import TuiAgentApp


@pytest.fixture
def roles(snapshot_roles):
    return snapshot_roles


def app() -> TuiAgentApp:
    return TuiAgentApp("runs.db", poll_s=None)


def test_runs_screen(roles, snap_compare):
    assert snap_compare(app(), terminal_size=(120, 30))


def test_runs_screen_at_80x24(roles, snap_compare):
    assert snap_compare(app(), terminal_size=(80, 24))


def test_runs_screen_filtered(roles, snap_compare):
    assert snap_compare(app(), press=["slash", *"status:failed", "enter"], terminal_size=(120, 30))


def test_help(roles, snap_compare):
    assert snap_compare(app(), press=["question_mark"], terminal_size=(120, 40))


def test_reconcile_modal(roles, snap_compare):
    # needs you first, newest first: Patch waiting for approval, then the outcome-unknown run
    assert snap_compare(app(), press=["j", "c"], terminal_size=(120, 34))


def test_reconcile_modal_at_80x24(roles, snap_compare):
    # compact: the facts, every choice, both fields and the buttons on the screen at once
    assert snap_compare(app(), press=["j", "c"], terminal_size=(80, 24))


def test_abandon_confirmation_at_80x24(roles, snap_compare):
    # down twice from the first choice it can take, then enter in the note: abandoning asks first
    assert snap_compare(app(), press=["j", "c", "down", "down", "enter", "tab", "tab", "enter"],
                        terminal_size=(80, 24))


def test_approve_modal(roles, snap_compare):
    # Patch's question at the top: open the pull request? with the diff stat and the tests' result
    assert snap_compare(app(), press=["a"], terminal_size=(120, 30))


def test_budget_modal(roles, snap_compare):
    assert snap_compare(app(), press=["j", "j", "b"], terminal_size=(120, 30))   # the run parked on its cost budget


def test_new_run_modal(roles, snap_compare):
    assert snap_compare(app(), press=["n"], terminal_size=(120, 30))


def test_cancel_confirmation(roles, snap_compare):
    assert snap_compare(app(), press=["x"], terminal_size=(100, 24))


def test_run_screen_model_reply(roles, snap_compare):
    from tui_agent.screens.run import RunScreen

    async def open_succeeded(pilot):
        pilot.app.push_screen(RunScreen(roles["succeeded"]))
        await pilot.pause()

    assert snap_compare(app(), run_before=open_succeeded, press=["j", "j", "j", "j"], terminal_size=(120, 40))


def test_run_screen_outcome_unknown_at_80x24(roles, snap_compare):
    assert snap_compare(app(), press=["j", "enter"], terminal_size=(80, 24))


def test_run_screen_effect_in_doubt(roles, snap_compare):
    assert snap_compare(app(), press=["j", "enter"], terminal_size=(160, 48))


def test_workers_screen(roles, snap_compare):
    assert snap_compare(app(), press=["w"], terminal_size=(120, 24))


def test_schedules_screen(roles, snap_compare):
    assert snap_compare(app(), press=["s"], terminal_size=(120, 24))


def test_schedule_detail(roles, snap_compare):
    from tui_agent import operate

    async def fire_twice(pilot):            # one run started by hand, and a fire that waits for it (overlap=wait)
        for _ in range(2):
            operate.schedule_fire(pilot.app.store, pilot.app.registry, "nightly")
        await pilot.pause()

    assert snap_compare(app(), run_before=fire_twice, press=["s", "enter"], terminal_size=(120, 34))


def test_run_screen_recoloured_by_a_theme_change(roles, snap_compare):
    # the run parked on its cost budget: badge, gauges at the ceiling, timeline marks and events, all Rich text
    # painted from the theme; switched while the screen is open, so this is the repaint on a theme change
    async def open_then_nord(pilot):
        await pilot.press("j", "j", "enter")
        pilot.app.theme = "nord"
        await pilot.pause()

    assert snap_compare(app(), run_before=open_then_nord, terminal_size=(160, 48))
