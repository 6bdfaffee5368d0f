"""Inputs that are not what they claim: each is refused with one line on stderr and exit 2, never
accepted silently, never a traceback."""

from __future__ import annotations

import json
import sqlite3

import pytest
from helpers import one_line_error, stdout_ok
from textual.app import App
from textual.widgets import Input, RadioButton

from tui_agent.operate import parse_budget
from tui_agent.screens.modals import NewRunModal, ReconcileModal


def _strict(text: str):
    """json.loads that refuses the bare NaN and Infinity Python's json writes by default."""
    return json.loads(text, parse_constant=lambda token: pytest.fail(f"non-standard JSON constant {token}"))


async def test_non_finite_numbers_and_fractional_counts_are_refused_and_json_output_is_strict(invoke, tmp_path,
                                                                                              db_path):
    for spec in ("steps=nan", "steps=inf", "cost_usd=inf", "wall_s=-inf", "steps=1.5", "effects=0.5"):
        line = one_line_error(invoke("start", "hello", "--budget", spec))
        assert spec in line, line
        assert "finite" in line or "whole number" in line, line
    assert parse_budget(["wall_s=1.5", "cost_usd=0.25", "steps=3.0"]) == {"wall_s": 1.5, "cost_usd": 0.25, "steps": 3}

    request = tmp_path / "request.json"
    request.write_text('{"name": NaN}')
    for given in ('{"x": NaN}', '{"x": 1e999}', '{"x": [-Infinity]}', f"@{request}"):
        line = one_line_error(invoke("start", "hello", "--input", given))
        assert "not a finite number" in line, line
    assert "--result holds NaN" in one_line_error(invoke("reconcile", "r-0", "send", "--happened",
                                                          "--result", '{"sent": NaN}'))
    assert _strict(stdout_ok(invoke("ls", "--json"))) == [], "nothing was stored"

    # A run stored before this rule held NaN: --json writes null for it, never bare NaN.
    run_id = stdout_ok(invoke("start", "hello")).strip()
    conn = sqlite3.connect(db_path)
    conn.execute("""UPDATE runs SET request = '{"x": NaN, "y": [Infinity]}', budget = '{"steps": NaN}'""")
    conn.commit()
    conn.close()
    report = _strict(stdout_ok(invoke("show", run_id, "--json")))
    assert report["run"]["request"] == {"x": None, "y": [None]}
    assert report["budget"]["dimensions"]["steps"]["limit"] is None
    assert _strict(stdout_ok(invoke("ls", "--json")))[0]["id"] == run_id

    # The TUI's modals read JSON through the same strict parser.
    async with App().run_test() as pilot:
        new_run = NewRunModal(["hello"])
        await pilot.app.push_screen(new_run)
        new_run.query_one("#input", Input).value = '{"x": NaN}'
        assert new_run.answer() is None
        new_run.query_one("#input", Input).value = '{"x": 1e999}'
        assert new_run.answer() is None
        new_run.query_one("#input", Input).value = '{"x": 1.5}'
        assert new_run.answer() == ("hello", {"x": 1.5})
        reconcile = ReconcileModal({"name": "send", "key": "k", "state": "unknown", "attempts": 1, "has_lookup": 0})
        await pilot.app.push_screen(reconcile)
        reconcile.query_one("#happened", RadioButton).value = True
        await pilot.pause()
        reconcile.query_one("#result", Input).value = '{"sent": Infinity}'
        assert reconcile.answer() is None
        reconcile.query_one("#result", Input).value = '{"sent": true}'
        assert reconcile.answer() == ("happened", {"sent": True}, None)


