"""Never silent, never stranded (issue 37): a run started with `--model scripted:FILE` keeps the script's replies,
so a worker in another folder (or on another machine) answers from them; a run whose model or agent the worker
that claimed it cannot set up is parked with reason `environment`, naming what is missing, never left claimed.
Real processes, each in the folder it is started from."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ok

AGENTS = ["--agents", "stranded_agents"]


def cli(folder: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`tui-agent ARGS` in a process started in `folder` (the database is TUI_AGENT_DB's, absolute)."""
    return subprocess.run([sys.executable, "-m", "tui_agent", *args], capture_output=True, text=True, cwd=folder,
                          env=dict(os.environ), timeout=timeout)


def folders(tmp_path: Path) -> tuple[Path, Path]:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    return here, elsewhere


def report(folder: Path, run_id: str) -> dict:
    return json.loads(ok(cli(folder, "show", run_id, "--json")).stdout)


def test_a_relative_script_started_in_one_folder_is_answered_from_by_a_worker_in_another(tmp_path):
    here, elsewhere = folders(tmp_path)
    (here / "replies.json").write_text(json.dumps(["from the script"]))
    run_id = ok(cli(here, *AGENTS, "start", "asking-model", "--model", "scripted:replies.json")).stdout.strip()
    (here / "replies.json").unlink()   # nor does the worker need the file where it was: the run keeps the replies

    done = ok(cli(elsewhere, *AGENTS, "worker", "--once"))
    assert f"{run_id} succeeded" in done.stdout, done.stderr
    shown = report(elsewhere, run_id)
    assert shown["run"]["result"] == {"said": "from the script"}
    assert shown["run"]["model"] == "scripted:replies.json" and shown["run"]["script"] == ["from the script"]


def _as_stored(db: Path, run_id: str, **columns: str | None) -> None:
    """The run's row as an older (or newer) tui-agent left it."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for column, value in columns.items():
            conn.execute(f"UPDATE runs SET {column} = ? WHERE id = ?", (value, run_id))
    finally:
        conn.close()


@pytest.mark.parametrize("stored, says", [
    ({"script": None}, "scripted:replies.json: no such file (looked for {elsewhere}/replies.json)"),   # an older start
    ({"model": "openai:gpt-9", "script": None}, "unknown model provider 'openai:gpt-9'"),              # a newer start
], ids=["script-file-missing", "provider-unknown"])
def test_a_model_the_worker_cannot_set_up_parks_the_run_environment_and_leaves_it_unclaimed(tmp_path, stored, says):
    here, elsewhere = folders(tmp_path)
    (here / "replies.json").write_text(json.dumps(["from the script"]))
    run_id = ok(cli(here, *AGENTS, "start", "asking-model", "--model", "scripted:replies.json")).stdout.strip()
    _as_stored(Path(os.environ["TUI_AGENT_DB"]), run_id, **stored)

    done = ok(cli(elsewhere, *AGENTS, "worker", "--once"))
    says = says.format(elsewhere=elsewhere)
    assert f"{run_id} parked (environment): parked: worker " in done.stdout, (done.stdout, done.stderr)
    assert says in done.stdout and f"then tui-agent resume {run_id}" in done.stdout
    assert "Traceback" not in done.stderr
    shown = report(elsewhere, run_id)
    assert (shown["run"]["status"], shown["run"]["reason"]) == ("parked", "environment")
    held = json.loads(ok(cli(elsewhere, "workers", "--all", "--json")).stdout)
    assert all(not worker["runs"] for worker in held)     # not left claimed: no worker holds it
    assert says in shown["events"][-1]["message"]

    if "script" in stored and "model" not in stored:      # the advice followed: the file where the worker runs
        (elsewhere / "replies.json").write_text(json.dumps(["found here"]))
        ok(cli(elsewhere, "resume", run_id))
        assert f"{run_id} succeeded" in ok(cli(elsewhere, *AGENTS, "worker", "--once")).stdout
        assert report(elsewhere, run_id)["run"]["result"] == {"said": "found here"}


def test_a_schedule_keeps_its_script_so_a_fire_in_another_folder_runs_on_it(tmp_path):
    here, elsewhere = folders(tmp_path)
    (here / "replies.json").write_text(json.dumps(["scheduled reply"]))
    ok(cli(here, *AGENTS, "schedule", "add", "daily", "--agent", "asking-model", "--cron", "0 2 * * *",
           "--model", "scripted:replies.json"))
    (here / "replies.json").unlink()

    run_id = ok(cli(elsewhere, *AGENTS, "schedule", "fire", "daily")).stdout.strip()
    assert f"{run_id} succeeded" in ok(cli(elsewhere, *AGENTS, "worker", "--once")).stdout
    assert report(elsewhere, run_id)["run"]["result"] == {"said": "scheduled reply"}
