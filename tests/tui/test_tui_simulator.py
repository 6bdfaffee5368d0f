"""The Simulator screen: each key runs the real runtime one boundary on (or to the end), a person answers in
the same reconcile modal real runs use, and the screen shows what the execution gave. The document's walk
(seed 003, "Crash it yourself") is walked with keys only at 80x24 and 100x30; snapshots show each of its steps
run to its end at 80x24, the email's ledger row in each worker's timeline."""

import asyncio
import gc
import json
import threading
from contextlib import asynccontextmanager

import pytest
from helpers import recorded_toasts, rendered, tui
from textual import events
from textual.widgets import Footer, RadioButton
from textual.widgets._footer import FooterKey

from tui_agent.screens.modals import PredictModal, ReconcileModal
from tui_agent.screens.runs import RunsScreen
from tui_agent.screens.simulator import SimulatorApp, SimulatorScreen
from tui_agent.sim import LESSONS, Settings, scenario
from tui_agent.sim.stepper import Stepper

STEPS_ON = Settings(saving="steps", key="saved")   # the document's step 2: something to skip, a key to keep


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
    await pilot.pause()   # the panes scroll to their newest row after the refresh that lays it out


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
    """A pane's whole text, on screen or scrolled out of it."""
    found = screen(app).query_one(f"#sim-{pane}")
    widget = found if pane in ("outcome", "title", "keys") else found.query_one("Static")
    return str(widget.content)


def on_screen(app) -> str:
    return "\n".join(rendered(app))


def title(app) -> str:
    return str(screen(app).query_one("#sim-title").content)


def assert_every_footer_key_readable(app) -> None:
    """Every key the footer names, and the keys row above it, whole on the screen (none under the palette
    key); the footer names each key of the screen's FOOTER."""
    lines = rendered(app)
    footer = app.screen.query_one(Footer)
    palette = footer.query_one(".-command-palette").region
    keys = [k for k in footer.query(FooterKey) if not k.has_class("-command-palette")]
    assert {k.key for k in keys} >= {*SimulatorScreen.FOOTER, "q", "question_mark"}
    for k in keys:
        assert k.region.right - 1 <= palette.x, k.key
        assert f"{k.key_display} {k.description}" in lines[k.region.y], (k.key, lines[k.region.y])
    row = app.screen.query_one("#sim-keys")
    words = row.content.plain.strip()
    assert words and words in lines[row.region.y], (words, lines[row.region.y])
    for key in ("0", "1-4", "5-7", "r"):
        assert f" {key} " in f" {words} "


def assert_whole_why_on_screen(app) -> None:
    """Inside the Why's pane on the screen, its whole text, last line included: nothing of it is cut."""
    pane = screen(app).query_one("#sim-why")
    inside = [line[pane.region.x + 1:pane.region.right - 1] for line in
              rendered(app)[pane.region.y + 1:pane.region.bottom - 1]]
    assert pane.region.bottom <= app.size.height - 2                 # above the keys row and the footer
    assert " ".join(" ".join(inside).split()) == " ".join(text(app, "why").split()), inside
    assert pane.max_scroll_y == 0


# -- the document's walk, keys only -------------------------------------------------------------------------
# "Start with the defaults: save nothing, and crash right after the email goes out. Step to the end, then
# change one setting at a time: 1. Save a checkpoint after each step. The fetches stop repeating, but the
# email still goes out twice. 2. Add the key saved before sending. When the new worker finds the email marked
# attempted, send again with the same key. 3. Under More settings, choose a service that sends every request,
# and send again. Then try asking the service instead. 4. Switch back, and start the new worker 30 hours later."
# Each: the keys, then (fetches, emails got, lookups) and the state worker 2 found.
WALK = {
    "0": (("0", "enter"), (6, 2, 0), None),
    "1": (("1", "enter"), (3, 2, 0), "attempted"),
    "2": (("2", "enter"), (3, 1, 0), "attempted"),
    "3.1": (("3", "enter"), (3, 2, 0), "attempted"),
    "3.2": (("3", "enter", "3", "enter"), (3, 1, 1), "attempted"),
    "4": (("4", "enter"), (3, 2, 0), "attempted"),
}


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
@pytest.mark.parametrize("step", list(WALK))
async def test_each_step_of_the_documents_walk_with_keys_only(step, size):
    keys, (fetches, emails, lookups), found = WALK[step]
    async with simulator(size=size) as (app, pilot, _):
        await press(pilot, *keys)
        outcome = screen(app).view.outcome
        assert outcome is not None and outcome.status == "succeeded"
        counts = outcome.counts
        assert (counts["fetches"], counts["emails_received"], counts["lookups"]) == (fetches, emails, lookups)
        shown = on_screen(app)
        assert f"emails got     {emails}" in shown and f"fetches        {fetches}" in shown
        assert "succeeded" in shown                                   # the outcome's ending, on its border
        assert ("found attempted" in text(app, "worker-2")) == (found is not None)
        assert "≡ email confirmed" in shown                            # the newest row shows: the ledger's end
        title_words = "lesson 0: the defaults" if step == "0" else f"step {step} of 4"
        assert title_words in title(app)
        assert_every_footer_key_readable(app)
        assert_whole_why_on_screen(app)


