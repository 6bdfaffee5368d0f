"""The simulator's engine apart from the matrix (test_sim_matrix.py): stepping one boundary at a time and
stepping back, the Why, the scenario's own clock and store, the headless command and the handout in docs/."""

import json
from dataclasses import replace
from pathlib import Path

from tui_agent.runtime import faults
from tui_agent.runtime.clock import CLOCK
from tui_agent.sim import BOUNDARIES, LESSONS, Settings, simulate
from tui_agent.sim.explain import Prediction, why
from tui_agent.sim.stepper import CRASH, HAPPENED, LEAVE, RUN, STEP, Stepper
from tui_agent.sim.table import lessons_matrix, markdown, whole_matrix

ROOT = Path(__file__).resolve().parent.parent


def test_stepping_stops_at_every_boundary_of_worker_1_in_order():
    stepper = Stepper(Settings(crash_at="none", saving="journal", key="meaning"))
    view = stepper.start()
    seen = []
    while view.stop is not None and view.stop.worker == 1 and view.stop.boundary:
        seen.append(view.stop.boundary)
        view = stepper.command(STEP)
    stepper.close()
    assert seen == list(BOUNDARIES)    # every crash point is a stop, journal mode's mid-summary included


def test_crash_here_crashes_worker_1_at_the_stop_it_stands_at():
    stepper = Stepper(Settings(crash_at="none"))
    stepper.start()
    view = stepper.command(STEP)                  # after fetch sales, committed
    assert view.stop.boundary == "after-fetch-1" and view.can_crash
    view = stepper.command(CRASH)
    assert view.stop.label.startswith("worker 1 crashed") and not view.can_crash
    outcome = stepper.command(RUN).outcome
    stepper.close()
    assert outcome.crashed_at == "after-fetch-1"
    assert outcome.fetches_by_source == {"sales": 1, "incidents": 1, "deploys": 1}   # sales was saved, not redone
    assert [(r.step, r.fate) for r in outcome.workers[1]][:2] == [("fetch sales", "recorded"), ("fetch incidents", "done")]


def test_a_person_is_asked_through_the_stepper_and_leave_keeps_the_run_waiting():
    stepper = Stepper(Settings(after_crash="ask-person"))
    stepper.start()
    view = stepper.command(RUN)
    assert view.asks is not None and view.asks["state"] == "unknown" and view.asks["dedupe_ttl_s"] == 24 * 3600
    outcome = stepper.command(LEAVE).outcome
    stepper.close()
    assert outcome.waiting and outcome.effect_state == "unknown"
    stepper = Stepper(Settings(after_crash="ask-person"))
    stepper.start()
    stepper.command(RUN)
    outcome = stepper.command(HAPPENED).outcome
    stepper.close()
    assert (outcome.status, outcome.person, outcome.counts["send_requests"]) == ("succeeded", "happened", 1)


def test_closing_a_stepper_mid_scenario_ends_its_thread_and_removes_its_store():
    stepper = Stepper(Settings())
    stepper.start()
    stepper.command(STEP)
    folder = stepper.scenario.folder
    assert (folder / "worker-1.db").exists()
    stepper.close()
    assert not stepper._thread.is_alive()
    assert not folder.exists()


def test_a_stepper_closed_before_it_started_never_starts():
    """A held key resets the screen faster than a thread worker starts the stepper it made."""
    stepper = Stepper(Settings())
    stepper.close()
    assert stepper.start() is None and stepper.command(STEP) is None
    assert stepper._thread.ident is None and stepper.scenario.folder is None


def test_given_the_same_presses_a_new_stepper_stops_where_the_first_one_stood():
    """Step back is the same presses again, less the last: every stop's command, `!` and `n` included."""
    stepper = Stepper(Settings(crash_at="none"))
    stepper.start()
    for command in (STEP, CRASH, STEP):     # crash after fetch sales, then worker 2 starts (`n`)
        view = stepper.command(command)
    stepper.close()
    assert view.stop.label == "fetch sales: recorded, not done again"
    again = Stepper(stepper.settings, presses=view.presses)
    same = again.start()
    again.close()
    assert view.presses == (STEP, CRASH, STEP) and same.presses == view.presses
    assert (same.stop, same.workers, same.counts) == (view.stop, view.workers, view.counts)
    back = Stepper(stepper.settings, presses=view.presses[:-1])
    before = back.start()
    back.close()
    assert before.presses == view.presses[:-1] and before.stop.label == "worker 1 crashed: after fetch sales"


