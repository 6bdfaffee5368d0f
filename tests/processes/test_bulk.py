"""Many runs at once (issue 40, item 3): `--where FILTER` on park, resume, cancel, approve (--deny) and reconcile
--ask, each run decided in its own transaction by its one-run action's rule, the summary and the refusals one line
each; and the TUI's marks (`*` marks every run the filter selects), then one confirmation for all of them."""

from __future__ import annotations

import json
import re
import time

import pytest
from helpers import crashed_into_doubt, dump, key, ok, screen_of, tui, until, work

from tui_agent import operate
from tui_agent.runtime.registry import load_registry
from tui_agent.screens.modals import BulkModal
from tui_agent.store import open_store
from tui_agent.store.runs import events_for, get_run, list_runs

SUMMARY = re.compile(r"(\D+) (\d+) of (\d+) runs?(?:; (\d+) refused:)?")


def summary(stdout: str) -> tuple[str, int, int, int, list[str]]:
    """(what was done, how many, of how many, how many refused, the refusal lines) from a bulk action's output."""
    first, *rest = stdout.splitlines()
    verb, done, total, refused = SUMMARY.fullmatch(first).groups()
    return verb, int(done), int(total), int(refused or 0), [line.strip() for line in rest]


def on_demo(tui_agent, db):
    """`tui-agent --db DB ...`: the demo database is not the one TUI_AGENT_DB names."""
    return lambda *args, **kwargs: tui_agent("--db", str(db), *args, **kwargs)


def kinds(store, run_id: str) -> list[str]:
    return [event["kind"] for event in events_for(store, run_id)]


def test_a_bulk_cancel_racing_a_real_worker_cancels_no_run_that_succeeded(database, tui_agent, spawn):
    """Forty short runs; a worker process finishes them four at a time while `cancel --where` goes over all of them
    (newest first, the worker oldest first), the runs the worker holds among them. Every run ends exactly once:
    succeeded (one succeeded event, no cancel) or cancelled (one cancelled event, nothing settled after it); the
    summary counts both, and names each refused run, every one of them a run that had succeeded."""
    store = open_store(database)
    registry = load_registry()
    ids = [operate.start(store, registry, agent_name="hello", request={"name": f"n{i}", "delay_s": 0.05})[0]
           for i in range(40)]
    worker = spawn("worker", "--concurrency", "4", "--name", "w-race", label="worker")
    until("a few runs to succeed", lambda: sum(get_run(store, r)["status"] == "succeeded" for r in ids) >= 4)
    done = ok(tui_agent("cancel", "--where", "agent:hello", "--yes"), 1)
    until("the worker to settle what it held", lambda: not [r for r in list_runs(store) if r["status"] == "running"])
    worker.terminate()
    worker.wait(timeout=30)
    verb, cancelled, total, refused, lines = summary(done.stdout)
    statuses = {run_id: get_run(store, run_id)["status"] for run_id in ids}
    assert (verb, total) == ("cancelled", 40)
    assert set(statuses.values()) == {"succeeded", "cancelled"}, statuses
    assert cancelled == sum(s == "cancelled" for s in statuses.values())
    assert refused == len(lines) == sum(s == "succeeded" for s in statuses.values())
    for line in lines:
        run_id = line.split()[0]
        assert statuses[run_id] == "succeeded" and line.startswith(f"{run_id} is succeeded"), line
        assert "it has ended; nothing to cancel" in line
    for run_id, status in statuses.items():
        ended = [kind for kind in kinds(store, run_id) if kind in ("succeeded", "cancelled", "failed")]
        assert ended == [status], (run_id, kinds(store, run_id))   # each decision is one event, and the only end
    assert any("claimed" in kinds(store, r) for r in ids if statuses[r] == "cancelled"), "a run the worker held"
    store.close()


