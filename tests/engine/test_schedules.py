"""Schedules: fires computed in the schedule's zone across daylight saving, missed fires after the
machine was off, overlapping runs, exactly one run per fire across processes."""

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from helpers import ROOT, registry_of, work

from tui_agent import Agent, Budget, operate
from tui_agent.errors import UserError
from tui_agent.runtime.clock import CLOCK, iso, parse_instant
from tui_agent.runtime.registry import load_registry
from tui_agent.runtime.schedule import fires, tick
from tui_agent.store import schedules as table
from tui_agent.store.runs import claim_run, get_run, list_runs

NY = "America/New_York"


def utc(text):
    return parse_instant(text)


@pytest.fixture
def registry():
    # a run here may be "still running a day later" (the overlap tests): more than the default 24 h of running time
    return registry_of(Agent(name="job", run=lambda ctx, r: {"ok": ctx.step("do", lambda: 1)},
                             budget=Budget(wall_s=7 * 86400)))


def _events(store, name):
    return [e["message"] for e in store.query("SELECT message FROM events WHERE schedule = ? ORDER BY id", (name,))]


def _runs(store):
    return sorted(list_runs(store), key=lambda r: r["created_at"])


def _keys(store):
    return [r[0] for r in store.conn.execute("SELECT run_key FROM runs ORDER BY created_at, run_key")]


# -- when fires happen ------------------------------------------------------------------------

def test_a_daily_fire_in_a_zone_neither_skips_nor_doubles_across_daylight_saving():
    # New York falls back on 2026-11-01: 01:30 happens twice. It springs forward on 2026-03-08: 02:30 never happens.
    fall = [iso(t) for t in fires("30 1 * * *", NY, utc("2026-10-30T00:00:00Z"), utc("2026-11-03T00:00:00Z"))]
    assert fall == ["2026-10-30T05:30:00.000Z", "2026-10-31T05:30:00.000Z",
                    "2026-11-01T05:30:00.000Z",          # the first 01:30 (EDT), not the second (06:30Z)
                    "2026-11-02T06:30:00.000Z"]
    spring = [iso(t) for t in fires("30 2 * * *", NY, utc("2026-03-06T12:00:00Z"), utc("2026-03-10T12:00:00Z"))]
    assert spring == ["2026-03-07T07:30:00.000Z",
                      "2026-03-08T07:00:00.000Z",        # 02:30 does not exist: the first instant after the gap
                      "2026-03-09T06:30:00.000Z", "2026-03-10T06:30:00.000Z"]


def test_fires_inside_a_gap_collapse_into_one():
    got = list(fires("*/15 2 * * *", NY, utc("2026-03-08T05:00:00Z"), utc("2026-03-08T08:00:00Z")))
    assert [iso(t) for t in got] == ["2026-03-08T07:00:00.000Z"]


def test_bad_cron_or_zone_is_a_usage_error(store, registry):
    with pytest.raises(UserError, match="not a cron expression"):
        operate.schedule_add(store, registry, name="x", agent="job", cron="every night")
    with pytest.raises(UserError, match="not a time zone"):
        operate.schedule_add(store, registry, name="x", agent="job", cron="0 2 * * *", tz="Mars/Olympus")
    with pytest.raises(UserError, match="no agent named"):
        operate.schedule_add(store, registry, name="x", agent="nope", cron="0 2 * * *")


@pytest.mark.parametrize("cron, words", [
    ("0 25 * * *", "its hour, 25, is not 0-23"),
    ("61 2 * * *", "its minute, 61, is not 0-59"),
    ("0 2 * 13 *", "its month, 13, is not 1-12 or jan-dec"),
    ("0 2 * * funday", "its day-of-week, funday, is not 0-7 or sun-sat"),
])
def test_five_fields_with_one_out_of_range_name_that_field(store, registry, cron, words):
    with pytest.raises(UserError) as refused:
        operate.schedule_add(store, registry, name="x", agent="job", cron=cron)
    assert str(refused.value).startswith(f"--cron {cron!r}: {words} (the five fields: minute hour"), refused.value


# -- missed fires -------------------------------------------------------------------------------

