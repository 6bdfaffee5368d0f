"""A worker's log, through the console script and real worker processes: `worker --log FILE` writes every line it
says there, stamped; its row keeps the path, which `workers` shows; `logs WORKER` prints the file and `logs -f`
follows it until the worker stops. The workers the TUI starts log the same way."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import ROOT, stdout_ok, until

from tui_agent import operate
from tui_agent.store import open_store
from tui_agent.store.workers import workers_listing

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d ")   # the local time, with its offset


def _row(db_path: Path, name: str) -> dict | None:
    store = open_store(db_path, create=False)
    try:
        return next((w for w in workers_listing(store) if w["name"] == name), None)
    finally:
        store.close()


def test_a_worker_started_with_log_writes_its_claims_retries_and_ends_there_each_line_stamped(tui_agent, tmp_path):
    marker = tmp_path / "failed-once"
    flaky = stdout_ok(tui_agent("--agents", "log_agents", "start", "flaky", "--input",
                          json.dumps({"marker": str(marker)}))).strip()
    stranger = stdout_ok(tui_agent("--agents", "counting_agents", "start", "counting", "--input",
                             json.dumps({"log": str(tmp_path / "count.log")}))).strip()
    (tmp_path / "work").mkdir()
    # a relative FILE, from another folder: the row keeps its absolute path
    worker = subprocess.run([sys.executable, "-m", "tui_agent", "--agents", "log_agents", "worker", "--once",
                             "--name", "w-log", "--log", "w-log.log"], cwd=tmp_path / "work", capture_output=True,
                            text=True, timeout=60)
    assert worker.returncode == 4, worker.stderr   # --once left a due run of an agent it does not know
    log = tmp_path / "work" / "w-log.log"
    lines = log.read_text().splitlines()
    assert lines and all(STAMP.match(line) for line in lines), lines
    said = "\n".join(STAMP.sub("", line) for line in lines)
    assert "w-log: worker started" in lines[0] and "w-log: worker ended" in lines[-1]
    assert f"w-log claimed {flaky} (flaky, attempt 1, fence 1)" in said
    assert f"w-log: {flaky} fetch: attempt 1 failed (TemporaryError: the service said 503); next in" in said
    assert f"{flaky} succeeded (returned)" in said
    assert "w-log: 1 queued run of 'counting', which this worker does not know" in said
    assert stranger not in said   # not claimed: only said
    # the terminal still shows what it showed, unstamped
    assert f"{flaky} succeeded (returned)" in worker.stdout and not STAMP.match(worker.stdout)
    assert f"w-log claimed {flaky}" in worker.stderr
    assert _row(tmp_path / "runs.db", "w-log")["log"] == str(log)
    assert os.stat(log).st_mode & 0o777 == 0o600


def test_workers_says_where_each_worker_logs_and_logs_prints_it(tui_agent, tmp_path, database):
    log = tmp_path / "logs" / "w-a.log"
    log.parent.mkdir()
    stdout_ok(tui_agent("start", "hello", "--input", '{"delay_s": 0}'))
    stdout_ok(tui_agent("worker", "--once", "--name", "w-a", "--log", str(log)))
    stdout_ok(tui_agent("worker", "--once", "--name", "w-nolog"))
    stdout_ok(tui_agent("worker", "--once", "--name", "w-env",
                        env={"TUI_AGENT_LOG": str(tmp_path / "logs" / "env.log")}))
    table = stdout_ok(tui_agent("workers", "--all")).splitlines()
    assert table[0].split() == ["NAME", "PID", "STATE", "HEARTBEAT", "LOG", "RUNS"]
    assert any(line.startswith("w-a ") and f" {log} " in line for line in table), table
    assert any(line.startswith("w-nolog ") and " - " in line for line in table), table
    listed = {w["name"]: w for w in json.loads(stdout_ok(tui_agent("workers", "--all", "--json")))}
    assert listed["w-a"]["log"] == str(log) and listed["w-nolog"]["log"] is None
    assert listed["w-env"]["log"] == str(tmp_path / "logs" / "env.log")   # TUI_AGENT_LOG, as --log
    assert stdout_ok(tui_agent("logs", "w-a")) == log.read_text()
    assert stdout_ok(tui_agent("logs", str(listed["w-a"]["pid"]))) == log.read_text()   # by its pid, as listed
    assert "succeeded (check_passed)" in log.read_text()


def test_logs_of_an_unknown_worker_or_one_without_a_log_or_whose_log_is_gone_is_one_line_exit_2(tui_agent, tmp_path):
    log = tmp_path / "w-gone.log"
    stdout_ok(tui_agent("worker", "--once", "--name", "w-gone", "--log", str(log)))
    stdout_ok(tui_agent("worker", "--once", "--name", "w-quiet"))
    log.unlink()
    for ref, said in (("w-nobody", "no worker is named 'w-nobody'"),
                      ("w-quiet", "worker w-quiet keeps no log; start a worker with one: tui-agent worker --log FILE"),
                      ("w-gone", f"the log of worker w-gone, {log}, is gone")):
        done = tui_agent("logs", ref)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and said in done.stderr and not done.stdout, done.stderr


def test_a_log_that_cannot_be_written_or_is_the_database_is_one_line_exit_2(tui_agent, tmp_path, db_path):
    stdout_ok(tui_agent("start", "hello"))
    for given, said in ((tmp_path / "no-such-folder" / "w.log", "cannot write there (No such file or directory)"),
                        (db_path, "is the database's own file")):
        done = tui_agent("worker", "--once", "--log", str(given))
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert not (tmp_path / "no-such-folder").exists()
    assert json.loads(stdout_ok(tui_agent("ls", "--json")))[0]["status"] == "queued"   # nothing was worked


def _lines_until(proc: subprocess.Popen, wanted: str, got: list[str], timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not any(wanted in line for line in got):
        assert time.monotonic() < end, got
        line = proc.stdout.readline()
        assert line, got   # it ended before saying it
        got.append(line)


def test_logs_follow_prints_new_lines_and_ends_after_the_last_once_the_worker_stops(tui_agent, spawn, tmp_path,
                                                                                     db_path):
    log = tmp_path / "w-f.log"
    worker = spawn("worker", "--name", "w-f", "--log", str(log), label="worker")
    until("the worker's first lines", lambda: log.exists() and "working" in log.read_text())
    errors = tmp_path / "follow.err"
    with open(errors, "w") as err:
        follow = subprocess.Popen([sys.executable, "-m", "tui_agent", "logs", "-f", "w-f"], cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=err)
    try:
        got: list[str] = []
        _lines_until(follow, "working", got)
        run_id = stdout_ok(tui_agent("start", "hello", "--input", '{"delay_s": 0}')).strip()
        _lines_until(follow, f"{run_id} succeeded", got)   # a line written after `logs -f` began
        worker.send_signal(signal.SIGTERM)
        got += follow.stdout.readlines()   # to its end: it ends by itself
        assert follow.wait(timeout=30) == 0 and errors.read_text() == "", errors.read_text()
        assert "w-f: worker ended" in got[-1]
        assert "".join(got) == log.read_text()
    finally:
        if follow.poll() is None:
            follow.kill()


def test_ctrl_c_ends_logs_follow_quietly(tui_agent, spawn, tmp_path):
    log = tmp_path / "w-c.log"
    spawn("worker", "--name", "w-c", "--log", str(log), label="worker")
    until("the worker's first lines", lambda: log.exists() and "working" in log.read_text())
    errors = tmp_path / "follow.err"
    with open(errors, "w") as err:
        follow = subprocess.Popen([sys.executable, "-m", "tui_agent", "logs", "--follow", "w-c"], cwd=ROOT,
                                  text=True, stdout=subprocess.PIPE, stderr=err)
    _lines_until(follow, "working", [])
    follow.send_signal(signal.SIGINT)
    follow.stdout.read()
    assert follow.wait(timeout=30) == 0 and errors.read_text() == "", errors.read_text()


def test_the_worker_the_tui_starts_logs_through_the_same_option_and_its_row_says_where(tui_agent, tmp_path, db_path):
    stdout_ok(tui_agent("start", "hello", "--input", '{"delay_s": 0}'))
    store = open_store(db_path)
    process = operate.start_worker(store, name="w-tui", log_dir=tmp_path / "logs")
    store.close()
    try:
        log = tmp_path / "logs" / "w-tui.log"
        until("its row", lambda: (_row(db_path, "w-tui") or {}).get("log") == str(log))
        until("its run's end", lambda: "succeeded (check_passed)" in log.read_text())
    finally:
        process.terminate()
        process.wait(timeout=30)
    lines = log.read_text().splitlines()
    assert all(STAMP.match(line) for line in lines), lines   # its stdout and stderr are the log: written once
    assert len([line for line in lines if "w-tui claimed" in line]) == 1
    assert stdout_ok(tui_agent("logs", "w-tui")) == log.read_text()
