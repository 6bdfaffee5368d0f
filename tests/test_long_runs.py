"""A run of 100,000 steps, built once per test session through the real runtime: what a person opens of it
reads pages, not the whole run (`show` prints its two ends, `show --json` streams in bounded memory)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from helpers import registry_of

from tui_agent import Agent, Budget
from tui_agent.operate import start
from tui_agent.runtime.clock import now
from tui_agent.runtime.worker import execute
from tui_agent.store import open_store
from tui_agent.store.runs import claim_run

pytestmark = pytest.mark.xdist_group("long-run")   # one worker builds the fixture and runs these
STEPS = 100_000
JSON_RSS_BOUND_MB = 150   # show --json's peak memory, whatever the run's length (measured: about 60 MB)


def _long(ctx, request):
    for i in range(request["steps"]):
        ctx.step(f"s{i}", lambda i=i: i * 2)
    return {"steps": request["steps"]}


@pytest.fixture(scope="session")
def long_run(tmp_path_factory):
    db = tmp_path_factory.mktemp("long") / "long.db"
    store = open_store(db, durability="normal")
    registry = registry_of(Agent(name="long", run=_long, budget=Budget(steps=STEPS + 10)))
    run_id, _ = start(store, registry, "long", {"steps": STEPS})
    outcome = execute(store, registry, claim_run(store, run_id, "w-long", 600.0, now()))
    assert outcome.status == "succeeded", outcome.error
    store.close()
    return db, run_id


def cli(db, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tui_agent", "--db", str(db), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen) -> tuple[str, int]:
    """The child's output and its peak resident memory in MB (its own, from wait4)."""
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, process.stderr.read()
    return out, usage.ru_maxrss // 1024


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
    positions = [int(line.split()[0]) for line in out.splitlines() if line.startswith("  ") and " step " in line]
    assert positions == list(range(STEPS))


def test_show_json_streams_every_step_in_bounded_memory(long_run):
    db, run_id = long_run
    out, peak_mb = finished(cli(db, "show", run_id, "--json"))
    report = json.loads(out)
    assert list(report) == ["run", "checkpoint", "steps", "journal", "effects", "events", "budget", "approvals",
                            "model_calls"]
    assert [s["position"] for s in report["steps"]] == list(range(STEPS))
    assert report["journal"][STEPS - 1] == {**report["journal"][STEPS - 1], "name": f"s{STEPS - 1}",
                                            "result": (STEPS - 1) * 2}
    assert report["run"]["result"] == {"steps": STEPS}
    assert peak_mb < JSON_RSS_BOUND_MB, f"show --json peaked at {peak_mb} MB"