async def test_the_simulator_and_tui_agent_simulate_open_at_the_documents_defaults(tmp_path):
    async with simulator() as (app, pilot, _):
        assert screen(app).settings == Settings() == LESSONS[0].phases[0].settings
        assert "lesson 0: the defaults" in title(app)
        assert "Predict first: p" in text(app, "why")
        await press(pilot, "S", "K", "r")                 # r: back to the defaults, whatever was changed
        assert screen(app).settings == Settings() and screen(app).view.presses == ()
    async with tui(tmp_path / "runs.db") as (app, pilot):
        await press(pilot, "m")
        assert screen(app).settings == Settings()


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


async def test_the_emails_ledger_row_moves_in_the_timelines_as_it_is_written():
    async with simulator(STEPS_ON) as (app, pilot, _):
        for _ in range(11):                                 # to the boundary before the send goes out
            await press(pilot, "space")
        assert screen(app).view.stop.boundary == "after-attempted"
        key = next(row.key for row in screen(app).view.workers[0] if row.fate == "ledger")
        assert f"≡ email intended · {key}\n≡ email attempted" in text(app, "worker-1")   # saved before the send
        await press(pilot, "space")
        assert text(app, "worker-1").endswith(f"≡ email attempted\n✉ sent · {key}\n▸ after the send")
        await press(pilot, "enter")
        second = text(app, "worker-2")
        assert "≡ found attempted\n≡ email outcome unknown\n≡ email attempted\n✉ deduplicated" in second
        assert second.endswith("≡ email confirmed")
        assert f"found the email marked attempted with key {key}" in text(app, "why")


async def test_crash_here_then_worker_2_carries_on_from_what_was_saved():
    async with simulator(Settings(crash_at="none", saving="steps")) as (app, pilot, _):
        await press(pilot, "space", "space", "space")               # worker 1 stands after fetch incidents
        await press(pilot, "n")
        assert "worker 2 starts once worker 1 has crashed" in title(app)
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
        assert screen(app).query_one("#sim-outcome").border_subtitle == "succeeded"


async def test_notices_replace_one_another_on_the_title_line_and_cover_nothing():
    async with simulator(Settings(crash_at="after-fetch-1"), size=(80, 24)) as (app, pilot, toasts):
        await press(pilot, "space", "space", "space")    # worker 1 crashes where the setting says; worker 2 starts
        assert screen(app).view.stop.worker == 2
        for _ in range(4):
            await press(pilot, "exclamation_mark")
        assert title(app).startswith("⚠ only worker 1 crashes")
        await press(pilot, "enter")
        for key in ("space", "enter", "space"):
            await press(pilot, key)
        assert title(app).startswith("⚠ this execution has ended") and title(app).count("⚠") == 1
        assert toasts == [] and not app._notifications       # no toast: nothing lies over the counts or the Why
        shown = on_screen(app)
        assert "emails got     1" in shown and "lookups        0" in shown
        assert_whole_why_on_screen(app)
        screen(app)._unsay()                                 # the notice's time is up: the title again
        assert title(app).startswith("Crash it yourself")


async def test_a_person_answers_in_the_reconcile_modal_on_the_scenario_clock():
    async with simulator(Settings(saving="steps", key="saved", after_crash="ask-person")) as (app, pilot, _):
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
        assert fates(app, 2)[-6:] == [("send", "waits"), ("email", "ledger"), ("send", "decided"), ("email", "ledger"),
                                      ("send", "deduplicated"), ("email", "ledger")]
        assert "◐ waits for a person\n≡ email not done\n☑ a person: not done\n≡ email attempted" in text(app, "worker-2")
        assert "A person said the email had not gone out" in text(app, "why")


