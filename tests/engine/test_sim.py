"""The simulator's engine apart from the matrix (test_sim_matrix.py): stepping one boundary at a time and
stepping back, the Why, the scenario's own clock and store, the headless command (the document's walk, one flag
at a time, through the console script) and the handout in docs/."""

import json

from helpers import ROOT

from tui_agent.runtime import faults
from tui_agent.runtime.clock import CLOCK
from tui_agent.sim import BOUNDARIES, LESSONS, Settings, simulate
from tui_agent.sim.explain import Prediction, why
from tui_agent.sim.stepper import CRASH, HAPPENED, LEAVE, RUN, STEP, Stepper
from tui_agent.sim.table import lessons_matrix, markdown, whole_matrix


def lesson(number: int, part: int = 1) -> Settings:
    (found,) = [each for each in LESSONS if each.number == number]
    return found.phases[part - 1].settings


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
    stepper = Stepper(Settings(crash_at="none", saving="steps"))
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


ASK_PERSON = Settings(saving="steps", key="saved", after_crash="ask-person")


def test_a_person_is_asked_through_the_stepper_and_leave_keeps_the_run_waiting():
    stepper = Stepper(ASK_PERSON)
    stepper.start()
    view = stepper.command(RUN)
    assert view.asks is not None and view.asks["state"] == "unknown" and view.asks["dedupe_ttl_s"] == 24 * 3600
    outcome = stepper.command(LEAVE).outcome
    stepper.close()
    assert outcome.waiting and outcome.effect_state == "unknown"
    stepper = Stepper(ASK_PERSON)
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
    stepper = Stepper(Settings(crash_at="none", key="saved", saving="steps"))
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
    outcome = simulate(lesson(4))                         # worker 2 starts 30 hours later on the scenario's clock
    assert outcome.counts["emails_received"] == 2         # past the service's window: the key was forgotten
    assert abs(CLOCK.now() - before) < 5
    assert faults._ARMS == [] and getattr(faults._WATCHED, "fn", None) is None
    faults.crash_point("after-do", "send-report")         # nothing is armed or watching: a real run passes


def test_the_why_says_what_happened_in_this_execution():
    one = why(simulate(Settings()))
    assert "started from zero" in one and "without a key" in one
    two = why(simulate(lesson(2)))
    assert "same key" in two and "ignored the repeat" in two
    key = next(r.key for r in simulate(lesson(2)).workers[0] if r.fate == "ledger")
    assert f"found the email marked attempted with key {key}" in two
    asked = why(simulate(lesson(3, 2)))
    assert "asked the service, which had the key" in asked
    waits = why(simulate(Settings(saving="steps", after_crash="ask-service", key="none")))
    assert "no saved key, so there is nothing to look up" in waits and "waits for a person" in waits
    model = why(simulate(lesson(6, 1)))
    assert "asked the model again" in model
    right = why(simulate(lesson(2)), Prediction(emails=1, fetches=3))
    assert right.startswith("You predicted it: 1 email, 3 fetches.")


def test_simulate_headless_json_has_the_fixed_shape(invoke):
    done = invoke("simulate", "--headless", "--json", "--saving", "journal", "--key", "saved", "--crash-at",
                  "after-attempted", "--after-crash", "ask-service", "--restart-after", "30h")
    assert done.exit_code == 0, done.output
    outcome = json.loads(done.stdout)
    assert set(outcome) == {"settings", "counts", "fetches_by_source", "workers", "status", "effect_state",
                            "crashed_at", "person", "waits_because", "why"}
    assert set(outcome["counts"]) == {"fetches", "model_calls", "reports_written", "send_requests",
                                      "emails_received", "lookups"}
    assert [w["worker"] for w in outcome["workers"]] == [1, 2]
    assert all(set(w) == {"worker", "timeline", "effect_states"} for w in outcome["workers"])
    assert {"step", "fate", "detail", "key"} <= set(outcome["workers"][0]["timeline"][0])
    assert (outcome["status"], outcome["effect_state"]) == ("waiting", "unknown")
    assert outcome["counts"]["lookups"] == 1 and outcome["counts"]["emails_received"] == 0
    assert "waits for a person" in outcome["why"]
    assert [s["state"] for s in outcome["workers"][1]["effect_states"]] == ["unknown"]
    answered = json.loads(invoke("simulate", "--headless", "--json", "--saving", "journal", "--key", "saved",
                                 "--crash-at", "after-attempted", "--after-crash", "ask-service", "--restart-after",
                                 "30h", "--person", "not-done").stdout)
    assert (answered["status"], answered["counts"]["emails_received"]) == ("succeeded", 1)
    assert [s["state"] for s in answered["workers"][1]["effect_states"]] == ["unknown", "not_done", "attempted",
                                                                            "confirmed"]


def test_simulate_headless_text_and_a_bad_choice(invoke):
    done = invoke("simulate", "--headless", "--saving", "steps", "--key", "saved")
    assert done.exit_code == 0
    assert "worker 2 (starts now)" in done.stdout and "deduplicated" in done.stdout
    assert "found         email attempted  (key k-" in done.stdout
    assert "ignored the repeat" in done.stdout
    bad = invoke("simulate", "--headless", "--saving", "sometimes")
    assert bad.exit_code == 2
    assert "--saving" in bad.output and "Traceback" not in bad.output


