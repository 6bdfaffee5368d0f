"""A run of 100,000 steps, built once per test session through the real runtime: what a person opens of it
reads pages, not the whole run (the run screen reads one page to open and one per jump, `show` prints its two
ends, `show --json` streams in bounded memory)."""

import json
import subprocess
import sys

import pytest
from helpers import ROOT, open_run, registry_of, tui

from tui_agent import Agent, Budget, report
from tui_agent.operate import approve, start
from tui_agent.runtime.clock import now
from tui_agent.runtime.worker import execute
from tui_agent.screens.run import PAGE
from tui_agent.store import open_store
from tui_agent.store.journal import journal_page
from tui_agent.store.runs import claim_run
from tui_agent.widgets.timeline import Timeline

pytestmark = pytest.mark.xdist_group("long-run")   # one worker builds the fixture and runs these
STEPS = 100_000
JSON_RSS_BOUND_MB = 150   # show --json's peak memory, whatever the run's length (measured: about 35 MB)


ASKED_AT = 40_000         # a question a person answered
SOFT_AT = 70_006          # where 70% of the step ceiling (STEPS + 10) was crossed: the 70,007th step


def _long(ctx, request):
    for i in range(request["steps"]):
        if i == ASKED_AT:
            ctx.approval("go on", "go on past the middle?")
        else:
            ctx.step(f"s{i}", lambda i=i: i * 2)
    return {"steps": request["steps"]}


@pytest.fixture(scope="session")
def long_run(tmp_path_factory):
    db = tmp_path_factory.mktemp("long") / "long.db"
    store = open_store(db, durability="normal")
    registry = registry_of(Agent(name="long", run=_long, budget=Budget(steps=STEPS + 10)))
    run_id, _ = start(store, registry, agent_name="long", request={"steps": STEPS})
    outcome = execute(store, registry, claim=claim_run(store, run_id, "w-long", 600.0, now()))
    assert outcome.status == "waiting", outcome.error
    approve(store, run_id)
    outcome = execute(store, registry, claim=claim_run(store, run_id, "w-long", 600.0, now()))
    assert outcome.status == "succeeded", outcome.error
    store.close()
    return db, run_id


@pytest.fixture
def journal_reads(monkeypatch):
    """The journal rows the run screen reads, page by page (it reads the journal only through
    report.timeline_page, which reads through journal_page)."""
    pages: list[int] = []

    def counted(*args, **kwargs):
        rows = journal_page(*args, **kwargs)
        pages.append(len(rows))
        return rows

    monkeypatch.setattr(report, "journal_page", counted)
    return pages


def _positions(app) -> tuple[int | None, int, int]:
    """(the selected position, the first and the last position held)."""
    items = app.screen.query_one(Timeline).items
    selected = app.screen.query_one(Timeline).selected
    return selected.position if selected else None, items[0].position, items[-1].position


async def test_the_run_screen_opens_a_long_run_reading_one_page_and_jumps_a_page_at_a_time(long_run, journal_reads):
    db, run_id = long_run
    statements: list[str] = []
    async with tui(db, size=(120, 40)) as (app, pilot):
        app.reader.conn.set_trace_callback(statements.append)
        await open_run(app, pilot, run_id)
        assert journal_reads == [PAGE]                       # the first paint: one page
        assert _positions(app) == (STEPS - 1, STEPS - PAGE, STEPS - 1)
        assert app.screen.query_one("#timeline-pane").border_title == f"Timeline · {STEPS:,} entries"
        unbounded = [s for s in statements if "FROM journal" in s and "LIMIT" not in s and "max(position)" not in s]
        assert unbounded == []                               # nothing else read the journal whole

        journal_reads.clear()
        await pilot.press("home")
        await pilot.pause()
        assert _positions(app) == (0, 0, PAGE - 1)
        await pilot.press("end")
        await pilot.pause()
        assert _positions(app)[0] == STEPS - 1
        assert journal_reads == [PAGE, PAGE]                 # a page for each jump

        journal_reads.clear()
        await pilot.press("g", *"61234", "enter")
        await pilot.pause()
        selected, first, last = _positions(app)
        assert (selected, first <= 61234 <= last, last - first + 1) == (61234, True, PAGE)
        assert sum(journal_reads) == PAGE
        assert app.screen.query_one(Timeline).selected.name == "s61234"