@pytest.mark.parametrize("policy, expected", [
    ("skip", []),
    ("once", ["2026-11-28T02:00:00.000Z"]),
    ("all", ["2026-11-26T02:00:00.000Z", "2026-11-27T02:00:00.000Z", "2026-11-28T02:00:00.000Z"]),
])
def test_three_days_down(store, registry, clock, policy, expected):
    clock.set(utc("2026-11-25T12:00:00Z"))
    operate.schedule_add(store, registry, name="nightly", agent="job", cron="0 2 * * *", missed=policy, overlap="allow")
    clock.set(utc("2026-11-28T09:00:00Z"))            # the laptop was off for three nights
    tick(store, registry)
    assert _keys(store) == [f"schedule:nightly:{at}" for at in expected]
    if policy == "skip":
        assert _events(store, "nightly") == [
            "3 missed fires skipped (from 2026-11-26T02:00:00.000Z to 2026-11-28T02:00:00.000Z; missed=skip)"]
    clock.set(utc("2026-11-28T09:05:00Z"))
    assert tick(store, registry) == [], "a second tick fires nothing more"


def test_an_on_time_fire_is_not_missed_and_fires_before_adding_never_count(store, registry, clock):
    clock.set(utc("2026-11-28T02:30:00Z"))
    operate.schedule_add(store, registry, name="nightly", agent="job", cron="0 2 * * *", missed="all")
    clock.set(utc("2026-11-29T02:10:00Z"))             # 10 minutes late: inside the 15-minute grace
    tick(store, registry)
    assert _keys(store) == ["schedule:nightly:2026-11-29T02:00:00.000Z"]


def test_fires_while_disabled_never_count(store, registry, clock):
    clock.set(utc("2026-11-20T12:00:00Z"))
    operate.schedule_add(store, registry, name="nightly", agent="job", cron="0 2 * * *", missed="all", overlap="allow")
    operate.schedule_enable(store, "nightly", False)
    clock.set(utc("2026-11-25T12:00:00Z"))
    assert tick(store, registry, ["nightly"]) == []
    operate.schedule_enable(store, "nightly", True)
    clock.set(utc("2026-11-27T03:00:00Z"))
    tick(store, registry)
    assert _keys(store) == ["schedule:nightly:2026-11-26T02:00:00.000Z", "schedule:nightly:2026-11-27T02:00:00.000Z"]


# -- overlapping runs -------------------------------------------------------------------------

def _with_previous_running(store, registry, clock, overlap):
    clock.set(utc("2026-11-27T12:00:00Z"))
    operate.schedule_add(store, registry, name="nightly", agent="job", cron="0 2 * * *", overlap=overlap)
    clock.set(utc("2026-11-28T02:01:00Z"))
    (first,) = tick(store, registry)
    claim = claim_run(store, first, "w-1", 3 * 86400, CLOCK.now())   # still running a day later
    clock.set(utc("2026-11-29T02:01:00Z"))
    return first, claim, tick(store, registry)


def test_overlap_skip_drops_the_fire(store, registry, clock):
    first, _, started = _with_previous_running(store, registry, clock, "skip")
    assert started == []
    assert len(_runs(store)) == 1
    assert _events(store, "nightly")[-1] == (f"the fire at 2026-11-29T02:00:00.000Z skipped: previous run {first} "
                                              "is running")


def test_overlap_allow_starts_it(store, registry, clock):
    _, _, started = _with_previous_running(store, registry, clock, "allow")
    assert len(started) == 1
    assert len(_runs(store)) == 2


def test_overlap_wait_starts_the_pending_fire_once_the_previous_run_finishes(store, registry, clock):
    first, claim, started = _with_previous_running(store, registry, clock, "wait")
    assert started == []
    with store.write() as conn:
        assert table.get(conn, "nightly")["pending_fire_at"] == utc("2026-11-29T02:00:00Z")
    clock.set(utc("2026-11-29T02:10:00Z"))
    assert tick(store, registry, ["nightly"]) == [], "still running: it keeps waiting"
    from tui_agent.runtime.worker import execute
    assert execute(store, registry, claim=claim).status == "succeeded"
    clock.set(utc("2026-11-29T02:20:00Z"))
    (second,) = tick(store, registry)
    assert get_run(store, second)["run_key"] == "schedule:nightly:2026-11-29T02:00:00.000Z"
    assert tick(store, registry, ["nightly"]) == [], "the pending fire starts once"


