"""Shell completion through the real console script: the scripts each shell sources, and what a Tab offers from
the database (run ids, schedule names, agents, workers), never creating or migrating anything, and nothing from a
database that is missing or a server that does not answer."""

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing

import pytest
from helpers import ROOT

from tui_agent.completion import DEADLINE_S


def _offered(line: str, env: dict | None = None) -> tuple[list[tuple[str, str]], float]:
    """What `tui-agent` offers for the last word of `line` (a trailing space: a new, empty word), as bash asks it
    (COMP_WORDS, COMP_CWORD): (kind, value) pairs, and how long the process took."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tui_agent"], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, **(env or {}), "_TUI_AGENT_COMPLETE": "bash_complete",
                               "COMP_WORDS": line, "COMP_CWORD": str(len(line.split(" ")) - 1)})
    took = time.monotonic() - started
    assert done.returncode == 0 and not done.stderr, done.stderr
    return [tuple(row.split(",", 1)) for row in done.stdout.splitlines() if row], took


def _complete(line: str, env: dict | None = None) -> tuple[list[str], float]:
    """The values offered for the last word of `line`, and how long it took."""
    offered, took = _offered(line, env)
    assert all(kind == "plain" for kind, _ in offered), offered
    return [value for _, value in offered], took


def _started(tui_agent, *args: str) -> str:
    done = tui_agent(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_completion_bash_prints_clicks_script_which_bash_accepts(tui_agent):
    printed = tui_agent("completion", "bash")
    assert printed.returncode == 0, printed.stderr
    clicks = tui_agent(env={"_TUI_AGENT_COMPLETE": "bash_source"})
    assert printed.stdout == clicks.stdout
    assert "_TUI_AGENT_COMPLETE=bash_complete" in printed.stdout
    assert "complete -o nosort -F _tui_agent_completion tui-agent" in printed.stdout
    checked = subprocess.run(["bash", "-n"], input=printed.stdout, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("shell, check, hook", [
    ("zsh", ["zsh", "-n"], "compdef _tui_agent_completion tui-agent"),
    ("fish", ["fish", "--no-execute"], "complete --no-files --command tui-agent"),
])
def test_completion_zsh_and_fish_print_clicks_scripts(tui_agent, shell, check, hook):
    printed = tui_agent("completion", shell)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == tui_agent(env={"_TUI_AGENT_COMPLETE": f"{shell}_source"}).stdout
    assert hook in printed.stdout and f"_TUI_AGENT_COMPLETE={shell}_complete" in printed.stdout
    if shutil.which(check[0]):   # where the shell is installed, it parses the script too
        checked = subprocess.run(check, input=printed.stdout, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


def test_completion_of_another_shell_is_one_line_exit_2(tui_agent):
    done = tui_agent("completion", "powershell")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "'powershell' is not one of 'bash', 'zsh', 'fish'" in done.stderr


def test_run_ids_complete_from_the_database_the_line_names(tui_agent, tmp_path, db_path):
    here = [_started(tui_agent, "start", "hello") for _ in range(2)]   # TUI_AGENT_DB (conftest) names db_path
    other = tmp_path / "other.db"
    there = _started(tui_agent, "--db", str(other), "start", "hello")
    assert sorted(_complete("tui-agent show ")[0]) == sorted(here)
    assert _complete(f"tui-agent show {here[0][:6]}")[0] == [here[0]]
    assert _complete(f"tui-agent cancel {here[1][2:6]}")[0] == [here[1]]   # typed without its r-
    assert _complete(f"tui-agent --db {other} fork ")[0] == [there]       # --db earlier on the line wins
    assert _complete("tui-agent diff r-0 ", env={"TUI_AGENT_DB": str(other)})[0] == [there]
    assert sorted(_complete(f"tui-agent export {here[0]} ")[0]) == sorted(here)
    assert _complete("tui-agent show zz")[0] == []


@pytest.mark.postgres
def test_run_ids_and_schedules_complete_from_a_postgresql_database(tui_agent, pg_url):
    made = _started(tui_agent, "--db", pg_url, "start", "hello")
    _started(tui_agent, "--db", pg_url, "schedule", "add", "nightly", "--agent", "hello", "--cron", "0 2 * * *")
    assert _complete("tui-agent show ", env={"TUI_AGENT_DB": pg_url})[0] == [made]
    assert _complete(f"tui-agent --db {pg_url} schedule enable n")[0] == ["nightly"]


def test_schedule_names_agents_and_workers_complete(tui_agent, db_path):
    for name in ("nightly", "night-owl", "weekly"):
        _started(tui_agent, "schedule", "add", name, "--agent", "hello", "--cron", "0 2 * * *")
    assert sorted(_complete("tui-agent schedule fire night")[0]) == ["night-owl", "nightly"]
    assert sorted(_complete("tui-agent schedule rm ")[0]) == ["night-owl", "nightly", "weekly"]
    assert _complete("tui-agent start nightly-r")[0] == ["nightly-report"]
    assert _complete("tui-agent --agents counting_agents run count")[0] == ["counting"]   # --agents modules too
    assert _complete("tui-agent ls --agent refac")[0] == ["refactor-imports"]
    assert tui_agent("worker", "--once", "--name", "w-tab").returncode == 0
    assert _complete("tui-agent logs w-t")[0] == ["w-tab"]
    assert _offered("tui-agent worker --log /tm")[0] == [("file", "/tm")]   # the shell's own file names


def test_a_missing_database_completes_nothing_and_nothing_is_created(tmp_path):
    missing = tmp_path / "nowhere" / "runs.db"
    for line in (f"tui-agent --db {missing} show ", f"tui-agent --db {missing} schedule fire ",
                 f"tui-agent --db {missing} logs "):
        assert _complete(line)[0] == []
    assert not (tmp_path / "nowhere").exists()
    assert not (tmp_path / "runs.db").exists() and not (tmp_path / "xdg").exists()   # nor the default database


def test_completion_leaves_no_wal_beside_a_quiet_database_and_migrates_nothing(tui_agent, db_path):
    run_id = _started(tui_agent, "start", "hello")
    with closing(sqlite3.connect(db_path)) as conn:   # as an older tui-agent left it
        conn.execute("UPDATE meta SET value = '17' WHERE key = 'schema_version'")
        conn.commit()
    before = sorted(os.listdir(db_path.parent))
    assert not any(name.endswith(("-wal", "-shm")) for name in before)
    assert _complete("tui-agent show ")[0] == [run_id]
    assert sorted(os.listdir(db_path.parent)) == before
    with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("17",)


def test_a_file_that_is_not_a_database_completes_nothing(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("not a database\n" * 100)
    assert _complete(f"tui-agent --db {text} show ")[0] == []
    assert text.read_text() == "not a database\n" * 100
    assert sorted(os.listdir(tmp_path)) == ["notes.db"]


def _silent_server() -> tuple[socket.socket, list[socket.socket]]:
    """A port that accepts connections and never says a word."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, accepted


def test_a_server_that_is_away_or_silent_completes_nothing_within_the_deadline(tmp_path):
    assert DEADLINE_S <= 0.5
    with socket.socket() as probe:   # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    server, accepted = _silent_server()
    try:
        _, baseline = _complete(f"tui-agent --db {tmp_path / 'missing.db'} show ")   # the process, without a wait
        for url in (f"postgresql://tui@127.0.0.1:{closed_port}/runs",
                    f"postgresql://tui@127.0.0.1:{server.getsockname()[1]}/runs"):
            offered, took = _complete(f"tui-agent --db {url} show ")
            assert offered == []
            # libpq alone waits 2 s for a silent server: the deadline (DEADLINE_S) cuts it short
            assert took < baseline + 1.5, (url, took, baseline)
        assert accepted, "the silent server was asked"
    finally:
        server.close()
        for conn in accepted:
            conn.close()