async def test_n_goes_to_the_question_then_the_budget_crossing_then_round_again(long_run, journal_reads):
    db, run_id = long_run
    async with tui(db, size=(120, 40)) as (app, pilot):
        await open_run(app, pilot, run_id)
        await pilot.press("home")
        seen = []
        for _ in range(3):
            await pilot.press("N")
            await pilot.pause()
            seen.append(app.screen.query_one(Timeline).selected)
        assert [(item.position, item.kind) for item in seen] == [(ASKED_AT, "approval"), (SOFT_AT, "step"),
                                                                 (ASKED_AT, "approval")]
        assert max(journal_reads) <= PAGE


async def test_moving_down_past_the_page_held_reads_the_next_one_and_holds_three_at_most(long_run, journal_reads):
    db, run_id = long_run
    async with tui(db, size=(120, 40)) as (app, pilot):
        await open_run(app, pilot, run_id)
        await pilot.press("home")
        await pilot.pause()
        journal_reads.clear()
        for _ in range(5):
            await pilot.press("pagedown", *["down"] * 40)
            await pilot.pause()
        selected, first, last = _positions(app)
        assert selected > 150                          # it moved on past the first page
        assert selected == app.screen.query_one(Timeline).highlighted + first
        assert last - first + 1 <= 3 * PAGE
        assert set(journal_reads) == {PAGE}            # each read was one page
        names = [item.name for item in app.screen.query_one(Timeline).items]
        assert names == [f"s{p}" for p in range(first, last + 1)]


def cli(db, *args: str) -> subprocess.CompletedProcess:
    """`tui-agent --db DB ARGS` run through bench/peak_rss.py, so its peak memory is its own (see there)."""
    return subprocess.run([sys.executable, str(ROOT / "bench" / "peak_rss.py"), sys.executable, "-m", "tui_agent",
                           "--db", str(db), *args], cwd=ROOT, capture_output=True, text=True)


def finished(process: subprocess.CompletedProcess) -> tuple[str, int]:
    """The command's output and its own peak resident memory in MB."""
    assert process.returncode == 0, process.stderr
    peak = process.stderr.splitlines()[-1]
    assert peak.startswith("peak_rss_kb "), process.stderr
    return process.stdout, int(peak.split()[1]) // 1024


def test_show_prints_the_two_ends_of_a_long_run_and_a_count_between(long_run):
    db, run_id = long_run
    out, _ = finished(cli(db, "show", run_id))
    steps = [line for line in out.splitlines() if line.startswith("  ") and " step " in line]
    assert [int(line.split()[0]) for line in steps] == [*range(20), *range(STEPS - 20, STEPS)]
    assert f"… {STEPS - 40:,} more steps (show {run_id} --steps all prints every one)" in out
    assert len(out.splitlines()) < 80


def test_show_steps_all_streams_every_step(long_run):
    db, run_id = long_run
    out, _ = finished(cli(db, "show", run_id, "--steps", "all"))
    positions = [int(line.split()[0]) for line in out.splitlines() if line.startswith("  ") and
                 (" step " in line or " approval " in line)]
    assert positions == list(range(STEPS))


def test_show_json_streams_every_step_in_bounded_memory(long_run):
    db, run_id = long_run
    out, peak_mb = finished(cli(db, "show", run_id, "--json"))
    report = json.loads(out)
    assert list(report) == ["run", "checkpoint", "steps", "journal", "effects", "events", "budget", "approvals",
                            "model_calls", "imported"]
    assert [s["position"] for s in report["steps"]] == list(range(STEPS))
    assert report["journal"][STEPS - 1] == {**report["journal"][STEPS - 1], "name": f"s{STEPS - 1}",
                                            "result": (STEPS - 1) * 2}
    assert report["run"]["result"] == {"steps": STEPS}
    assert peak_mb < JSON_RSS_BOUND_MB, f"show --json peaked at {peak_mb} MB"
