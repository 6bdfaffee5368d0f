"""The bad-input catalogue (docs/reliability.md, "When input or the environment is bad"): for each kind of
bad input or bad environment, the exit code, the one line that says so, and what is proved not lost or
changed. Rows that other files already prove are linked from the table; the rest are proved here, through real
CLI processes. The last test keeps the table honest: every test it names exists."""

from __future__ import annotations

import ast
import json
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_messages import error_body, message
from helpers import ROOT, dump, start_and_work

from tui_agent.operate import approve, start
from tui_agent.report import run_report
from tui_agent.runtime.registry import load_registry
from tui_agent.store import open_store, schema


def _one_line(done: subprocess.CompletedProcess, code: int) -> str:
    """The command exited `code` with exactly one line on stderr, `tui-agent: ...`, and no traceback."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tui-agent: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


def _one_run(db: Path, agent: str = "hello", request: dict | None = None, modules: list[str] = ()) -> str:
    """A run worked to its end (or its wait) in this process, which is faster than a CLI process: its id."""
    store = open_store(db)
    try:
        return start_and_work(store, load_registry(modules), agent, request or {"delay_s": 0}).run_id
    finally:
        store.close()


def _report(db: Path, run_id: str) -> dict:
    """What `show RUN --json` prints, read in this process."""
    store = open_store(db)
    try:
        return run_report(store, run_id)
    finally:
        store.close()


def _runs(db: Path) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT id, status, reason FROM runs ORDER BY id").fetchall()
    finally:
        conn.close()


# -- input the user typed ------------------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    pytest.param(["run", "hello", "--input", "{not json"], "--input is not valid JSON", id="malformed-json"),
    pytest.param(["start", "hello", "--input", '{"name": NaN}'], "not a finite number", id="nan"),
    pytest.param(["start", "hello", "--input", '{"n": [1e999, -Infinity]}'], "not a finite number", id="infinity"),
    pytest.param(["run", "nope"], "no agent named 'nope'", id="unknown-agent"),
])
def test_bad_input_is_one_line_exit_2_and_stores_nothing(tui_agent, db_path, args, words):
    _one_run(db_path)
    before = dump(db_path)
    line = _one_line(tui_agent(*args), 2)
    assert words in line, line
    assert dump(db_path) == before
    assert len(_runs(db_path)) == 1


@pytest.mark.parametrize("source, words", [
    pytest.param("import json\n\nSETTINGS = json.loads('{}')\nBROKEN = undefined_name + 1\n",
                 "raised NameError: name 'undefined_name' is not defined at raising_agents.py:4 in <module>",
                 id="raises"),
    pytest.param("def agent(:\n", "raised SyntaxError: invalid syntax (raising_agents.py, line 1)", id="syntax"),
])
def test_an_agents_module_that_raises_on_import_is_one_line_exit_2_with_where(tui_agent, db_path, tmp_path, source,
                                                                               words):
    _one_run(db_path)
    before = dump(db_path)
    module = tmp_path / "raising_agents.py"
    module.write_text(source)
    for spec in (str(module), "raising_agents"):    # a file, and a module name found on the path
        line = _one_line(tui_agent("--db", str(db_path), "--agents", spec, "agents",
                                   env={"PYTHONPATH": str(tmp_path)}), 2)
        assert words in line and line.endswith("; fix the module, then run the command again"), line
    assert dump(db_path) == before


def test_an_agents_module_whose_own_import_is_missing_names_that_import_not_the_option(tui_agent, db_path, tmp_path):
    module = tmp_path / "needing_agents.py"
    module.write_text("import json\nimport not_installed_anywhere\n")
    for spec in (str(module), "needing_agents"):    # a file, and a module name found on the path
        line = _one_line(tui_agent("--db", str(db_path), "--agents", spec, "agents",
                                   env={"PYTHONPATH": str(tmp_path)}), 2)
        assert (f"--agents {spec}: its code imports 'not_installed_anywhere', which this Python (" in line
                and "cannot find, at needing_agents.py:2 in <module>; install it there, or fix the import" in line), line
    line = _one_line(tui_agent("--db", str(db_path), "--agents", "no_such_agents_module", "agents"), 2)
    assert "--agents no_such_agents_module: cannot import it (No module named 'no_such_agents_module'); name a " \
           "module importable from here" in line, line


def _two_runs_sharing_a_prefix(db: Path) -> tuple[str, list[str]]:
    """Queued hello runs (made in-process, fast) until two share the first character after `r-`."""
    store, registry = open_store(db), load_registry()
    try:
        by_first: dict[str, list[str]] = {}
        while True:
            run_id, _ = start(store, registry, agent_name="hello", request={})
            by_first.setdefault(run_id[2], []).append(run_id)
            if len(by_first[run_id[2]]) == 2:
                return f"r-{run_id[2]}", by_first[run_id[2]]
    finally:
        store.close()


def test_an_unknown_or_ambiguous_run_id_is_one_line_exit_2_and_no_run_changes(tui_agent, db_path):
    prefix, ids = _two_runs_sharing_a_prefix(db_path)
    before = dump(db_path)
    line = _one_line(tui_agent("cancel", prefix), 2)
    assert "ambiguous" in line and all(run_id in line for run_id in ids), line
    assert "type more of it" in line
    unknown = "r-zz"  # ids are hex: no run has it
    for args in (["cancel", unknown], ["resume", unknown]):
        line = _one_line(tui_agent(*args), 2)
        assert f"no run has an id starting with {unknown!r}" in line, line
    assert dump(db_path) == before
    assert {status for _, status, _ in _runs(db_path)} == {"queued"}
    # the whole id still works
    assert tui_agent("cancel", ids[0]).returncode == 0


# -- the database file ---------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["ls"], ["start", "hello"], ["worker", "--once"]])
def test_a_database_newer_than_the_code_is_one_line_exit_2_for_readers_and_writers_and_untouched(tui_agent, db_path,
                                                                                                 args):
    _one_run(db_path)
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(schema.SCHEMA_VERSION + 1),))
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = db_path.read_bytes()
    line = _one_line(tui_agent(*args), 2)
    assert f"schema version {schema.SCHEMA_VERSION + 1}, newer than this tui-agent" in line, line
    assert "upgrade tui-agent" in line
    assert db_path.read_bytes() == before
    wal = db_path.with_name(db_path.name + "-wal")  # a read-only look may leave an empty log beside it
    assert not wal.exists() or wal.stat().st_size == 0


# The busy timeout is 15 s; the same code path with a shorter one keeps this test fast.
_SHORT_BUSY = ("import sys; import tui_agent.store.db as db; db.BUSY_TIMEOUT_MS = int(sys.argv.pop(1)); "
               "from tui_agent.cli import main; main()")


def test_a_lock_held_past_the_busy_timeout_is_one_line_exit_4_and_loses_nothing(tui_agent, db_path):
    _one_run(db_path)
    queued, _ = _two_runs_sharing_a_prefix(db_path)[1]
    before = dump(db_path)
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")   # another program (a sqlite3 shell, a backup) holds the write lock
    try:
        for args in (["start", "hello"], ["cancel", queued]):
            done = subprocess.run([sys.executable, "-c", _SHORT_BUSY, "400", *args], capture_output=True,
                                  text=True, cwd=ROOT, timeout=60)
            line = _one_line(done, 4)
            assert f"{db_path} is busy" in line, line
            assert "nothing was lost" in line and "run the command again" in line, line
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert dump(db_path) == before
    assert tui_agent("cancel", queued).returncode == 0, "once the lock is let go, the command works"


# -- what a run meets while it works -------------------------------------------------------------

AGENTS_FILE = textwrap.dedent('''
    import os

    from tui_agent import Agent, tool


    def asks(ctx, request):
        """A step (its name from the environment, as if the code changed), then a person's approval."""
        fetched = ctx.step(os.environ.get("BAD_INPUT_STEP", "fetch"), lambda: {"rows": 3})
        ctx.approval("go", "go on?")
        return fetched


    @tool
    def lookup(ctx, city: str) -> str:
        """The weather in a city."""
        with open(ctx.request["log"], "a") as f:
            f.write("lookup\\n")
        raise ValueError(f"the weather service has no city {city!r}")


    def replies(messages, max_tokens, index):
        if index == 0:
            return {"stop_reason": "tool_use",
                    "content": [{"type": "tool_use", "id": "toolu_0", "name": "lookup", "input": {"city": "Mu"}}]}
        return "I could not find the weather for Mu."


    def weather(ctx, request):
        done = ctx.agent_loop("w", tools=[lookup], messages=[{"role": "user", "content": "weather in Mu?"}],
                              max_tokens=50)
        return {"stopped": done["stopped"], "turns": done["turns"], "tool_calls": done["tool_calls"]}


    ASKS = Agent(name="asks", run=asks)
    WEATHER = Agent(name="weather", run=weather, script=replies)