def test_cron_needs_five_fields_that_fire_and_a_printable_name(invoke):
    schedule = ("schedule", "add", "--agent", "hello")
    line = one_line_error(invoke(*schedule, "--cron", "* * * * * */5", "every5s"))
    assert "6 fields" in line
    assert "five" in line
    assert "five" in one_line_error(invoke(*schedule, "--cron", "@daily", "daily"))
    line = one_line_error(invoke(*schedule, "--cron", "0 0 30 2 *", "feb30"))
    assert "never fires" in line
    assert "CroniterBadDateError" not in line
    for name in ("", " nightly", "nightly ", "night\tly", "bell\x07", "-nightly", "a/b", "x" * 65):
        line = one_line_error(invoke(*schedule, "--cron", "0 2 * * *", "--", name))
        assert "letters, digits" in line, (name, line)
    assert "next fire" in stdout_ok(invoke(*schedule, "--cron", "0 2 * * *", "nightly-report.v2:eu_west"))
    assert [s["name"] for s in _strict(stdout_ok(invoke("schedule", "ls", "--json")))] == ["nightly-report.v2:eu_west"]


def test_reconcile_takes_exactly_one_decision(invoke, store):
    for flags in (["--happened", "--not-done"], ["--not-done", "--happened"], ["--ask", "--abandon"]):
        line = one_line_error(invoke("reconcile", "r-0", "send", *flags))
        assert "one decision" in line, line
        assert all(flag in line for flag in flags), line
    assert "say what happened" in one_line_error(invoke("reconcile", "r-0", "send"))
    # One decision (even given twice) goes on to look for the run.
    assert "no run has an id" in one_line_error(invoke("reconcile", "r-0", "send", "--not-done", "--not-done"))


def test_a_key_names_one_run_of_one_request(invoke):
    first = stdout_ok(invoke("start", "hello", "--key", "K", "--input", '{"name": "Ada", "loud": true}')).strip()
    same = invoke("start", "hello", "--key", "K", "--input", '{ "loud" : true,  "name": "Ada" }')
    assert stdout_ok(same).strip() == first, "the same request, spelled differently, is the same run"
    line = one_line_error(invoke("start", "hello", "--key", "K", "--input", '{"name": "Bob", "loud": true}'))
    assert first in line, line
    assert "name" in line, line
    assert "loud" not in line, line
    line = one_line_error(invoke("start", "hello", "--key", "K", "--input", '{"name": "Ada"}'))
    assert first in line, line
    assert "loud" in line, line
    line = one_line_error(invoke("start", "nightly-report", "--key", "K"))
    assert first in line, line
    assert "nightly-report" in line, line
    assert [r["id"] for r in _strict(stdout_ok(invoke("ls", "--json")))] == [first]


@pytest.mark.parametrize("command", [["ls"], ["ls", "--json"], ["show", "r-0"], ["workers"], ["schedule", "ls"]])
def test_read_only_commands_create_nothing_and_bad_paths_are_one_line(invoke, tmp_path, monkeypatch, command):
    missing = tmp_path / "nowhere" / "runs.db"
    line = one_line_error(invoke("--db", str(missing), *command))
    assert f"no database at {missing}" in line
    assert "tui-agent run hello" in line
    assert not missing.parent.exists(), "a read-only command made the folder"
    monkeypatch.setenv("TUI_AGENT_DB", str(missing))
    one_line_error(invoke(*command))
    assert not missing.parent.exists()

    assert "empty" in one_line_error(invoke("--db", "", *command))
    monkeypatch.setenv("TUI_AGENT_DB", "")
    assert "empty" in one_line_error(invoke(*command))
    monkeypatch.delenv("TUI_AGENT_DB")
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("hello\n" * 50)
    for path in ("/proc/x.db", "/sys/x.db", str(tmp_path), str(not_sqlite)):
        one_line_error(invoke("--db", path, *command))
    for path in ("/proc/x.db", "/sys/x.db", f"{not_sqlite}/runs.db"):
        one_line_error(invoke("--db", path, "start", "hello"))
    assert not_sqlite.read_text() == "hello\n" * 50

    assert stdout_ok(invoke("--db", str(missing), "start", "hello")).startswith("r-"), "writers still create it"
    assert missing.exists()