def test_a_scenario_never_moves_the_process_clock_nor_leaves_a_watcher_or_an_arm():
    before = CLOCK.now()
    outcome = simulate(replace(LESSONS[4].phases[0]))    # worker 2 starts 30 hours later on the scenario's clock
    assert outcome.counts["emails_received"] == 2         # past the service's window: the key was forgotten
    assert abs(CLOCK.now() - before) < 5
    assert faults._ARMS == [] and getattr(faults._WATCHED, "fn", None) is None
    faults.crash_point("after-do", "send-report")         # nothing is armed or watching: a real run passes


def test_the_why_says_what_happened_in_this_execution():
    one = why(simulate(LESSONS[0].phases[0]))
    assert "started from zero" in one and "without a key" in one
    three = why(simulate(LESSONS[2].phases[0]))
    assert "same key" in three and "ignored the repeat" in three
    asked = why(simulate(LESSONS[3].phases[1]))
    assert "asked the service, which had the key" in asked
    waits = why(simulate(Settings(after_crash="ask-service", key="none")))
    assert "no saved key, so there is nothing to look up" in waits and "waits for a person" in waits
    model = why(simulate(Settings(crash_at="mid-summary", saving="steps")))
    assert "asked the model again" in model
    right = why(simulate(LESSONS[2].phases[0]), Prediction(emails=1, fetches=3))
    assert right.startswith("You predicted it: 1 email, 3 fetches.")


def test_simulate_headless_json_has_the_fixed_shape(invoke):
    done = invoke("simulate", "--headless", "--json", "--saving", "journal", "--crash-at", "after-attempted",
                  "--after-crash", "ask-service", "--restart-after", "30h")
    assert done.exit_code == 0, done.output
    outcome = json.loads(done.stdout)
    assert set(outcome["counts"]) == {"fetches", "model_calls", "reports_written", "send_requests",
                                      "emails_received", "lookups"}
    assert [w["worker"] for w in outcome["workers"]] == [1, 2]
    assert {"step", "fate", "detail"} <= set(outcome["workers"][0]["timeline"][0])
    assert (outcome["status"], outcome["effect_state"]) == ("waiting", "unknown")
    assert outcome["counts"]["lookups"] == 1 and outcome["counts"]["emails_received"] == 0
    answered = json.loads(invoke("simulate", "--headless", "--json", "--saving", "journal", "--crash-at",
                                 "after-attempted", "--after-crash", "ask-service", "--restart-after", "30h",
                                 "--person", "not-done").stdout)
    assert (answered["status"], answered["counts"]["emails_received"]) == ("succeeded", 1)


def test_simulate_headless_text_and_a_bad_choice(invoke):
    done = invoke("simulate", "--headless")
    assert done.exit_code == 0
    assert "worker 2 (starts now)" in done.stdout and "deduplicated" in done.stdout
    assert "ignored the repeat" in done.stdout
    bad = invoke("simulate", "--headless", "--saving", "sometimes")
    assert bad.exit_code == 2
    assert "--saving" in bad.output and "Traceback" not in bad.output


def test_the_handout_in_docs_is_what_the_table_command_prints_today():
    table = markdown(lessons_matrix())
    assert len(table.splitlines()) == 2 + sum(len(lesson.phases) for lesson in LESSONS) * 14
    handout = (ROOT / "docs" / "simulator-lessons.md").read_text()
    assert handout.endswith(table), "regenerate docs/simulator-lessons.md with tui-agent simulate --table"


def test_the_whole_matrix_is_every_combination_once():
    rows = [settings for _, settings in whole_matrix()]
    assert len(rows) == len(set(rows)) == 3 * 4 * 2 * 3 * 14 * 3
    lines = markdown(iter([("", rows[0]), ("", rows[-1])])).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| - | nothing | none | dedupe | resend | none | now |")
