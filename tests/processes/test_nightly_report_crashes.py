"""nightly-report with real processes: a worker SIGKILLed at every fault point is followed by a
fresh `worker --once`; no recorded fetch is fetched again and the report is emailed exactly once,
or the run waits for a person when the ledger cannot know (docs/architecture.md section 6.4, The effect
ledger). On both stores: on PostgreSQL the dead worker's lease is a short one that the test waits out, as the
server's clock judges it (tests/helpers.py, `taken_over`)."""

import email
import email.policy
import json
import mailbox
import signal
from collections import Counter

import pytest
from helpers import data_dir, ok, short_lease, show_json, taken_over

AGENT = "nightly-report"
DEDUPE = {"date": "2026-11-28", "service": "dedupe"}
REQUESTS = {"lookup": DEDUPE, "no-lookup": {**DEDUPE, "lookup": False}, "every": {"service": "every", "lookup": False}}
SOURCES = ("sales", "incidents", "deploys")
BEFORE_EFFECT = ["settings", "fetch:sales", "fetch:incidents", "fetch:deploys", "summarize", "write-report"]
# what the dead worker recorded, per fault point (the step points are armed for their 3rd pass: fetch:incidents)
RECORDED = {
    "before-step": BEFORE_EFFECT[:2],
    "after-step": BEFORE_EFFECT[:2],
    "after-step-commit": BEFORE_EFFECT[:3],
    "after-intended": BEFORE_EFFECT,
    "after-attempted": BEFORE_EFFECT,
    "after-do": BEFORE_EFFECT,
}
COUNT = {"before-step": ":3", "after-step": ":3", "after-step-commit": ":3"}
HEADERS = ("From", "To", "Subject", "Date", "Message-ID")


def _crash(tui_agent, database, request: dict, point: str) -> tuple[str, dict]:
    """Start a run, SIGKILL its worker at `point`; the run id and `show --json` taken after the crash."""
    run_id = ok(tui_agent("start", AGENT, "--input", json.dumps(request))).stdout.strip()
    crashed = tui_agent("worker", "--once", "--lease", short_lease(database, 5), "--name", "w-dead",
                        env={"TUI_AGENT_CRASH_AT": point + COUNT.get(point, "")})
    assert crashed.returncode == -signal.SIGKILL, (crashed.stdout, crashed.stderr)
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["worker"]) == ("running", "w-dead")
    assert [e["name"] for e in report["journal"]] == RECORDED[point]
    return run_id, report


def _resume(tui_agent, database, run_id) -> dict:
    """A fresh worker takes the run over once the dead worker's lease is over."""
    ok(tui_agent("worker", "--once", "--lease", "5", "--name", "w-new", env=taken_over(database, run_id)))
    return show_json(tui_agent, run_id)


def _emails(database, date: str) -> list:
    """Every message in the outbox's Maildir, checked to parse and to carry the headers a mail needs."""
    folder = data_dir(database) / "outbox"
    if not folder.exists():
        return []
    box = mailbox.Maildir(folder, factory=None, create=False)
    parsed = []
    for key in box.keys():
        assert isinstance(box[key], mailbox.MaildirMessage)
        msg = email.message_from_bytes(box.get_bytes(key), policy=email.policy.default)
        assert all(msg[h] for h in HEADERS), {h: msg[h] for h in HEADERS}
        assert msg["Date"].datetime is not None
        assert date in msg["Subject"], msg["Subject"]
        parsed.append(msg)
    return parsed


def _fetches(database) -> Counter:
    log = data_dir(database) / "nightly-report" / "fetches.log"
    return Counter(log.read_text().split()) if log.exists() else Counter()


def _date(report: dict) -> str:
    return next(e["result"]["date"] for e in report["journal"] if e["name"] == "settings")


def _effect(report: dict) -> dict:
    (effect,) = report["effects"]
    assert effect["name"] == "send-report"
    return effect


