"""The first hour of a new user, from the README's first command on (issue 13, items 1, 2, 16, 17, 18, 20):
each test holds one thing that stood between a new user and a working tool. The text they read has moved from
the README into the documentation's pages (docs/writing-agents.md, docs/tui.md, docs/operating.md) where it
now lives; the README keeps the fresh-machine commands."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlite_utils
from helpers import (
    ROOT,
    console_script,
    database_at_version,
    ok,
    one_line_error,
    registry_of,
    start_and_work,
    stdout_ok,
)

from tui_agent import Agent, operate
from tui_agent.errors import UserError
from tui_agent.report import run_report
from tui_agent.runtime.registry import import_agents, load_registry
from tui_agent.runtime.tracebacks import innermost
from tui_agent.store import open_store, schema
from tui_agent.store.runs import get_run
from tui_agent.store.workers import register, stopped, workers_listing

README = (ROOT / "README.md").read_text(encoding="utf-8")
WRITING_AGENTS = (ROOT / "docs" / "writing-agents.md").read_text(encoding="utf-8")
TUI_PAGE = (ROOT / "docs" / "tui.md").read_text(encoding="utf-8")
OPERATING = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
HOUR, DAY = 3600, 86400


# -- 1. "The shape of an agent" works as written, through the installed console script ---------------


def _readme_agent() -> str:
    return re.search(r"## The shape of an agent\n\n```python\n(.*?)```", WRITING_AGENTS, re.DOTALL).group(1)


def _readme_agent_command() -> list[str]:
    return shlex.split(re.search(r"`(tui-agent --agents my_agents run [^`]+)`", WRITING_AGENTS).group(1))


def _without_pythonpath(**extra: str) -> dict[str, str]:
    """The environment of a new user's shell: the test suite's PYTHONPATH (which hid item 1) removed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, **extra}


