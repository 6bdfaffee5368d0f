"""The fault catalogue's promises at the edges (issue 36 part 7), each through the console script: a damaged page
anywhere is refused before the first write of every command that writes, and the file is checked once per state
of it, not before every command; on a full disk reads keep working, a write is exit 4 with the disk-full line, no
run fails for it and nothing partial is left; a read-only folder keeps reads working; a file another program
holds with locking_mode=EXCLUSIVE is busy (exit 4); a copy that fails leaves no target behind."""

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

from disks import damage, fill, limited, one_line, quick_check_fails, read_only, sha256, writable
from helpers import dump, later, ok, show_json

from tui_agent.store.integrity import VERDICT

# Logs every quick_check any connection of the process runs: the count says how often a command read every page.
TRACER = '''
import os
import sqlite3

_connect = sqlite3.connect


def _note(statement):
    if "quick_check" in statement:
        with open(os.environ["QUICK_CHECK_LOG"], "a") as log:
            log.write(statement + "\\n")


def connect(*args, **kwargs):
    conn = _connect(*args, **kwargs)
    conn.set_trace_callback(_note)
    return conn


sqlite3.connect = connect
'''

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
    return {p for p in folder.rglob("*") if p.name != VERDICT}


def _limit(size: int) -> dict:
    """For `limited`: a file-size limit for the command (a fresh dict each time: `limited` takes it out)."""
    return {"TUI_AGENT_TEST_FSIZE": str(size)}


# -- a damaged page ------------------------------------------------------------------------------


def test_a_damaged_page_past_the_header_is_refused_before_every_write_and_the_file_is_unchanged(tui_agent, db_path):
    """The effects table's page: not read by start, run or schedule add, which used to write around it."""
    for _ in range(2):
        ok(tui_agent("run", "hello"))
    queued = ok(tui_agent("start", "hello")).stdout.strip()
    damage(db_path, "effects", offset=0)
    assert quick_check_fails(db_path)
    before = sha256(db_path)
    for args in (["start", "hello"], ["run", "hello"],
                 ["schedule", "add", "nightly", "--agent", "hello", "--cron", "0 2 * * *"],
                 ["cancel", queued], ["fork", queued, "--from-step", "0"], ["worker", "--once"]):
        line = one_line(tui_agent(*args))
        assert f"{db_path} is damaged (quick_check: " in line, (args, line)
        assert "tui-agent doctor" in line, line
        assert sha256(db_path) == before, args


def test_the_file_is_checked_once_per_state_and_again_after_a_write_error(tui_agent, tmp_path, db_path,
                                                                         monkeypatch):
    """Counted: every quick_check any command runs is logged (a sitecustomize wraps sqlite3.connect)."""
    tracer = tmp_path / "tracer"
    tracer.mkdir()
    (tracer / "sitecustomize.py").write_text(TRACER)
    log = tmp_path / "quick_checks.log"
    monkeypatch.setenv("PYTHONPATH", f"{tracer}{os.pathsep}{os.environ['PYTHONPATH']}")
    monkeypatch.setenv("QUICK_CHECK_LOG", str(log))

    def checks() -> int:
        return len(log.read_text().splitlines()) if log.exists() else 0

    queued = ok(tui_agent("start", "hello")).stdout.strip()
    assert checks() == 1   # the new file, before its first write
    for args in (["start", "hello"], ["cancel", queued], ["run", "hello"], ["ls"], ["worker", "--once"],
                 ["schedule", "add", "nightly", "--agent", "hello", "--cron", "0 2 * * *"]):
        ok(tui_agent(*args))
        assert checks() == 1, (args, "each writer left the file in a state it knew to be intact")

    with closing(sqlite3.connect(db_path)) as conn, conn:   # another program writes: a state no verdict is for
        conn.execute("UPDATE runs SET updated_at = updated_at + 1")
    ok(tui_agent("start", "hello"))
    assert checks() == 2
    ok(tui_agent("start", "hello"))
    assert checks() == 2

    # a write that fails (its WAL outgrows a file-size limit) forgets the verdict: the next writer checks again
    line = one_line(limited(tui_agent, _limit(64 * 1024), "start", "hello", "--input",
                              json.dumps({"name": "x" * 100_000})))
    assert "disk is full" in line, line
    assert checks() == 2, "the state it met was known"
    ok(tui_agent("start", "hello"))
    assert checks() == 3


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
    filler = fill(folder, leave=0) if mounted else None
    size = 0 if mounted else 1024

    def command(*args: str):
        return limited(tui_agent, _limit(size) if size else {}, "--db", str(db), *args)

    listed = ok(command("ls"))
    assert run_id in listed.stdout and queued in listed.stdout
    assert json.loads(ok(command("show", run_id, "--json")).stdout)["run"]["status"] == "succeeded"
    assert [w["state"] for w in json.loads(ok(command("workers", "--all", "--json")).stdout)] == ["stopped"]
    line = one_line(command("start", "hello"))
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
        fill(folder, leave=0)
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
        filler, env = fill(folder, leave=48 * 1024), {}
    else:
        filler, env = None, _limit(db.stat().st_size + 48 * 1024)
    line = one_line(limited(tui_agent, env, *fork))
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
    line = one_line(limited(tui_agent, _limit(db_path.stat().st_size + 128 * 1024), "--agents", str(agents),
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
    read_only(folder)
    try:
        assert run_id in ok(tui_agent("--db", str(db), "ls")).stdout
        assert show_json(tui_agent, run_id, "--db", str(db))["run"]["status"] == "succeeded"
        ok(tui_agent("--db", str(db), "workers", "--all"))
        for args in (["start", "hello"], ["cancel", run_id]):
            line = one_line(tui_agent("--db", str(db), *args))
            assert f"{db} is read-only" in line, line
        found = json.loads(tui_agent("--db", str(db), "doctor", "--json").stdout)
        assert [c["name"] for c in found["checks"] if not c["ok"]] == ["permissions"], found
        assert sorted(os.listdir(folder)) == ["runs.data", "runs.db"]
    finally:
        writable(folder)
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
                line = one_line(done)
                assert f"{db_path} is busy" in line and "locking_mode=EXCLUSIVE" in line, (args, line)
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert run_id in ok(tui_agent("ls")).stdout
    assert dump(db_path) == before


# -- copy ------------------------------------------------------------------------------------------


def test_a_copy_refused_or_failing_halfway_leaves_no_target(tui_agent, tmp_path, small_disk):
    source = tmp_path / "source.db"
    run_id = ok(tui_agent("--db", str(source), "run", "hello")).stdout.split()[0]
    damaged = tmp_path / "damaged.db"
    ok(tui_agent("--db", str(damaged), "run", "hello"))
    damage(damaged, "effects", offset=0)
    target = tmp_path / "copy.db"
    line = one_line(tui_agent("copy", "--from", str(damaged), "--to", str(target)))
    assert f"{damaged} is damaged" in line, line
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("copy")) == []

    # the source is fine, the target's disk has no room for an artifact of 3 MB: the copy fails halfway
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps("x" * 3_000_000))
    ok(tui_agent("--db", str(source), "fork", run_id, "--edit", "0", "--result", f"@{edited}"))
    folder, mounted = small_disk
    target = folder / "copy.db"
    line = one_line(limited(tui_agent, {} if mounted else _limit(1024 * 1024), "copy", "--from", str(source),
                              "--to", str(target)))
    assert "disk is full" in line, line
    assert list(folder.iterdir()) == []
    assert "copied 2 runs" in ok(tui_agent("copy", "--from", str(source), "--to", str(tmp_path / "copy.db"))).stdout