def test_dry_run_changes_nothing_and_without_yes_or_a_terminal_nothing_is_done(demo, tui_agent):
    db, roles = demo
    tui_agent = on_demo(tui_agent, db)
    before = dump(db)
    dry = ok(tui_agent("cancel", "--where", "status:waiting agent:nightly-report", "--dry-run"))
    lines = dry.stdout.splitlines()
    assert lines[0] == "would cancel 3 of the 3 runs matching 'status:waiting agent:nightly-report':"
    assert {line.strip() for line in lines[1:]} == {roles["waiting for approval"], roles["sleeping until tomorrow"],
                                                    roles["outcome unknown"]}
    refused = ok(tui_agent("cancel", "--where", "status:waiting agent:nightly-report"), 2)
    assert refused.stderr == ("tui-agent: --where selects 3 runs; pass --yes to cancel them without a question, or "
                              "--dry-run to see which\n")
    for bad, said in (("status:bogus", "bogus is not a status"), ("since:someday", "--where 'since:someday': since:someday is not a time")):
        assert said in ok(tui_agent("park", "--where", bad, "--yes"), 2).stderr
    assert ok(tui_agent("park", roles["failed"], "--where", "status:failed"), 2).stderr.startswith(
        "tui-agent: give a RUN or --where FILTER, not both")
    assert ok(tui_agent("reconcile", "--where", "status:waiting", "--happened", "--yes"), 2).stderr.startswith(
        "tui-agent: --where goes with --ask alone")
    assert dump(db) == before
    assert ok(tui_agent("cancel", "--where", "agent:nobody", "--yes")).stdout == "no run matches 'agent:nobody'; nothing to do\n"


@pytest.mark.parametrize(("action", "args", "status"), [
    ("approve", ("approve",), "queued"), ("deny", ("approve", "--deny"), "queued"),
    ("park", ("park",), "parked")])
def test_each_action_acts_on_the_runs_it_applies_to_and_names_the_others(demo, tui_agent, action, args, status):
    """The demo's waiting nightly reports: one waiting for approval, one asleep and one whose effect is in doubt:
    approve and deny apply to the first only, park to all three; each run acted on gets its one decision, the
    others are named with what they are and why not, and the exit is 1 when any is refused."""
    db, roles = demo
    done = on_demo(tui_agent, db)(*args, "--where", "status:waiting agent:nightly-report", "--note", "bulk", "--yes")
    verb, count, total, refused, lines = summary(done.stdout)
    store = open_store(db)
    acted = [run_id for run_id in (roles["waiting for approval"], roles["sleeping until tomorrow"],
                                   roles["outcome unknown"]) if get_run(store, run_id)["status"] == status]
    assert (verb, count, total) == (operate.BULK_DONE[action], len(acted), 3)
    assert done.returncode == (1 if refused else 0) and refused == 3 - count == len(lines)
    for line in lines:
        assert line.split()[0] not in acted and line.endswith("; nothing changed")
        assert action == "park" or "it is not waiting for an approval" in line
    for run_id in acted:
        assert any("bulk" in event["message"] for event in events_for(store, run_id))
    store.close()


def test_reconcile_ask_asks_about_each_runs_effect_in_doubt_that_has_a_lookup(db_path, tui_agent, tmp_path, clock):
    """Two runs whose send is in doubt past the service's lookup window (waiting for a person): one with a lookup,
    which is asked about; the demo-like one without a lookup is refused saying so."""
    store = open_store(db_path)
    registry = load_registry(["ledger_agents"])
    log = tmp_path / "sent.log"
    asked, unasked = (operate.start(store, registry, agent_name="ledger",
                                    request={"key": f"k-{i}", "log": str(log), **extra})[0]
                      for i, extra in enumerate(({"lookup_ttl_s": 0}, {})))
    for run_id in (asked, unasked):
        store = crashed_into_doubt(store, db_path, registry, clock, run_id)
    done = tui_agent("reconcile", "--where", "status:waiting", "--ask", "--yes")
    verb, count, total, refused, lines = summary(done.stdout)
    assert (count, total, refused, done.returncode) == (1, 2, 1, 1)
    assert lines == [line for line in lines if line.startswith(unasked) and "has no lookup" in line]
    assert get_run(store, asked)["status"] == "queued"
    assert "asked the service to look the key up" in events_for(store, asked)[-2]["message"]
    assert get_run(store, unasked)["status"] == "waiting"
    assert not log.exists(), "nothing was sent: the service is only asked"
    store.close()


