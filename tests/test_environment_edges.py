"""The fault catalogue's promises at the edges (issue 36 part 7), each through the console script: on a full disk
reads keep working, a write is exit 4 with the disk-full line, no run fails for it and nothing partial is left; a
read-only folder keeps reads working; a file another program holds with locking_mode=EXCLUSIVE is busy (exit
4)."""

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from helpers import dump, later, ok, show_json
from test_doctor import damage, sha256
from test_environment import _fill, _limited, _one_line, _read_only, _writable, small_disk  # noqa: F401 (a fixture)

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

# Another program that takes the file with locking_mode=EXCLUSIVE and keeps it until its stdin closes.
HOLDER = '''
import sqlite3
import sys

conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("COMMIT")
print("held", flush=True)
sys.stdin.read()
'''


def _files(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def _limit(size: int) -> dict:
    """For `_limited`: a file-size limit for the command (a fresh dict each time: `_limited` takes it out)."""
    return {"TUI_AGENT_TEST_FSIZE": str(size)}


# -- a full disk ---------------------------------------------------------------------------------


def test_on_a_full_disk_reads_keep_working_and_doctor_says_full_not_damaged(tui_agent, small_disk):
    """A disk with no room at all: SQLite cannot make the -shm a reader needs beside the file (where there is no
    tmpfs to fill, a file-size limit refuses it the same way)."""
    folder, mounted = small_disk
    db = folder / "runs.db"
    done = ok(tui_agent("--db", str(db), "run", "hello"))
    run_id = done.stdout.split()[0]
    queued = ok(tui_agent("--db", str(db), "start", "hello")).stdout.strip()
    before = dump(db)
    filler = _fill(folder, leave=0) if mounted else None
    size = 0 if mounted else 1024

    def command(*args: str):
        return _limited(tui_agent, _limit(size) if size else {}, "--db", str(db), *args)

    listed = ok(command("ls"))
    assert run_id in listed.stdout and queued in listed.stdout
    assert json.loads(ok(command("show", run_id, "--json")).stdout)["run"]["status"] == "succeeded"
    assert [w["state"] for w in json.loads(ok(command("workers", "--all", "--json")).stdout)] == ["stopped"]
    line = _one_line(command("start", "hello"))
    assert "could not be written" in line and "disk is full" in line, line

    found = json.loads(command("doctor", "--json").stdout)
    checks = {c["name"]: c for c in found["checks"]}
    assert not [c for c in found["checks"] if "damaged" in c["detail"]], found
    assert [name for name, c in checks.items() if not c["ok"]] == (["disk"] if mounted else []), found
    assert not [c for c in found["checks"] if c["advice"] and "sqlite3" in c["advice"]], found
    if filler:
        filler.unlink()
    assert dump(db) == before

    if mounted:   # a damaged file on a full disk: recovering it starts with making room for the copy
        damage(db, "runs")
        _fill(folder, leave=0)
        advice = {c["name"]: c for c in json.loads(tui_agent("--db", str(db), "doctor", "--json").stdout)["checks"]
                  }["integrity"]["advice"]
        assert advice.index("free space there first") < advice.index("1) Stop"), advice


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


# -- a read-only folder, a lock kept by another program --------------------------------------------


def test_in_a_read_only_folder_reads_keep_working_and_writes_are_exit_4(tui_agent, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    db = folder / "runs.db"
    run_id = ok(tui_agent("--db", str(db), "run", "hello")).stdout.split()[0]
    before = sha256(db)
    assert sorted(os.listdir(folder)) == ["runs.data", "runs.db"]   # no -wal or -shm: a reader must make them
    _read_only(folder)
    try:
        assert run_id in ok(tui_agent("--db", str(db), "ls")).stdout
        assert show_json(tui_agent, run_id, "--db", str(db))["run"]["status"] == "succeeded"
        ok(tui_agent("--db", str(db), "workers", "--all"))
        for args in (["start", "hello"], ["cancel", run_id]):
            line = _one_line(tui_agent("--db", str(db), *args))
            assert f"{db} is read-only" in line, line
        found = json.loads(tui_agent("--db", str(db), "doctor", "--json").stdout)
        assert [c["name"] for c in found["checks"] if not c["ok"]] == ["permissions"], found
        assert sorted(os.listdir(folder)) == ["runs.data", "runs.db"]
    finally:
        _writable(folder)
    assert sha256(db) == before


def test_a_file_another_program_keeps_with_locking_mode_exclusive_is_busy_exit_4(tui_agent, db_path):
    run_id = ok(tui_agent("run", "hello")).stdout.split()[0]
    before = dump(db_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        commands = [["ls"], ["show", run_id], ["start", "hello"], ["worker", "--once"]]
        with ThreadPoolExecutor(len(commands)) as pool:   # each waits out the busy timeout: all at once
            for args, done in zip(commands, pool.map(lambda args: tui_agent(*args), commands)):
                line = _one_line(done)
                assert f"{db_path} is busy" in line and "locking_mode=EXCLUSIVE" in line, (args, line)
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert run_id in ok(tui_agent("ls")).stdout
    assert dump(db_path) == before