async def test_escape_closes_a_dialog_and_never_quits_tui_agent_simulate():
    async with simulator(Settings(saving="steps", key="saved", after_crash="ask-person"), size=(80, 24)) as (
            app, pilot, _):
        await press(pilot, "p")
        assert isinstance(app.screen, PredictModal)
        await press(pilot, "escape", "escape", "escape")
        assert isinstance(app.screen, SimulatorScreen) and app.is_running
        await press(pilot, "enter")
        assert isinstance(app.screen, ReconcileModal)
        await press(pilot, "escape", "escape")            # the person's dialog closes: the run stays waiting
        outcome = screen(app).view.outcome
        assert outcome.waiting and outcome.effect_state == "unknown" and app.is_running
        assert screen(app).query_one("#sim-outcome").border_subtitle == "waits for a person"
        assert "the policy after a crash is to ask a person" in text(app, "why")
        assert "esc" not in screen(app).query_one("#sim-keys").content.plain   # nothing to go back to here
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_the_runs_footer_keeps_the_simulators_key_at_80x24(demo):
    async with tui(demo[0], size=(80, 24)) as (app, pilot):
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        keys = {k.key: k for k in app.screen.query_one(Footer).query(FooterKey)}
        palette = keys["ctrl+p"].region
        assert "m" in keys and keys["m"].region.right - 1 <= palette.x
        assert "m Simulator" in rendered(app)[keys["m"].region.y]


async def test_in_the_tui_escape_goes_back_to_the_runs_and_m_returns_to_the_same_scenario(tmp_path):
    async with tui(tmp_path / "runs.db", size=(80, 24)) as (app, pilot):
        assert isinstance(app.screen, RunsScreen)
        await press(pilot, "m", "2", "space", "space", "exclamation_mark")
        where = screen(app).view
        assert "esc" in screen(app).query_one("#sim-keys").content.plain
        await press(pilot, "escape")
        assert isinstance(app.screen, RunsScreen)
        await press(pilot, "m")
        assert screen(app).settings == Settings(saving="steps", key="saved")
        assert screen(app).view is where and screen(app).view.presses == ("step", "step", "crash")
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == ["runs.db"]   # no store of its own here


async def test_step_back_returns_to_the_stop_before_as_stepping_there_fresh():
    async with simulator(STEPS_ON, size=(80, 24)) as (app, pilot, _):
        await press(pilot, "p")
        app.screen.query_one("#emails").value = "1"
        app.screen.query_one("#fetches").value = "3"
        await pilot.click("#confirm")
        await settled(pilot)
        await press(pilot, "space", "space", "exclamation_mark", "n", "space")   # crash before fetch incidents; worker 2
        after = screen(app).view
        await press(pilot, "left")
        back = screen(app).view
        await press(pilot, "backspace")
        twice = screen(app).view
        assert screen(app).prediction is not None              # stepping back keeps the class's prediction
    async with simulator(STEPS_ON, size=(80, 24)) as (app, pilot, _):
        await press(pilot, "space", "space", "exclamation_mark", "n")
        fresh = screen(app).view
        await press(pilot, "left", "left", "left", "left", "left")
        start = screen(app).view
        await press(pilot, "left")
        assert title(app).startswith("⚠ this is where every execution starts")
    assert back.presses == after.presses[:-1] == fresh.presses
    assert (back.stop, back.workers, back.counts) == (fresh.stop, fresh.workers, fresh.counts)
    assert twice.presses == fresh.presses[:-1] and twice.stop.label == "worker 1 crashed: before fetch incidents"
    assert start.presses == () and start.stop.boundary == "before-fetch-1" and start.counts["fetches"] == 0


async def test_step_back_from_the_end_is_the_last_stop_before_it():
    async with simulator(STEPS_ON) as (app, pilot, _):
        await press(pilot, "enter")
        end = screen(app).view
        await press(pilot, "left")
        last = screen(app).view
        assert last.outcome is None and last.presses == end.presses[:-1]
        await press(pilot, "space")
        assert screen(app).view.outcome.counts == end.outcome.counts


async def test_enter_pressed_while_a_step_is_on_its_way_runs_to_the_end():
    """A quick hand: `space` then `enter` before the first step has come back; each acts in its turn."""
    async with simulator() as (app, pilot, _):
        await pilot.press("space", "enter")
        await settled(pilot)
        await settled(pilot)
        view = screen(app).view
        assert view.outcome is not None and view.outcome.counts["emails_received"] == 2
        assert view.presses[0] == "step"


async def test_predict_first_then_step_and_the_comparison_at_the_end():
    async with simulator(LESSONS[1].phases[0].settings, size=(80, 24)) as (app, pilot, _):
        assert "Predict first: p" in text(app, "why")
        await press(pilot, "p")
        assert isinstance(app.screen, PredictModal)
        app.screen.query_one("#emails").value = "1"
        app.screen.query_one("#fetches").value = "3"
        await pilot.click("#confirm")
        await settled(pilot)
        assert screen(app).view.presses == () and screen(app).view.outcome is None   # predicting runs nothing
        assert "You predict 1 email and 3 fetches" in text(app, "why")
        assert "said 1 email\nsaid 3 fetches" in text(app, "outcome")
        await press(pilot, "space", "space")
        assert screen(app).view.stop.boundary == "before-fetch-2"
        await press(pilot, "enter")
        assert screen(app).view.outcome.counts["emails_received"] == 2
        outcome = text(app, "outcome")
        assert "said 1 email ✗" in outcome and "said 3 fetches ✓" in outcome
        assert text(app, "why").startswith("You predicted 1 email and 3 fetches; it came out 2 and 3.")
        assert_whole_why_on_screen(app)
        assert "said 1 email ✗" in on_screen(app)