''')


@pytest.fixture(scope="session")
def agents(tmp_path_factory) -> list[str]:
    """`--agents FILE` for these agents; one file for the session, since this process imports it too."""
    path = tmp_path_factory.mktemp("bad-input-agents") / "bad_input_agents.py"
    path.write_text(AGENTS_FILE)
    return ["--agents", str(path)]


def _waiting_after_one_step(agents, db_path) -> tuple[str, list[dict]]:
    """An `asks` run that recorded its step and was approved: due again, its journal as it stands."""
    run_id = _one_run(db_path, "asks", {}, [agents[1]])
    store = open_store(db_path)
    try:
        assert run_report(store, run_id)["run"]["reason"] == "approval"
        approve(store, run_id)
    finally:
        store.close()
    journal = _report(db_path, run_id)["journal"]
    assert [e["name"] for e in journal] == ["fetch"]
    return run_id, journal


def test_a_checkpoint_of_another_schema_parks_the_run_and_keeps_its_journal(tui_agent, agents, db_path):
    run_id, journal = _waiting_after_one_step(agents, db_path)
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE checkpoints SET schema_version = 99 WHERE run_id = ?", (run_id,))
    conn.commit()
    conn.close()
    done = tui_agent(*agents, "worker", "--once")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(run_id)]
    assert line.startswith(f"{run_id} parked (checkpoint_schema): ")
    assert "checkpoint schema 99" in line and "resume --restart" in line, line
    report = _report(db_path, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "checkpoint_schema")
    assert report["journal"] == journal, "the recorded step is kept as it was"


def test_a_journal_entry_whose_name_differs_on_replay_parks_the_run_and_changes_nothing_recorded(tui_agent, agents,
                                                                                                db_path):
    run_id, journal = _waiting_after_one_step(agents, db_path)
    done = tui_agent(*agents, "worker", "--once", env={"BAD_INPUT_STEP": "download"})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(run_id)]
    assert line.startswith(f"{run_id} parked (code_changed): "), line
    assert "position 0" in line and "'fetch'" in line and "'download'" in line, line
    report = _report(db_path, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "code_changed")
    assert report["journal"] == journal, "nothing recorded may change"


def test_a_tool_that_raises_goes_back_to_the_model_as_an_error_and_the_run_goes_on(tui_agent, agents, tmp_path,
                                                                                   db_path):
    log = tmp_path / "calls.log"
    done = tui_agent(*agents, "run", "weather", "--input", json.dumps({"log": str(log)}))
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    run_id, status = done.stdout.split()[:2]
    assert status == "succeeded"
    assert json.loads(done.stdout.splitlines()[1]) == {"stopped": "end_turn", "turns": 2, "tool_calls": 1}
    assert log.read_text() == "lookup\n", "the tool ran once"
    report = _report(db_path, run_id)
    (tool_entry,) = [e for e in report["journal"] if e["kind"] == "tool"]
    assert tool_entry["result"]["is_error"] is True
    assert tool_entry["result"]["content"] == "ValueError: the weather service has no city 'Mu'"
    assert [e["name"] for e in report["journal"] if e["kind"] != "failure"] == ["w/turn 1", "w/lookup", "w/turn 2"]


MODEL_AGENTS = ["--agents", "model_agents"]


@pytest.mark.parametrize("second, words", [
    pytest.param({"status": 401, "body": error_body(401)}, "Claude answered 401", id="401"),
    pytest.param({"body": {"hello": "world"}}, "Claude answered 200 with something that is not a message",
                 id="not-a-message"),
])
def test_a_model_reply_that_fails_for_good_fails_the_run_once_and_keeps_the_recorded_reply(tui_agent, fake, db_path,
                                                                                           second, words):
    """The first question is answered; the second gets `second`. Asking again would get the same, so it is
    asked once (the agent's retry policy allows 3 attempts), the run fails with exit 1 and says why, and
    the first reply stays recorded with its cost."""
    fake.play({"body": message("Four.")}, second)
    done = tui_agent(*MODEL_AGENTS, "run", "two-questions", "--model", "anthropic")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    (line,) = done.stdout.strip().splitlines()
    run_id = line.split()[0]
    assert line.startswith(f"{run_id} failed (error): step 1 'follow-up' raised PermanentError: {words}"), line
    assert len(fake.requests) == 2, "a permanent error is not asked again"
    report = _report(db_path, run_id)
    assert [e["name"] for e in report["journal"]] == ["ask"]
    assert report["journal"][0]["result"]["content"][0]["text"] == "Four."
    assert report["budget"]["dimensions"]["cost_usd"]["used"] > 0


# -- the table in docs/reliability.md ------------------------------------------------------------


def _catalogue_rows() -> list[str]:
    text = (ROOT / "docs" / "reliability.md").read_text()
    section = text.split("## When input or the environment is bad", 1)[1].split("\n#", 1)[0]
    return [line for line in section.splitlines() if line.startswith("|") and "`tests/" in line]


def test_every_test_the_fault_catalogue_names_exists():
    rows = _catalogue_rows()
    assert len(rows) >= 16, "the catalogue has a row for each kind of bad input"
    named = [re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row.split("|")[-2]) for row in rows]
    assert all(named), [row for row, refs in zip(rows, named) if not refs]  # every row names a test
    for file, name in (ref for refs in named for ref in refs):
        tree = ast.parse((ROOT / file).read_text())
        functions = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert name in functions, f"docs/reliability.md names {file}::{name}, which does not exist"