async def test_mark_all_matching_then_cancel_asks_once_and_reports_a_run_that_changed_meanwhile(db_path):
    """`agent:hello`, then `*`: all three hello runs are marked (the nightly report is not); `x` opens one
    confirmation saying cancel applies to two of the three (one has succeeded) and why not the third. One of the two
    is cancelled from elsewhere before the answer: it is reported, not cancelled twice, and stays marked with the
    succeeded one; the other is cancelled, with one event."""
    store = open_store(db_path)
    registry = load_registry()
    finished = operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0]
    work(store, registry, finished)
    meanwhile, left = (operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0] for _ in range(2))
    other = operate.start(store, registry, agent_name="nightly-report", request={})[0]
    toasts: list[str] = []
    async with tui(db_path, size=(80, 24), toasts=toasts) as (app, pilot):
        await pilot.press("slash", *"agent:hello", "enter")
        await pilot.pause()
        await key(pilot, "asterisk")
        assert screen_of(app).marked == {finished, meanwhile, left}
        assert "3 marked" in str(screen_of(app).query_one("#summary").content)
        await key(pilot, "x")
        modal = app.screen
        assert isinstance(modal, BulkModal) and "3 runs marked" in str(modal.query_one(".title").render())
        assert str(modal.query_one("#do-cancel").label).split() == ["Cancel", "2", "of", "3"]
        assert str(modal.query_one("#confirm").label) == "Cancel 2 runs"
        assert f"not for 1: {finished} is succeeded" in str(modal.query_one("#refused").render())
        operate.cancel_run(store, meanwhile, "from elsewhere")
        modal.query_one("#confirm").press()
        await pilot.pause()
        assert screen_of(app).marked == {finished, meanwhile}
    assert toasts[-1].splitlines()[0] == "cancelled 1 of 3 runs; 2 refused:"
    assert {line.split()[0] for line in toasts[-1].splitlines()[1:]} == {finished, meanwhile}
    assert [get_run(store, r)["status"] for r in (finished, meanwhile, left, other)] == [
        "succeeded", "cancelled", "cancelled", "queued"]
    assert kinds(store, meanwhile).count("cancelled") == kinds(store, left).count("cancelled") == 1
    assert [e["message"] for e in events_for(store, meanwhile) if e["kind"] == "cancelled"][0].endswith("(from elsewhere)")
    store.close()


def test_where_takes_the_tuis_filter_words(db_path, tui_agent):
    """The words `--where` takes select as the TUI's filter does: status, agent, since and until (when the run was
    made), and the other words matching the start of an id or a part of the agent or reason."""
    store = open_store(db_path)
    registry = load_registry()
    hello = [operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0] for _ in range(2)]
    report = operate.start(store, registry, agent_name="nightly-report", request={})[0]
    store.close()
    selected = {"status:queued": {*hello, report}, "agent:hello": set(hello), "night": {report}, hello[0]: {hello[0]},
                "since:1h agent:hello": set(hello), "until:1h": set(), f"since:{time.strftime('%Y-%m-%d')}":
                {*hello, report}, "status:queued agent:nightly-report": {report}}
    for words, expected in selected.items():
        dry = ok(tui_agent("park", "--where", words, "--dry-run")).stdout.splitlines()
        assert {line.strip() for line in dry[1:]} == expected, (words, dry)
    assert {run["status"] for run in json.loads(ok(tui_agent("ls", "--json")).stdout)} == {"queued"}