async def test_lesson_keys_load_a_lesson_and_pressed_again_its_second_part():
    async with simulator() as (app, pilot, _):
        await press(pilot, "3")
        assert screen(app).settings == LESSONS[3].phases[0].settings
        assert "step 3.1 of 4" in title(app)
        assert "choose a service that sends every request" in text(app, "why")
        await press(pilot, "enter")
        assert "Press 3 again for part 2" in text(app, "why")
        await press(pilot, "3")
        assert screen(app).settings == LESSONS[3].phases[1].settings
        assert screen(app).view.outcome is None              # a new execution, at its first stop
        await press(pilot, "6")
        assert "further lesson 6.1" in title(app)


async def test_a_setting_key_moves_to_its_next_choice_and_starts_again():
    async with simulator(Settings(saving="nothing")) as (app, pilot, _):
        await press(pilot, "space")
        await press(pilot, "S")
        assert screen(app).settings.saving == "steps"
        assert screen(app).view.counts["fetches"] == 0 and screen(app).view.stop.boundary == "before-fetch-1"
        screen(app)._unsay()
        assert "step 1 of 4" in title(app)                      # the defaults plus a checkpoint: the document's step 1
        await press(pilot, "C")
        assert screen(app).settings.crash_at == "none"          # after-send wraps round to none
        screen(app)._unsay()
        assert "your own settings" in title(app)


async def test_more_settings_are_grouped_under_that_name():
    async with simulator(size=(80, 24)) as (app, pilot, _):
        lines = rendered(app)
        (more,) = [line for line in lines if "More settings" in line]
        assert all(words in more for words in ("V Service dedupe", "A On doubt resend", "W Worker 2 now"))
        first = lines[lines.index(more) - 2]
        assert all(words in first for words in ("S Saving nothing", "K Key none", "C Crash at after-send"))


async def test_a_burst_of_200_key_presses_leaves_one_stepper_and_one_scratch_store(tmp_path, monkeypatch):
    """A held key (20 ms apart): each reset closes the stepper before, started or not. A leak would keep the
    app's thread workers waiting for ever, so this test never waits for them: it looks for a while, and lets
    go of every stepper before it ends."""
    monkeypatch.setattr(scenario, "_MEMORY", str(tmp_path))
    before = {t for t in threading.enumerate() if t.name == "simulator"}
    keys = ["S", "1", "space", "left", "K", "r", "enter", "3", "C", "space"]

    def steppers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "simulator" and t not in before and t.is_alive()]

    def stores() -> list:
        return [p for p in tmp_path.iterdir() if p.name.startswith("tui-agent-sim-")
                and not p.name.startswith("tui-agent-sim-template-")]

    try:
        async with simulator(size=(80, 24)) as (app, pilot, _):
            for i in range(200):       # as a terminal sends them: the app does not wait until idle between keys
                key = keys[i % len(keys)]
                app._driver.send_message(events.Key(key, key if len(key) == 1 else None))
                await asyncio.sleep(0.02)
            for _ in range(600):       # until the last key's execution stands at its stop, and no other is left
                if len(steppers()) == len(stores()) == 1 and not any(w.is_running for w in app.workers):
                    break
                await asyncio.sleep(0.05)
            assert len(steppers()) == 1, f"{len(steppers())} stepper threads alive"
            assert len(stores()) == 1 and len(list(stores()[0].glob("*.db"))) == 1, stores()
            assert screen(app).stepper._thread in steppers()
        assert not steppers()
    finally:
        for leaked in [o for o in gc.get_objects() if isinstance(o, Stepper)]:
            leaked.close()
            leaked._views.put(None)    # a thread worker still waiting for a view


def test_simulate_headless_never_touches_the_users_database(tmp_path, tui_agent):
    db = tmp_path / "mine.db"
    done = tui_agent("--db", str(db), "simulate", "--headless", "--json", "--key", "meaning", "--saving", "nothing")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["emails_received"] == 1
    assert not db.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("step", list(WALK))
def test_each_document_step_run_to_its_end_at_80x24(step, snap_compare):
    async def run_it(pilot):
        await settled(pilot)
        await press(pilot, *WALK[step][0])

    assert snap_compare(SimulatorApp(), run_before=run_it, terminal_size=(80, 24))