def test_a_previous_run_waiting_for_a_person_raises_a_needs_a_person_event(store, registry, clock):
    clock.set(utc("2026-11-27T12:00:00Z"))
    operate.schedule_add(store, registry, name="nightly", agent="job", cron="0 2 * * *", overlap="skip")
    clock.set(utc("2026-11-28T02:01:00Z"))
    (first,) = tick(store, registry)
    operate.park(store, first)
    clock.set(utc("2026-11-29T02:01:00Z"))
    tick(store, registry)
    assert _events(store, "nightly")[-1] == (f"needs a person: the fire at 2026-11-29T02:00:00.000Z is held back "
                                              f"because previous run {first} is parked: person")


def test_fire_by_hand_goes_through_the_overlap_policy(store, registry, clock):
    clock.set(utc("2026-11-27T12:00:00Z"))
    operate.schedule_add(store, registry, name="nightly", agent="job", cron="0 2 * * *", overlap="skip")
    (first,) = operate.schedule_fire(store, registry, "nightly").started
    held = operate.schedule_fire(store, registry, "nightly")
    assert held.started == [], "the first is still queued"
    assert (held.held_by, held.held_status) == (first, "queued"), "the first is still queued"
    assert str(held) == f"nightly: skipped because {first} is queued (overlap=skip)"
    work(store, registry, first)
    assert len(operate.schedule_fire(store, registry, "nightly").started) == 1


@pytest.mark.parametrize("overlap", ["skip", "wait"])
def test_schedule_fire_says_what_happened(invoke, overlap):
    """`schedule fire` held back by the overlap policy used to print nothing and exit 0."""
    assert invoke("schedule", "add", "nightly", "--agent", "hello", "--cron", "0 2 * * *",
                  "--overlap", overlap).exit_code == 0
    first = invoke("schedule", "fire", "nightly")
    assert first.exit_code == 0
    run_id = first.stdout.strip()                       # stdout stays the id of each run started
    assert run_id.startswith("r-")
    assert first.stderr.strip() == f"nightly: started {run_id}"
    again = invoke("schedule", "fire", "nightly")
    assert again.exit_code == 0
    assert again.stdout == ""
    assert again.stderr.strip() == {
        "skip": f"nightly: skipped because {run_id} is queued (overlap=skip)",
        "wait": f"nightly: held until {run_id} ends (overlap=wait: it starts then)"}[overlap]


# -- across processes -------------------------------------------------------------------------

def test_two_ticks_at_one_fire_instant_start_one_run(store, clock):
    clock.set(utc("2026-11-27T12:00:00Z"))
    operate.schedule_add(store, load_registry(), name="nightly", agent="hello", cron="0 2 * * *",
                         request={"delay_s": 0})
    env = {"TUI_AGENT_NOW": "2026-11-28T02:00:30Z"}
    cmd = [sys.executable, "-m", "tui_agent", "tick"]
    ticks = [subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [t.communicate(timeout=60) for t in ticks]
    assert [t.returncode for t in ticks] == [0, 0], outputs
    assert _keys(store) == ["schedule:nightly:2026-11-28T02:00:00.000Z"]
    assert sum(err.count("started r-") for _, err in outputs) == 1


def test_tick_work_finishes_a_run_whose_sleep_ended(tui_agent, tmp_path):
    log = tmp_path / "log"
    done = tui_agent("--agents", "counting_agents", "run", "sleepy", "--input", json.dumps({"log": str(log)}))
    assert done.returncode == 3
    run_id = done.stdout.split()[0]
    later = datetime.now(UTC).replace(microsecond=0).timestamp() + 2 * 3600
    woke = tui_agent("--agents", "counting_agents", "tick", "--work", env={"TUI_AGENT_NOW": iso(later)})
    assert woke.returncode == 0, woke.stderr
    report = json.loads(tui_agent("--agents", "counting_agents", "show", run_id, "--json").stdout)
    assert report["run"]["status"] == "succeeded"
    assert log.read_text().split() == ["before", "after"]


def test_schedule_ls_json_shows_the_next_fire_in_the_zone(invoke, clock):
    clock.set(utc("2026-11-29T12:00:00Z"))
    assert invoke("schedule", "add", "nightly", "--agent", "nightly-report", "--cron", "0 2 * * *",
                  "--tz", "Europe/Berlin").exit_code == 0
    (row,) = json.loads(invoke("schedule", "ls", "--json").stdout)
    assert row["next_fire"] == "2026-11-30T02:00:00+01:00"
    assert row["missed"] == "once"
    assert row["enabled"]
    assert invoke("schedule", "rm", "nightly").exit_code == 0
    assert json.loads(invoke("schedule", "ls", "--json").stdout) == []
