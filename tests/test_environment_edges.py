"""The fault catalogue's promises at the edges (issue 36 part 7), each through the console script: on a full disk,
or under a file-size limit, a large result is exit 4 with the disk-full line, no run fails for it and nothing
partial is left."""

import json
import textwrap
from pathlib import Path

from helpers import later, ok, show_json
from test_environment import _fill, _limited, _one_line, small_disk  # noqa: F401 (a fixture)

# A step whose result (400 kB of JSON) is kept as an artifact file, then a step that reads it back.
BIG_STEP = '''
from tui_agent import Agent


def _blob(log):
    with open(log, "a") as f:
        f.write("blob\\n")
    return "x" * 400_000


def run(ctx, request):
    blob = ctx.step("blob", _blob, request["log"])
    return {"size": ctx.step("size", len, blob)}


BIG = Agent(name="big", run=run)
'''

def _files(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def _limit(size: int) -> dict:
    """For `_limited`: a file-size limit for the command (a fresh dict each time: `_limited` takes it out)."""
    return {"TUI_AGENT_TEST_FSIZE": str(size)}


# -- a full disk ---------------------------------------------------------------------------------


def test_fork_edit_of_a_large_result_on_a_full_disk_is_one_line_and_leaves_nothing_partial(tui_agent, small_disk,
                                                                                          tmp_path):
    folder, mounted = small_disk
    db = folder / "runs.db"
    run_id = ok(tui_agent("--db", str(db), "run", "hello")).stdout.split()[0]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps("x" * 200_000))   # over 32 KiB: kept as an artifact file
    runs = json.loads(tui_agent("--db", str(db), "ls", "--json").stdout)
    files = _files(folder / "runs.data")
    fork = ("--db", str(db), "fork", run_id, "--edit", "0", "--result", f"@{edited}")
    if mounted:
        filler, env = _fill(folder, leave=48 * 1024), {}
    else:
        filler, env = None, _limit(db.stat().st_size + 48 * 1024)
    line = _one_line(_limited(tui_agent, env, *fork))
    assert "disk is full" in line and f"{folder / 'runs.data' / 'artifacts'}" in line, line
    assert _files(folder / "runs.data") == files   # no partial .tmp, no folder made for it
    assert json.loads(tui_agent("--db", str(db), "ls", "--json").stdout) == runs
    if filler:
        filler.unlink()
    new = ok(tui_agent(*fork)).stdout.strip()
    assert show_json(tui_agent, new, "--db", str(db))["run"]["parent_id"] == run_id


def test_a_large_step_result_under_a_file_size_limit_keeps_the_run_resumable(tui_agent, tmp_path, db_path):
    agents = tmp_path / "big_agents.py"
    agents.write_text(textwrap.dedent(BIG_STEP))
    log = tmp_path / "calls.log"
    run_id = ok(tui_agent("--agents", str(agents), "start", "big", "--input",
                          json.dumps({"log": str(log)}))).stdout.strip()
    line = _one_line(_limited(tui_agent, _limit(db_path.stat().st_size + 128 * 1024), "--agents", str(agents),
                              "worker", "--once"))
    assert "disk is full" in line and str(db_path.with_name("runs.data") / "artifacts" / run_id) in line, line
    report = show_json(tui_agent, run_id, "--agents", str(agents))
    assert report["run"]["status"] == "running", report["events"][-3:]   # not failed: its lease runs out
    assert report["journal"] == []
    assert not list((db_path.with_name("runs.data") / "artifacts").rglob("*.tmp"))

    ok(tui_agent("--agents", str(agents), "worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    report = show_json(tui_agent, run_id, "--agents", str(agents))
    assert (report["run"]["status"], report["run"]["result"]) == ("succeeded", {"size": 400_000}), report["events"]
