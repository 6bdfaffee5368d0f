"""`tui-agent replay` runs the agent's code on a copy of the database, in a child process with a time limit
(issue 36, item 9): what the code writes through a connection or a file of its own never reaches the database or
its data folder, and code that loops after its last journaled call is stopped, with everything it started."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import data_dir, dump, process_state, until

BIG = 40_000   # a step result past 32 KiB: kept as an artifact, which the copy must hold for the replay to read

RECORDED = '''
from tui_agent import Agent

def run(ctx, request):
    big = ctx.step("a", lambda: "x" * {big})
    return {{"size": len(big)}}

agent = Agent(name="own", run=run)
'''

# The same calls and result; between them the code writes to the database it finds (TUI_AGENT_DB, the store's
# path) through connections of its own, and to files in the data folder, its run's artifact folder and the folder
# TUI_AGENT_DATA names.
WRITES = '''
import os, sqlite3
from pathlib import Path
from tui_agent import Agent

def write(where):
    sql = "UPDATE runs SET reason = 'written', error = 'by the replayed code'"
    if str(where).startswith("postgresql://"):
        import psycopg
        with psycopg.connect(str(where)) as conn:
            conn.execute(sql)
    else:
        with sqlite3.connect(where) as conn:
            conn.execute(sql)

def run(ctx, request):
    big = ctx.step("a", lambda: "x" * {big})
    write(os.environ["TUI_AGENT_DB"])
    write(ctx._store.path)
    if os.environ.get("TUI_AGENT_DATA"):
        (Path(os.environ["TUI_AGENT_DATA"]) / "shared.txt").write_text("written on replay")
    (ctx.data_dir / "outbox").mkdir(exist_ok=True)
    (ctx.data_dir / "outbox" / "sent.eml").write_text("to: everyone")
    (ctx.artifact_dir / "a.txt").write_text("written on replay")
    return {{"size": len(big)}}

agent = Agent(name="own", run=run)
'''

# The same calls; after the last one it starts a process and loops forever, saying both pids.
LOOPS = '''
import os, subprocess
from tui_agent import Agent

def run(ctx, request):
    big = ctx.step("a", lambda: "x" * {big})
    grandchild = subprocess.Popen(["sleep", "300"])
    with open(os.environ["PIDS_AT"], "w") as pids:
        pids.write(f"{{os.getpid()}} {{grandchild.pid}}")
    while True:
        pass

agent = Agent(name="own", run=run)
'''


def _agents(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(text.format(big=BIG))
    return str(path)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _recorded(tmp_path: Path, database, tui_agent, *options: str) -> str:
    done = tui_agent("--db", str(database), *options, "--agents", _agents(tmp_path, "recorded", RECORDED), "run",
                     "own")
    assert done.returncode == 0, done.stderr
    return json.loads(tui_agent("--db", str(database), *options, "ls", "--json").stdout)[0]["id"]


@pytest.mark.parametrize("shared", [False, True], ids=["", "data"])
def test_code_that_writes_through_its_own_connection_and_files_changes_nothing(tmp_path, database, tui_agent,
                                                                               shared):
    """On SQLite, and on PostgreSQL with its artifacts in the database or (--data) in a shared folder."""
    shared_folder = tmp_path / "shared"
    options = ("--data", str(shared_folder)) if shared else ()
    run_id = _recorded(tmp_path, database, tui_agent, *options)
    folders = [data_dir(database), shared_folder]
    rows, files = dump(database), [_files(folder) for folder in folders]
    assert any("'artifacts/" in row for row in rows), "the big result is an artifact, which the copy must hold"
    tmp = tmp_path / "tmp"
    tmp.mkdir()

    def replay(*args: str):
        return tui_agent("--db", str(database), *options, "replay", run_id, *args, env={"TMPDIR": str(tmp)})

    same = replay("--agents", _agents(tmp_path, "recorded", RECORDED))
    assert (same.returncode, same.stderr) == (0, "")
    assert same.stdout == f"{run_id} own: reproduced (1 of 1 entries; the code returned the recorded result)\n"

    writes = _agents(tmp_path, "writes", WRITES)
    wrote = replay("--agents", writes)
    assert (wrote.returncode, wrote.stderr) == (1, "")
    assert wrote.stdout == (f"{run_id} own: DIVERGED at #1 (side-effect): the code wrote to the database through "
                            "a connection of its own, outside any journaled call (the replay ran on a copy, which "
                            "took the write: the database is unchanged)\n")
    shown = json.loads(replay("--agents", writes, "--json").stdout)
    assert (shown["reproduced"], shown["divergence"]["kind"]) == (False, "side-effect")

    assert dump(database) == rows, "the replayed code's own connection wrote to the database"
    assert [_files(folder) for folder in folders] == files, "the replayed code's files reached the data folder"
    assert list(tmp.iterdir()) == [], "the copy was left behind"


def test_code_that_loops_after_its_last_call_is_stopped_at_the_timeout_with_what_it_started(tmp_path, tui_agent):
    db = tmp_path / "runs.db"
    run_id = _recorded(tmp_path, db, tui_agent)
    rows, files = dump(db), _files(data_dir(db))
    tmp, pids = tmp_path / "tmp", tmp_path / "pids"
    tmp.mkdir()

    began = time.monotonic()
    stopped = tui_agent("--db", str(db), "replay", run_id, "--agents", _agents(tmp_path, "loops", LOOPS),
                        "--timeout", "2", env={"TMPDIR": str(tmp), "PIDS_AT": str(pids)}, timeout=30)
    took = time.monotonic() - began
    assert stopped.returncode == 1, stopped.stderr
    assert stopped.stdout == ""
    assert stopped.stderr.count("\n") == 1 and stopped.stderr.startswith(
        f"tui-agent: replay of {run_id} did not finish within 2 s: "), stopped.stderr
    assert 2 <= took < 20, took
    for pid in map(int, pids.read_text().split()):   # the child, and the process the agent's code started
        assert not Path(f"/proc/{pid}").exists() or process_state(pid) == "Z", f"process {pid} was left running"
    assert dump(db) == rows and _files(data_dir(db)) == files
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("given", ["0", "86401", "9" * 5000, "nan"], ids=["zero", "past-a-day", "digits", "nan"])
def test_a_timeout_out_of_range_is_one_line_exit_2(tmp_path, tui_agent, given):
    bad = tui_agent("--db", str(tmp_path / "runs.db"), "replay", "r-1", "--timeout", given)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--timeout" in bad.stderr, bad.stderr


def test_a_copy_that_does_not_fit_in_tmpdir_is_one_line_exit_4_and_leaves_nothing(tmp_path, tui_agent):
    """A file-size limit on the command, below the database's size: the copy meets it as a full disk would."""
    db = tmp_path / "runs.db"
    run_id = _recorded(tmp_path, db, tui_agent)
    rows, tmp = dump(db), tmp_path / "tmp"
    tmp.mkdir()
    limit = db.stat().st_size // 2

    def capped():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    full = subprocess.run([sys.executable, "-m", "tui_agent", "--db", str(db), "replay", run_id, "--agents",
                           _agents(tmp_path, "recorded", RECORDED)], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(tmp)}, preexec_fn=capped, timeout=60)
    assert (full.returncode, full.stdout) == (4, ""), full.stderr
    assert full.stderr.count("\n") == 1 and full.stderr.startswith(
        f"tui-agent: cannot make the replay's copy of the database in {tmp} ("), full.stderr
    assert "the database is unchanged; free space there, or point TMPDIR at another folder" in full.stderr
    assert dump(db) == rows and list(tmp.iterdir()) == []


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_replay_takes_its_child_and_copy_along(tmp_path, tui_agent, how):
    db = tmp_path / "runs.db"
    run_id = _recorded(tmp_path, db, tui_agent)
    tmp, pids = tmp_path / "tmp", tmp_path / "pids"
    tmp.mkdir()
    command = [sys.executable, "-m", "tui_agent", "--db", str(db), "replay", run_id, "--agents",
               _agents(tmp_path, "loops", LOOPS)]
    replay = subprocess.Popen(command, env={**os.environ, "TMPDIR": str(tmp), "PIDS_AT": str(pids)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until("the replayed code to loop", lambda: pids.exists() and len(pids.read_text().split()) == 2)
        replay.send_signal(how)
        _, err = replay.communicate(timeout=20)
    finally:
        replay.kill()
    assert replay.returncode == (130 if how == signal.SIGINT else 128 + signal.SIGTERM), err
    for pid in map(int, pids.read_text().split()):
        assert not Path(f"/proc/{pid}").exists() or process_state(pid) == "Z", f"process {pid} was left running"
    assert list(tmp.iterdir()) == []