def _console(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([console_script(), *args], cwd=cwd, env=_without_pythonpath(**env), capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture
def project(tmp_path) -> Path:
    """A folder holding my_agents.py, copied from the code block of docs/writing-agents.md."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_agents.py").write_text(_readme_agent(), encoding="utf-8")
    return folder


def test_the_writing_agents_example_runs_as_written_from_its_folder(project):
    command = _readme_agent_command()
    assert command[0] == "tui-agent"
    done = _console(*command[1:], cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded (check_passed)" in done.stdout
    assert '{"pages": 2}' in done.stdout


def test_a_file_path_works_from_another_folder_as_option_and_variable(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    given = _readme_agent_command()[3:]          # run digest --input ...
    by_option = _console("--agents", "../project/my_agents.py", *given, cwd=elsewhere)
    assert by_option.returncode == 0, by_option.stdout + by_option.stderr
    by_variable = _console(*given, cwd=elsewhere, TUI_AGENT_AGENTS=str(project / "my_agents.py"))
    assert by_variable.returncode == 0, by_variable.stdout + by_variable.stderr
    missing = _console("--agents", "./nope.py", "agents", cwd=elsewhere)
    assert missing.returncode == 2, missing.stderr
    assert "--agents ./nope.py: no such file" in missing.stderr, missing.stderr


def test_a_file_python_loads_no_module_from_is_refused_in_one_line(tmp_path):
    """A path to a file without the .py suffix names nothing Python can import: a usage error, not a traceback."""
    (tmp_path / "my_agents").write_text("from tui_agent import Agent\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"my_agents: Python cannot load a module from this file; name a \.py file"):
        import_agents(str(tmp_path / "my_agents"))


@pytest.fixture
def found_here(tmp_path, monkeypatch):
    """A module that only the current folder holds (not on sys.path), the folder the current one."""
    name = "first_hour_agents"
    folder = tmp_path / "here"
    folder.mkdir()
    (folder / f"{name}.py").write_text("from tui_agent import Agent\n\n"
                                       "AGENT = Agent(name='first-hour', run=lambda ctx, request: {'ok': True})\n")
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(folder))])
    try:
        yield name, folder
    finally:
        sys.modules.pop(name, None)


def test_a_module_found_here_reaches_the_workers_the_tui_starts_in_another_folder(found_here, db_path, tmp_path,
                                                                                    monkeypatch, invoke):
    name, folder = found_here
    registry = load_registry([name])
    assert registry.sources == [str(folder / f"{name}.py")], "a worker elsewhere gets the file's path"

    opened = {}

    class FakeApp:  # the TUI itself: only what it is given matters here
        def __init__(self, db_path, durability, *, registry, agent_modules, theme=None):
            opened["agent_modules"] = agent_modules
            self.spawned = []

        def run(self):
            pass

    monkeypatch.setattr("tui_agent.app.TuiAgentApp", FakeApp)
    stdout_ok(invoke("--agents", name))
    assert opened["agent_modules"] == registry.sources, "the TUI hands its workers the portable form"

    store = open_store(db_path)
    run_id, _ = operate.start(store, registry, agent_name="first-hour", request={})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("PYTHONPATH")
    worker = operate.start_worker(store, "full", registry.sources, "w-first-hour", log_dir=tmp_path / "logs")
    try:
        deadline = time.monotonic() + 30
        while get_run(store, run_id)["status"] != "succeeded" and time.monotonic() < deadline:
            assert worker.poll() is None, (tmp_path / "logs" / "w-first-hour.log").read_text()
            time.sleep(0.1)
        assert get_run(store, run_id)["status"] == "succeeded", (tmp_path / "logs" / "w-first-hour.log").read_text()
    finally:
        operate.stop_worker(worker.pid)
        worker.wait(timeout=20)
        store.close()


def test_a_module_name_not_found_anywhere_says_what_to_give(invoke):
    line = one_line_error(invoke("--agents", "no_such_module_xyz", "agents"))
    assert "cannot import" in line, line
    assert "./my_agents.py" in line, line
    assert "PYTHONPATH" not in line, line


# -- 2. the README's fresh-machine commands make their own venv (CI runs the test one: test_readme.py) ---


def _fresh_machine_commands() -> tuple[str, str]:
    block = re.search(r"## On a fresh machine\n\n```\n(.*?)```", README, re.DOTALL).group(1)
    demo, tests = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    return demo, tests


def _segments(command: str) -> list[list[str]]:
    """A shell line's commands between `&&`, each as its words."""
    words, segments = shlex.split(command), [[]]
    for word in words:
        if word == "&&":
            segments.append([])
        else:
            segments[-1].append(word)
    return segments


def test_the_readme_commands_make_a_venv():
    demo, tests = _fresh_machine_commands()
    venv = "python3 -m venv .venv && "
    assert demo == venv + ".venv/bin/pip install -e . && .venv/bin/tui-agent demo", demo   # the main job's needs only
    assert tests == venv + (".venv/bin/pip install -e '.[test]' && .venv/bin/ruff check . && .venv/bin/mypy && "
                            ".venv/bin/mkdocs build --strict && .venv/bin/python -m pytest"), tests
    after_block = README.split(tests, 1)[1].split("```", 1)[1].strip().splitlines()[0]
    assert "Debian and Ubuntu" in after_block, after_block
    assert "`python3-venv`" in after_block, after_block
    assert ".venv/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_readme_install_works_where_pip_outside_a_venv_is_refused(tmp_path):
    """Simulates a Python that refuses `pip install` outside a virtual environment (Debian's and Ubuntu's
    externally-managed-environment): the `python3` on PATH is a venv made --without-pip, so its
    `python3 -m pip` cannot install anything, and PIP_REQUIRE_VIRTUALENV=true makes any pip refuse to run
    outside a venv. The README's commands still work because each first makes (or reuses) `.venv` with that
    `python3` and runs everything after from `.venv/bin`. Kept fast and offline: `.venv` is made with
    --without-pip added (no ensurepip, nothing installed), so the rest of each command is checked as written
    rather than run."""
    base = tmp_path / "refusing-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True, timeout=60)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{base / 'bin'}{os.pathsep}{env['PATH']}", PIP_REQUIRE_VIRTUALENV="true")

    refused = subprocess.run(["python3", "-m", "pip", "install", "-e", ".[test]"], cwd=checkout, env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode != 0, "the old README command must not work on this Python"

    for command in _fresh_machine_commands():
        make_venv, *rest = _segments(command)
        assert make_venv == ["python3", "-m", "venv", ".venv"], make_venv
        assert rest, rest
        assert all(words[0].startswith(".venv/bin/") for words in rest), rest
        assert "python3 -m pip" not in command
        assert not any(words[0] == "pip" for words in rest)
        made = subprocess.run([*make_venv, "--without-pip"], cwd=checkout, env=env, capture_output=True,
                              text=True, timeout=60, check=False)    # the second command reuses the first's .venv
        assert made.returncode == 0, made.stderr
    inside = subprocess.run([".venv/bin/python", "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                            cwd=checkout, env=env, capture_output=True, text=True, timeout=60, check=True)
    assert inside.stdout.strip() == "True", "pip run from .venv runs inside a venv, which is allowed"


# -- 16. a failing agent keeps where it raised ---------------------------------------------------------


def test_a_failing_agent_keeps_its_traceback_show_names_the_line(project, invoke, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))       # loading a file puts its folder on the path
    agents = project / "my_agents.py"
    line = 1 + next(i for i, text in enumerate(_readme_agent().splitlines()) if 'request["urls"]' in text)
    try:
        failed = invoke("--agents", str(agents), "run", "digest")       # no "urls" in the request
    finally:
        sys.modules.pop("my_agents", None)
    assert failed.exit_code == 1, failed.stdout
    assert "KeyError: 'urls'" in failed.stdout, failed.stdout
    run_id = failed.stdout.split()[0]

    assert f"raised at my_agents.py:{line} in digest" in stdout_ok(invoke("show", run_id))
    frames = json.loads(stdout_ok(invoke("show", run_id, "--json")))["run"]["traceback"]
    assert frames[-1]["file"] == str(agents)
    assert frames[-1]["line"] == line
    assert frames[-1]["function"] == "digest"
    assert 'request["urls"]' in frames[-1]["code"]
    assert not any("/tui_agent/runtime/" in frame["file"] for frame in frames), "the harness's frames are left out"


def _fetch(url: str):
    return json.loads(url)   # raises inside the standard library


def test_a_failed_step_keeps_the_frames_of_its_function_and_a_restart_clears_them(store):
    agent = Agent(name="fetcher", run=lambda ctx, request: ctx.step("fetch", _fetch, "{not json"))
    registry = registry_of(agent)
    run_id = start_and_work(store, registry, "fetcher", {}).run_id
    frames = run_report(store, run_id)["run"]["traceback"]
    assert [f["function"] for f in frames][:2] == ["<lambda>", "_fetch"], frames
    assert frames[-1]["file"].endswith(("decoder.py", "__init__.py")), "the library's frames are kept too"
    assert innermost(frames) == f"test_first_hour_cli.py:{_fetch.__code__.co_firstlineno + 1} in _fetch"

    operate.resume(store, run_id, restart=True)
    assert run_report(store, run_id)["run"]["traceback"] is None


def test_a_version_2_database_gains_the_traceback_column(db_path):
    database_at_version(db_path, 2)
    store = open_store(db_path)
    try:
        assert "traceback" in sqlite_utils.Database(store.conn)["runs"].columns_dict
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == \
            str(schema.SCHEMA_VERSION)
    finally:
        store.close()


# -- 17. stopped workers: listed with --all, gone after a day -------------------------------------------


def test_workers_lists_a_stopped_worker_only_with_all(invoke, store):
    at = time.time()
    register(store, "w-done", pid=os.getpid(), host="elsewhere", concurrency=1, lease_s=60, now=at - 10)
    stopped(store, "w-done", at - 5)
    assert "no worker is running (1 stopped: --all lists them)" in stdout_ok(invoke("workers"))
    register(store, "w-live", pid=os.getpid(), host="elsewhere", concurrency=1, lease_s=60, now=at)

    def names(*args: str) -> set[str]:
        return {row["name"] for row in json.loads(stdout_ok(invoke("workers", "--json", *args)))}

    assert names() == {"w-live"}
    assert names("--all") == {"w-live", "w-done"}
    text = stdout_ok(invoke("workers"))
    assert "w-live" in text
    assert "w-done" not in text
    assert "w-done" in stdout_ok(invoke("workers", "--all"))


def test_stopped_workers_older_than_a_day_go_when_a_worker_registers(store):
    at = time.time()
    for name, stopped_at in (("w-recent", at - HOUR), ("w-old", at - 2 * DAY)):
        register(store, name, pid=1, host="elsewhere", concurrency=1, lease_s=60, now=stopped_at - 10)
        stopped(store, name, stopped_at)
    register(store, "w-silent", pid=1, host="elsewhere", concurrency=1, lease_s=60,
             now=at - 3 * DAY)   # never said goodbye: kept
    assert {row["name"] for row in workers_listing(store)} == {"w-recent", "w-old", "w-silent"}
    register(store, "w-new", pid=os.getpid(), host="elsewhere", concurrency=1, lease_s=60, now=at)
    assert {row["name"] for row in workers_listing(store)} == {"w-recent", "w-silent", "w-new"}


# -- 18. messages in the words of where they are read ------------------------------------------------------


def test_a_budget_without_a_value_says_what_to_type(invoke):
    line = one_line_error(invoke("start", "hello", "--budget", "steps"))
    assert "--budget 'steps'" in line, line
    assert "steps=100" in line, line
    assert "after '=' must be" not in line, line


def test_parse_budget_names_the_option_only_when_told_to():
    with pytest.raises(UserError) as neutral:
        operate.parse_budget(["cost_usd=abc"])
    assert str(neutral.value) == "cost_usd=abc: the value must be a number, as in cost_usd=0.50"
    with pytest.raises(UserError, match=r"^--budget 'cost_usd=abc': the value must be a number"):
        operate.parse_budget(["cost_usd=abc"], source="--budget")


def test_the_result_example_is_what_a_send_returns(invoke, store):
    line = one_line_error(invoke("reconcile", "r-0", "send", "--happened", "--result", "{x"))
    assert "message_id" in line, line
    assert "Ada" not in line, line


def test_resume_on_an_ended_run_points_to_fork_and_restart(store):
    def broken(ctx, request):
        raise ValueError("no")

    registry = registry_of(Agent(name="broken", run=broken), Agent(name="fine", run=lambda ctx, request: 1))
    failed = start_and_work(store, registry, "broken", {}).run_id
    with pytest.raises(UserError) as refused:
        operate.resume(store, failed)
    assert "it has ended" in str(refused.value)
    assert "not parked" not in str(refused.value)
    assert f"tui-agent fork {failed} --from-step N" in str(refused.value)
    assert f"tui-agent resume {failed} --restart" in str(refused.value)
    done = start_and_work(store, registry, "fine", {}).run_id
    with pytest.raises(UserError, match=f"tui-agent fork {done} --from-step N; nothing changed"):
        operate.resume(store, done)      # a succeeded run cannot be restarted: fork only


# -- 20. --help says the TUI comes first; docs/tui.md lists every key ------------------------------------


def test_help_says_first_that_tui_agent_alone_opens_the_tui(invoke):
    text = stdout_ok(invoke("--help"))
    description = text.split("\n\n")[1].strip()
    assert description.startswith("With no command, tui-agent opens the terminal UI"), description


def _readme_keys() -> dict[str, str]:
    """Every key in the keys table of docs/tui.md, with what the table says it does."""
    section = TUI_PAGE.split("## Keys", 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0]
    keys = {}
    for row in section.splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        for key_cell, action in zip(cells[0::2], cells[1::2]):
            for key in re.findall(r"`([^`]+)`", key_cell):
                keys[key] = keys.get(key, "") + action
    return keys


def test_the_tui_pages_keys_table_has_every_key_of_the_run_runs_and_schedules_screens():
    from tui_agent.app import TuiAgentApp
    from tui_agent.screens.run import RunScreen
    from tui_agent.screens.runs import RunsScreen
    from tui_agent.screens.schedules import SchedulesScreen

    shown = {"question_mark": "?", "slash": "/", "plus": "+", "asterisk": "*", "dollar_sign": "$"}
    keys = _readme_keys()
    for screen in (TuiAgentApp, RunsScreen, RunScreen, SchedulesScreen):
        for binding in screen.BINDINGS:
            for key in binding.key.split(","):
                assert shown.get(key, key) in keys, f"{screen.__name__}: {key} is not in docs/tui.md's keys table"
    assert "lower panes" in keys["t"]
    assert "fire" in keys["F"]
    assert "asks first" in keys["F"]
    assert "open a schedule" in keys["enter"]
    assert "enable" in keys["e"]


def test_the_readme_completion_lines_give_a_script_that_completes_commands(tui_agent):
    section = OPERATING.split("## Shell completion", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    shells = re.findall(r"tui-agent completion (\w+)", section)
    assert shells == ["bash", "zsh", "fish"], section
    for shell in shells:
        script = ok(tui_agent("completion", shell)).stdout
        assert f"_TUI_AGENT_COMPLETE={shell}_complete" in script, script
    completed = ok(tui_agent(env={"_TUI_AGENT_COMPLETE": "bash_complete", "COMP_WORDS": "tui-agent sch",
                                  "COMP_CWORD": "1"})).stdout
    assert completed.split() == ["plain,schedule"], completed