# -- the document's walk, headless, one flag at a time ------------------------------------------------------
# Seed 003, "Crash it yourself": "Start with the defaults: save nothing, and crash right after the email goes
# out. Step to the end, then change one setting at a time:" Each case is the flags a teacher's script adds, the
# document's sentence, and what that sentence (and the sections before it) says must come out.

def _walk(tui_agent, *flags: str) -> dict:
    done = tui_agent("simulate", "--headless", "--json", *flags)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _states(outcome: dict, worker: int) -> list[str]:
    return [each["state"] for each in outcome["workers"][worker - 1]["effect_states"]]


def test_the_defaults_repeat_everything_and_send_two_emails(tui_agent):
    """"Start with the defaults: save nothing, and crash right after the email goes out." Nothing saved: "A
    crash between two saves means the unsaved step runs again", every one of them, and "The new worker finds no
    record of the send, so if it sends again, the team gets two reports."
    """
    out = _walk(tui_agent)
    assert (out["settings"]["saving"], out["settings"]["key"], out["settings"]["crash_at"]) == \
        ("nothing", "none", "after-send")
    assert out["counts"]["fetches"] == 6 and out["counts"]["model_calls"] == 2 and out["counts"]["reports_written"] == 2
    assert out["counts"]["emails_received"] == 2
    assert "found no record of the email" in out["why"]


def test_step_1_a_checkpoint_stops_the_fetches_repeating_but_not_the_email(tui_agent):
    """"1. Save a checkpoint after each step. The fetches stop repeating, but the email still goes out twice."
    """
    out = _walk(tui_agent, "--saving", "steps")
    assert out["counts"]["fetches"] == 3 and out["fetches_by_source"] == {"sales": 1, "incidents": 1, "deploys": 1}
    assert out["counts"]["emails_received"] == 2


def test_step_2_the_saved_key_sent_again_gives_one_email(tui_agent):
    """"2. Add the key saved before sending. When the new worker finds the email marked attempted, send again with
    the same key." With the defaults' service: "A repeated key inside that window gets the first result back, and
    nothing happens again." And the four states: "if op.state == "intended": journal.update(op,
    state="attempted")  # saved before the first send", then for the new worker "if op.state == "attempted":  #
    sent, but no reply was saved / op = journal.update(op, state="outcome unknown")", until "confirmed"; "It
    sends the same key with every attempt, including after a restart."
    """
    out = _walk(tui_agent, "--saving", "steps", "--key", "saved")
    assert out["counts"]["send_requests"] == 2 and out["counts"]["emails_received"] == 1
    assert _states(out, 1)[:2] == ["intended", "attempted"]
    assert _states(out, 2)[0] == "unknown" and _states(out, 2)[-1] == "confirmed"
    keys = {each["key"] for worker in out["workers"] for each in worker["effect_states"]}
    assert len(keys) == 1 and None not in keys
    assert f"found the email marked attempted with key {keys.pop()}" in out["why"]


def test_step_3_a_service_that_sends_every_request_sends_two(tui_agent):
    """"3. Under More settings, choose a service that sends every request, and send again."
    """
    out = _walk(tui_agent, "--saving", "steps", "--key", "saved", "--service", "every")
    assert out["counts"]["send_requests"] == 2 and out["counts"]["emails_received"] == 2


def test_step_3_then_asking_the_service_sends_one_and_looks_up_once(tui_agent):
    """"Then try asking the service instead." "When a retry is not safe, your code must reconcile, which means
    finding out what happened before acting. For example, it asks the email service whether it sent op-8c41."
    """
    out = _walk(tui_agent, "--saving", "steps", "--key", "saved", "--service", "every", "--after-crash", "ask-service")
    assert out["counts"]["lookups"] == 1
    assert out["counts"]["send_requests"] == 1 and out["counts"]["emails_received"] == 1
    assert _states(out, 2) == ["unknown", "confirmed"]


def test_step_4_thirty_hours_later_the_service_has_forgotten_the_key(tui_agent):
    """"4. Switch back, and start the new worker 30 hours later." "The service remembers keys for a while, say
    24 hours": past it, the same key is a new request."
    """
    out = _walk(tui_agent, "--saving", "steps", "--key", "saved", "--restart-after", "30h")
    assert (out["settings"]["service"], out["settings"]["after_crash"]) == ("dedupe", "resend")
    assert out["counts"]["send_requests"] == 2 and out["counts"]["emails_received"] == 2


def test_the_handout_in_docs_is_what_the_table_command_prints_today():
    table = markdown(lessons_matrix())
    assert len(table.splitlines()) == 2 + sum(len(each.phases) for each in LESSONS) * 14
    names = list(dict.fromkeys(line.split(" | ")[0].removeprefix("| ") for line in table.splitlines()[2:]))
    assert names == ["0", "1", "2", "3.1", "3.2", "4", "5 (further)", "6.1 (further)", "6.2 (further)",
                     "7 (further)"]
    handout = (ROOT / "docs" / "simulator-lessons.md").read_text()
    assert handout.endswith(table), "regenerate docs/simulator-lessons.md with tui-agent simulate --table"


def test_the_whole_matrix_is_every_combination_once():
    rows = [settings for _, settings in whole_matrix()]
    assert len(rows) == len(set(rows)) == 3 * 4 * 2 * 3 * 14 * 3
    lines = markdown(iter([("", rows[0]), ("", rows[-1])])).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| - | nothing | none | dedupe | resend | none | now |")
