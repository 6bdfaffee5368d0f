"""The crash-it-yourself simulator against an independent oracle.

`expected(settings, person)` below computes what each execution must count from the scenario's rules (the
issue's words), not from the simulator's code: which of worker 1's steps happened and were saved, what worker 2
has to do again, and what the email service does with each request it receives. The matrix tests run every
combination of the settings (saving x key x service x after-crash x crash-at x restart-after, 3,024 of them)
through `simulate` and compare; each collects all its mismatches and shows the first few.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from tui_agent.sim import CHOICES, LESSONS, SOURCES, Settings, simulate
from tui_agent.sim.settings import lesson_of

SAVINGS = list(CHOICES["saving"])
KEYS = list(CHOICES["key"])
SERVICES = list(CHOICES["service"])
AFTER_CRASH = list(CHOICES["after_crash"])
CRASH_POINTS = list(CHOICES["crash_at"])
RESTARTS = list(CHOICES["restart_after"])

# Worker 1's boundaries in the order it passes them.
BOUNDARIES = ["before-fetch-1", "after-fetch-1", "before-fetch-2", "after-fetch-2", "before-fetch-3",
              "after-fetch-3", "before-summary", "mid-summary", "after-summary", "before-report", "after-report",
              "after-attempted", "after-send"]
COUNT_NAMES = ("fetches", "model_calls", "reports_written", "send_requests", "emails_received", "lookups")
WINDOW_H = 24
DELAY_H = {"now": 0.0, "1m": 1 / 60, "30h": 30.0}


def test_the_matrix_covers_the_choices_the_oracle_knows():
    assert SAVINGS == ["nothing", "steps", "journal"]
    assert KEYS == ["none", "at-send", "saved", "meaning"]
    assert SERVICES == ["dedupe", "every"]
    assert AFTER_CRASH == ["resend", "ask-service", "ask-person"]
    assert CRASH_POINTS == ["none", *BOUNDARIES]
    assert RESTARTS == ["now", "1m", "30h"]
    assert tuple(SOURCES) == ("sales", "incidents", "deploys")


# --------------------------------------------------------------------------------------------------- the oracle

@dataclass
class Expected:
    counts: dict
    fetches_by_source: dict
    status: str
    effect_state: str


class _Service:
    """The email service of the rules: it remembers every key for 24 hours (for dedupe and for lookups);
    a dedupe service does not deliver a request whose key it remembers; a request without a key, and every
    request to an `every` service, is delivered."""

    def __init__(self, mode: str):
        self.mode = mode
        self.seen: dict[str, float] = {}   # key -> hour it was first seen
        self.send_requests = 0
        self.emails = 0
        self.lookups = 0

    def remembers(self, key: str | None, now_h: float) -> bool:
        return key is not None and key in self.seen and now_h - self.seen[key] < WINDOW_H

    def send(self, key: str | None, now_h: float) -> None:
        self.send_requests += 1
        if self.mode == "dedupe" and self.remembers(key, now_h):
            return
        self.emails += 1
        if key is not None and not self.remembers(key, now_h):
            self.seen[key] = now_h

    def lookup(self, key: str, now_h: float) -> bool:
        self.lookups += 1
        return self.remembers(key, now_h)


def _progress(crash_at: str) -> dict:
    """What worker 1 did before the crash (work that happened), whether or not it was saved."""
    if crash_at == "none":
        return {"fetched": 3, "asked": True, "summarized": True, "reported": True, "attempted": True, "sent": True}
    i = BOUNDARIES.index(crash_at)
    if crash_at.startswith(("before-fetch-", "after-fetch-")):
        n = int(crash_at[-1])
        fetched = n if crash_at.startswith("after") else n - 1
    else:
        fetched = 3
    return {"fetched": fetched,
            "asked": i >= BOUNDARIES.index("mid-summary"),            # the model has answered
            "summarized": i >= BOUNDARIES.index("after-summary"),     # the summary step ended
            "reported": i >= BOUNDARIES.index("after-report"),
            "attempted": i >= BOUNDARIES.index("after-attempted"),
            "sent": i >= BOUNDARIES.index("after-send")}


def expected(settings: Settings, person: str | None = None) -> Expected:
    s = settings
    did = _progress(s.crash_at)
    service = _Service(s.service)
    by_source = {source: 0 for source in SOURCES}
    fetches = model_calls = reports = 0
    status, effect_state = "succeeded", "confirmed"
    fresh = itertools.count(1)

    def key_for(worker: int, saved_key: str | None) -> str | None:
        """The key a send carries: none; a fresh one each time for at-send; the saved random one (a NEW one when
        nothing was saved); the meaning key, the same for everybody."""
        if s.key == "none":
            return None
        if s.key == "at-send":
            return f"at-send-{next(fresh)}"
        if s.key == "saved":
            return saved_key if saved_key is not None else f"saved-by-worker-{worker}"
        return "nightly-report:2026-11-28:team"

    # worker 1, at hour 0
    for source in SOURCES[:did["fetched"]]:
        by_source[source] += 1
        fetches += 1
    model_calls += did["asked"]
    reports += did["reported"]
    w1_key = key_for(1, None)
    if did["sent"]:
        service.send(w1_key, 0.0)

    if s.crash_at != "none":
        now = DELAY_H[s.restart_after]
        kept = s.saving != "nothing"
        # the work worker 2 finds saved
        saved_fetches = did["fetched"] if kept else 0
        saved_reply = kept and (did["summarized"] or (s.saving == "journal" and did["asked"]))
        saved_report = kept and did["reported"]
        saved_key = w1_key if kept and s.key == "saved" and did["attempted"] else None
        attempted_on_disk = kept and did["attempted"]

        for source in SOURCES[saved_fetches:]:
            by_source[source] += 1
            fetches += 1
        model_calls += not saved_reply
        reports += not saved_report
        key = key_for(2, saved_key) if s.key != "at-send" else None   # at-send makes its key at each send

        def send_again() -> None:
            service.send(key_for(2, saved_key) if s.key == "at-send" else key, now)

        if not attempted_on_disk:
            send_again()                         # no attempted send on disk: it simply does the job
        elif s.after_crash == "resend":
            send_again()                         # the naive policy: no guard about the window
        else:
            ask_person = s.after_crash == "ask-person" or s.key in ("none", "at-send")
            if not ask_person:
                if service.lookup(key, now):
                    pass                         # found: recorded as done, nothing sent
                elif DELAY_H[s.restart_after] < WINDOW_H:
                    send_again()                 # not found inside the window: it was not sent
                else:
                    ask_person = True            # past the window the answer proves nothing
            if ask_person:
                if person == "happened":
                    pass
                elif person == "not-done":
                    send_again()
                else:
                    status, effect_state = "waiting", "unknown"

    counts = {"fetches": fetches, "model_calls": model_calls, "reports_written": reports,
              "send_requests": service.send_requests, "emails_received": service.emails, "lookups": service.lookups}
    return Expected(counts, by_source, status, effect_state)


# ---------------------------------------------------------------------------------------------- the matrix

def _all_settings(**fixed):
    names = ("saving", "key", "service", "after_crash", "crash_at", "restart_after")
    for values in itertools.product(*(CHOICES[n] for n in names)):
        settings = dict(zip(names, values))
        if all(settings[k] == v for k, v in fixed.items()):
            yield Settings(**settings)


def _ledger_rules_broken(out) -> list[str]:
    """The email's row in the ledger against the document's rules for it: "Write "about to send the email"
    before sending" (every request follows `attempted`); one row holds one key ("It sends the same key with
    every attempt"); the new worker finds the row as the old one left it, unless nothing was saved; and the
    row's last state is the effect's state at the end."""
    broken = []
    ledger = [[r for r in rows if r.fate in ("ledger", "found")] for rows in out.workers]
    for rows in out.workers:
        state = None
        for row in rows:
            if row.fate in ("ledger", "found"):
                state = row.detail
            elif row.fate in ("sent", "deduplicated") and state != "attempted":
                broken.append("a request not marked attempted first")
        if len({r.key for r in rows if r.fate in ("ledger", "found")}) > 1:
            broken.append("a row with two keys")
    found = [r for r in ledger[1] if r.fate == "found"]
    if found and (out.settings.saving == "nothing" or not ledger[0] or found[0].detail != ledger[0][-1].detail):
        broken.append("worker 2 found another state than worker 1 left")
    last = (ledger[1] or ledger[0])[-1].detail if any(ledger) else None
    if last != out.effect_state:
        broken.append("the ledger's last state is not the effect's")
    return broken


def _compare(settings: Settings, person: str | None) -> dict | None:
    want = expected(settings, person)
    out = simulate(settings, person=person)
    got_counts = {name: out.counts.get(name) for name in COUNT_NAMES}
    got = {"counts": got_counts, "fetches_by_source": dict(out.fetches_by_source), "status": str(out.status),
           "effect_state": None if out.effect_state is None else str(out.effect_state)}
    wanted = {"counts": want.counts, "fetches_by_source": want.fetches_by_source, "status": want.status,
              "effect_state": want.effect_state}
    # worker 2 finds a finished run and does nothing when nothing crashed; after a crash it has work to show
    wanted["worker 2 timeline empty"] = settings.crash_at == "none"
    got["worker 2 timeline empty"] = len(out.workers[1]) == 0
    wanted["ledger rules broken"], got["ledger rules broken"] = [], _ledger_rules_broken(out)
    if got == wanted:
        return None
    diff = {k: (wanted[k], got[k]) for k in wanted if wanted[k] != got[k]}
    if "counts" in diff:
        diff["counts"] = {n: (want.counts[n], got_counts[n]) for n in COUNT_NAMES if want.counts[n] != got_counts[n]}
    return {"settings": settings.as_dict(), "person": person, "expected -> got": diff}


def _report(mismatches: list[dict], total: int) -> str:
    lines = [f"{len(mismatches)} of {total} executions differ from the rules; the first {min(10, len(mismatches))}:"]
    for m in mismatches[:10]:
        s = m["settings"]
        lines.append(f"  saving={s['saving']} key={s['key']} service={s['service']} after_crash={s['after_crash']} "
                     f"crash_at={s['crash_at']} restart_after={s['restart_after']} person={m['person']}: "
                     f"{m['expected -> got']}")
    return "\n".join(lines)


@pytest.mark.parametrize("restart_after", RESTARTS)
@pytest.mark.parametrize("saving", SAVINGS)
def test_matrix(saving, restart_after):
    """Every key x service x after-crash x crash point, for one saving mode and one delay (336 executions)."""
    mismatches, total = [], 0
    for settings in _all_settings(saving=saving, restart_after=restart_after):
        total += 1
        if (m := _compare(settings, None)) is not None:
            mismatches.append(m)
    assert total == 4 * 2 * 3 * 14
    assert not mismatches, _report(mismatches, total)


@pytest.mark.parametrize("person", ["happened", "not-done"])
@pytest.mark.parametrize("saving", SAVINGS)
def test_matrix_with_a_persons_answer(saving, person):
    """A person's answer, over every combination where worker 2 can find the send in doubt (and, with saving
    nothing, where it cannot: the answer then changes nothing)."""
    points = ["after-attempted", "after-send"] if saving != "nothing" else ["before-summary", "after-send"]
    mismatches, total = [], 0
    for crash_at in points:
        for settings in _all_settings(saving=saving, crash_at=crash_at):
            total += 1
            if (m := _compare(settings, person)) is not None:
                mismatches.append(m)
    assert not mismatches, _report(mismatches, total)


# ---------------------------------------------------------------------------------------- the rules, one by one

def run(**kw):
    person = kw.pop("person", None)
    return simulate(Settings(**kw), person=person)


BASE = dict(saving="steps", key="saved", service="dedupe", after_crash="resend", crash_at="after-send",
            restart_after="now")


def test_saving_nothing_repeats_every_fetch_before_the_crash():
    for i in (1, 2, 3):
        out = run(**{**BASE, "saving": "nothing", "crash_at": f"after-fetch-{i}"})
        assert out.counts["fetches"] == i + 3
        assert out.fetches_by_source == {s: 2 if n < i else 1 for n, s in enumerate(SOURCES)}
        assert out.counts["model_calls"] == 1 and out.counts["emails_received"] == 1


def test_saving_steps_repeats_only_what_was_not_saved():
    out = run(**{**BASE, "crash_at": "after-fetch-2"})
    assert out.counts["fetches"] == 3
    assert out.fetches_by_source == {"sales": 1, "incidents": 1, "deploys": 1}
    out = run(**{**BASE, "crash_at": "before-fetch-2"})
    assert out.counts["fetches"] == 3


def test_mid_summary_asks_the_model_twice_with_steps_and_once_with_journal():
    steps = run(**{**BASE, "saving": "steps", "crash_at": "mid-summary"})
    journal = run(**{**BASE, "saving": "journal", "crash_at": "mid-summary"})
    nothing = run(**{**BASE, "saving": "nothing", "crash_at": "mid-summary"})
    assert steps.counts["model_calls"] == 2
    assert journal.counts["model_calls"] == 1
    assert nothing.counts["model_calls"] == 2
    for before in ("before-summary",):
        for saving in ("steps", "journal"):
            assert run(**{**BASE, "saving": saving, "crash_at": before}).counts["model_calls"] == 1


@pytest.mark.parametrize("saving", SAVINGS)
def test_meaning_key_with_dedupe_restarting_now_gives_exactly_one_email_whatever_the_saving(saving):
    """Wherever worker 1 crashed and whatever worker 2 does about it (a person, asked, saying it was not done)."""
    for after_crash, crash_at, restart in itertools.product(AFTER_CRASH, CRASH_POINTS, ("now", "1m")):
        person = "not-done" if after_crash == "ask-person" else None
        out = run(saving=saving, key="meaning", service="dedupe", after_crash=after_crash, crash_at=crash_at,
                  restart_after=restart, person=person)
        assert out.counts["emails_received"] == 1, (after_crash, crash_at, restart)
        assert out.status == "succeeded", (after_crash, crash_at, restart)


def test_saving_nothing_forgets_the_saved_key_so_dedupe_cannot_help():
    out = run(**{**BASE, "saving": "nothing", "key": "saved"})
    assert out.counts["send_requests"] == 2 and out.counts["emails_received"] == 2
    assert out.status == "succeeded"


def test_saving_nothing_never_applies_the_after_crash_policy():
    for after_crash in AFTER_CRASH:
        out = run(**{**BASE, "saving": "nothing", "after_crash": after_crash, "crash_at": "after-attempted"})
        assert out.status == "succeeded" and out.effect_state == "confirmed"
        assert out.counts["lookups"] == 0
        assert out.counts["send_requests"] == 1 and out.counts["emails_received"] == 1


def test_resend_ignores_the_restart():
    out = run(**{**BASE, "restart_after": "30h"})
    assert out.counts["send_requests"] == 2 and out.counts["emails_received"] == 2
    assert out.status == "succeeded"


def test_ask_service_found_records_the_send_and_sends_nothing():
    out = run(**{**BASE, "service": "every", "after_crash": "ask-service"})
    assert out.counts == {**out.counts, "lookups": 1, "send_requests": 1, "emails_received": 1}


def test_ask_service_not_found_inside_the_window_sends_once():
    for delay in ("now", "1m"):
        out = run(**{**BASE, "after_crash": "ask-service", "crash_at": "after-attempted", "restart_after": delay})
        assert (out.counts["lookups"], out.counts["send_requests"], out.counts["emails_received"]) == (1, 1, 1)
        assert out.status == "succeeded"


def test_ask_service_past_the_window_waits_for_a_person():
    for crash_at in ("after-attempted", "after-send"):
        out = run(**{**BASE, "after_crash": "ask-service", "crash_at": crash_at, "restart_after": "30h"})
        assert out.counts["lookups"] == 1
        assert (out.status, out.effect_state) == ("waiting", "unknown")


def test_ask_service_without_a_saved_key_waits_without_a_lookup():
    for key in ("none", "at-send"):
        out = run(**{**BASE, "key": key, "after_crash": "ask-service"})
        assert out.counts["lookups"] == 0
        assert (out.status, out.effect_state) == ("waiting", "unknown")
        assert out.counts["send_requests"] == 1 and out.counts["emails_received"] == 1


def test_waiting_reports_effect_state_unknown_and_status_waiting():
    out = run(**{**BASE, "after_crash": "ask-person"})
    assert out.status == "waiting"
    assert out.effect_state == "unknown"
    assert out.as_json()["status"] == "waiting" and out.as_json()["effect_state"] == "unknown"
    assert out.counts["send_requests"] == 1 and out.counts["emails_received"] == 1


def test_person_happened_records_the_send_without_sending():
    out = run(**{**BASE, "after_crash": "ask-person", "person": "happened"})
    assert (out.status, out.effect_state) == ("succeeded", "confirmed")
    assert out.counts["send_requests"] == 1 and out.counts["emails_received"] == 1


def test_person_not_done_sends_again_with_the_same_key():
    # the service still remembers the key: a repeat it does not deliver
    out = run(**{**BASE, "after_crash": "ask-person", "person": "not-done"})
    assert (out.status, out.effect_state) == ("succeeded", "confirmed")
    assert out.counts["send_requests"] == 2 and out.counts["emails_received"] == 1
    # it really had not gone out: now it does, once
    out = run(**{**BASE, "after_crash": "ask-person", "crash_at": "after-attempted", "person": "not-done"})
    assert out.counts["send_requests"] == 1 and out.counts["emails_received"] == 1
    # past the window the service has forgotten the key: delivered again
    out = run(**{**BASE, "after_crash": "ask-person", "restart_after": "30h", "person": "not-done"})
    assert out.counts["send_requests"] == 2 and out.counts["emails_received"] == 2


def test_person_answer_changes_nothing_when_nobody_waits():
    for person in ("happened", "not-done"):
        out = run(**{**BASE, "person": person})
        assert out.counts == run(**BASE).counts
        assert out.status == "succeeded"


def test_crash_none_does_everything_once_and_leaves_worker_2_empty():
    for saving, key, service, after_crash, restart in itertools.product(SAVINGS, KEYS, SERVICES, AFTER_CRASH,
                                                                         RESTARTS):
        out = run(saving=saving, key=key, service=service, after_crash=after_crash, crash_at="none",
                  restart_after=restart)
        assert out.counts == {**out.counts, "fetches": 3, "model_calls": 1, "reports_written": 1, "send_requests": 1,
                              "emails_received": 1, "lookups": 0}
        assert list(out.workers[1]) == []
        assert out.as_json()["workers"][1] == {"worker": 2, "timeline": [], "effect_states": []}
        assert (out.status, out.effect_state) == ("succeeded", "confirmed")


def test_a_crash_gives_worker_2_something_to_do():
    for crash_at in BOUNDARIES:
        out = run(**{**BASE, "crash_at": crash_at})
        assert list(out.workers[1]), crash_at
        for row in [*out.workers[0], *out.workers[1]]:
            assert isinstance(row.step, str) and isinstance(row.fate, str) and isinstance(row.detail, str)


def test_as_json_shape():
    out = run(**BASE)
    data = out.as_json()
    assert data["settings"] == BASE
    assert data["counts"] == out.counts
    assert [w["worker"] for w in data["workers"]] == [1, 2]
    assert len(data["workers"][0]["timeline"]) == len(out.workers[0])
    assert data["status"] == out.status and data["effect_state"] == out.effect_state


# ------------------------------------------------------------------------------------------------- the lessons
# Seed 003, "Crash it yourself": "Start with the defaults: save nothing, and crash right after the email goes
# out. Step to the end, then change one setting at a time: 1. Save a checkpoint after each step. The fetches
# stop repeating, but the email still goes out twice. 2. Add the key saved before sending. When the new worker
# finds the email marked attempted, send again with the same key. 3. Under More settings, choose a service that
# sends every request, and send again. Then try asking the service instead. 4. Switch back, and start the new
# worker 30 hours later."

def _lesson(n):
    (lesson,) = [l for l in LESSONS if l.number == n]
    return lesson


def _parts(n):
    return [phase.settings for phase in _lesson(n).phases]


def _changed(before: Settings, after: Settings) -> dict:
    return {name: value for name, value in after.as_dict().items() if before.as_dict()[name] != value}


def test_the_defaults_are_the_documents():
    """"save nothing, and crash right after the email goes out"; its step 3 has you *choose* a service that sends
    every request, so the default one dedupes; step 2 "send again" is what the default does on doubt; step 4
    starts the new worker later, so by default it starts now."""
    assert Settings().as_dict() == {"saving": "nothing", "key": "none", "service": "dedupe", "after_crash": "resend",
                                    "crash_at": "after-send", "restart_after": "now"}
    assert _parts(0) == [Settings()]


def test_each_step_changes_exactly_the_setting_the_document_names():
    (defaults,), (one,), (two,), (every, ask), (four,) = (_parts(n) for n in range(5))
    assert _changed(defaults, one) == {"saving": "steps"}                 # "Save a checkpoint after each step."
    assert _changed(one, two) == {"key": "saved"}                         # "Add the key saved before sending."
    assert _changed(two, every) == {"service": "every"}                   # "choose a service that sends every request"
    assert _changed(every, ask) == {"after_crash": "ask-service"}         # "Then try asking the service instead."
    assert _changed(ask, four) == {"service": "dedupe", "after_crash": "resend",   # "Switch back,
                                   "restart_after": "30h"}                # and start the new worker 30 hours later."


def test_the_further_lessons_come_after_the_documents_and_are_marked():
    assert [l.number for l in LESSONS] == list(range(8))
    assert [l.further for l in LESSONS] == [False] * 5 + [True] * 3
    (meaning,), (steps, journal), (at_send,) = _parts(5), _parts(6), _parts(7)
    assert _changed(Settings(), meaning) == {"key": "meaning"}
    assert _changed(steps, journal) == {"saving": "journal"} and steps.crash_at == "mid-summary"
    assert at_send.key == "at-send"


def test_every_lessons_part_has_settings_of_its_own():
    """The screen names the lesson from its settings alone (a setting's key can land on one)."""
    every = [phase.settings for lesson in LESSONS for phase in lesson.phases]
    assert len(every) == len(set(every))
    assert all(lesson_of(phase.settings) == (lesson.number, i)
               for lesson in LESSONS for i, phase in enumerate(lesson.phases))
    assert lesson_of(Settings(saving="journal")) is None


def test_the_document_walk_gives_the_documents_outcomes():
    (defaults,), (one,), (two,), (every, ask), (four,) = ([simulate(p) for p in _parts(n)] for n in range(5))
    assert defaults.counts["fetches"] == 6 and defaults.counts["emails_received"] == 2   # everything again, twice
    assert one.counts["fetches"] == 3 and one.counts["emails_received"] == 2   # "The fetches stop repeating, but"
    assert (two.counts["send_requests"], two.counts["emails_received"]) == (2, 1)        # the key, deduplicated
    assert every.counts["emails_received"] == 2                                          # "sends every request"
    assert (ask.counts["lookups"], ask.counts["emails_received"]) == (1, 1)              # "asking the service"
    assert four.counts["emails_received"] == 2                           # past the service's 24 hours
    assert [o.status for o in (defaults, one, two, every, ask, four)] == ["succeeded"] * 6


def test_the_further_lessons_outcomes():
    (meaning,), (steps, journal), (at_send,) = ([simulate(p) for p in _parts(n)] for n in (5, 6, 7))
    assert meaning.counts["emails_received"] == 1 and meaning.counts["fetches"] == 6   # "survives even a lost checkpoint"
    assert (steps.counts["model_calls"], journal.counts["model_calls"]) == (2, 1)
    assert at_send.counts["emails_received"] == 2       # "The retry then carries a new key and looks like a new email."


def test_the_oracle_agrees_with_the_lessons():
    """The oracle itself against the document's outcomes, without the simulator."""
    for n, emails in ((0, [2]), (1, [2]), (2, [1]), (3, [2, 1]), (4, [2]), (5, [1]), (6, [1, 1]), (7, [2])):
        assert [expected(p).counts["emails_received"] for p in _parts(n)] == emails, n
    assert expected(_parts(0)[0]).counts["fetches"] == 6 and expected(_parts(1)[0]).counts["fetches"] == 3
    assert expected(_parts(3)[1]).counts["lookups"] == 1
    assert [expected(p).counts["model_calls"] for p in _parts(6)] == [2, 1]