def _usage_error(done, *words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("tui-agent: "), done.stderr
    assert all(w in done.stderr for w in words), done.stderr


CLEAN = [(point, name) for point in RECORDED for name in ("lookup", "no-lookup")] + [
    (point, "every") for point in ("before-step", "after-step", "after-step-commit", "after-intended")]
# The whole matrix runs on SQLite. On PostgreSQL, where each case also waits out a real lease, every fault point
# runs once, with each kind of request at least once: what a point leaves behind is the runtime's doing, and the
# store's part (the takeover, the journal, the ledger's rows) is the same at every point.
ON_POSTGRES = {("before-step", "every"), ("after-step", "lookup"), ("after-step-commit", "no-lookup"),
               ("after-intended", "every"), ("after-attempted", "lookup"), ("after-do", "no-lookup")}
CLEAN_ON_BOTH = [(point, name, "sqlite") for point, name in CLEAN] + [
    pytest.param(point, name, "postgres", marks=pytest.mark.postgres) for point, name in CLEAN
    if (point, name) in ON_POSTGRES]


@pytest.mark.parametrize("point, request_name, database", CLEAN_ON_BOTH, indirect=["database"])
def test_a_crash_at_any_point_resumes_without_refetching_and_emails_once(tui_agent, database, point,
                                                                         request_name):
    run_id, crashed = _crash(tui_agent, database, REQUESTS[request_name], point)
    recorded = [e["name"].split(":", 1)[1] for e in crashed["journal"] if e["name"].startswith("fetch:")]

    report = _resume(tui_agent, database, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed"), report["run"]
    assert [e["name"] for e in report["journal"]] == BEFORE_EFFECT + ["send-report"]
    fetched = _fetches(database)
    assert all(fetched[s] == 1 for s in recorded), (recorded, fetched)
    # only the fetch in flight when the worker died after its function returned runs twice
    assert dict(fetched) == {s: 2 if (point, s) == ("after-step", "incidents") else 1 for s in SOURCES}
    assert _effect(report)["state"] == "confirmed"
    assert len(_emails(database, _date(report))) == 1
    # the ledger settled it alone: no person was needed at any time
    kinds = [e["kind"] for e in report["events"]]
    assert "waiting" not in kinds, report["events"]
    assert "decision" not in kinds, report["events"]
    assert kinds.count("queued") == 1


@pytest.mark.parametrize("point, decision, said, emails_before", [
    pytest.param("after-do", ["--happened", "--note", "saw it in the inbox"],
                 "says it happened (saw it in the inbox)", 1, id="after-do-happened"),
    pytest.param("after-attempted", ["--not-done"], "says it did not happen", 0, id="after-attempted-not-done"),
])
def test_an_email_in_doubt_without_lookup_or_dedupe_waits_for_a_person(tui_agent, database, point, decision, said,
                                                                      emails_before):
    run_id, _ = _crash(tui_agent, database, REQUESTS["every"], point)
    report = _resume(tui_agent, database, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("waiting", "reconcile"), report["run"]
    assert _effect(report)["state"] == "unknown"
    date = _date(report)
    assert len(_emails(database, date)) == emails_before

    ok(tui_agent("reconcile", run_id, "send-report", *decision))
    ok(tui_agent("worker", "--once", "--lease", "5"))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed"), report["run"]
    assert _effect(report)["state"] == "confirmed"
    assert len(_emails(database, date)) == 1
    assert any(e["kind"] == "decision" and said in e["message"] for e in report["events"]), report["events"]
    assert any(e["kind"] == "queued" and said in e["message"] for e in report["events"]), report["events"]
    assert dict(_fetches(database)) == {s: 1 for s in SOURCES}


def test_the_same_date_twice_sends_one_email(tui_agent, database):
    request = json.dumps({"date": "2026-11-27"})
    first = ok(tui_agent("run", AGENT, "--input", request)).stdout.split()[0]
    second = ok(tui_agent("run", AGENT, "--input", request)).stdout.split()[0]
    assert first != second
    report = show_json(tui_agent, second)
    assert report["run"]["status"] == "succeeded"
    assert _effect(report)["done_by"] == first
    assert any(f"already confirmed by run {first}" in e["message"] for e in report["events"]), report["events"]
    (msg,) = _emails(database, "2026-11-27")
    assert msg["To"] == "team <team@localhost>"
    assert _effect(show_json(tui_agent, first))["result"]["message_id"] == msg["Message-ID"]


def test_reconcile_refuses_what_makes_no_sense_with_one_line(tui_agent, database):
    run_id, _ = _crash(tui_agent, database, REQUESTS["every"], "after-attempted")
    assert _resume(tui_agent, database, run_id)["run"]["status"] == "waiting"
    _usage_error(tui_agent("reconcile", run_id, "send-report", "--ask"), "no lookup")
    _usage_error(tui_agent("reconcile", run_id, "send-a-fax", "--happened"), "send-a-fax")
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], _effect(report)["state"]) == ("waiting", "unknown")
    assert "decision" not in [e["kind"] for e in report["events"]]

    done = ok(tui_agent("run", AGENT, "--input", json.dumps({"date": "2026-11-26"}))).stdout.split()[0]
    _usage_error(tui_agent("reconcile", done, "send-report", "--happened"), "succeeded")
    assert _effect(show_json(tui_agent, done))["state"] == "confirmed"
