"""The config file (tui_agent/config.py) through the console script: each setting from the flag, else the
environment variable, else the file, else the default; a bad file is one line naming its key and line (exit 2) on
every command but `config` and `doctor`; and through Pilot, the theme chosen in the TUI kept in the state file,
and the workers the TUI starts reading the same file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import key, ok, show_json, tui
from worker_pilot import kill_all, open_workers, start_one, until

from tui_agent import config
from tui_agent.app import TuiAgentApp


@pytest.fixture
def config_file(tmp_path) -> Path:
    """Where every command of the test (and each process it starts) reads its config: conftest points
    XDG_CONFIG_HOME at the test's own folder."""
    path = tmp_path / "xdg-config" / "tui-agent" / "config.toml"
    path.parent.mkdir(parents=True)
    return path


def test_config_path_names_the_file_in_the_xdg_config_folder_and_no_real_one_is_read(tui_agent, config_file):
    assert ok(tui_agent("config", "--path")).stdout.strip() == str(config_file)
    assert config.path() == config_file
    assert config.state_path().is_relative_to(Path(os.environ["XDG_STATE_HOME"]))


def test_the_database_is_the_flags_then_the_environments_then_the_files_then_the_default(tui_agent, config_file,
                                                                                        tmp_path, monkeypatch):
    flag, env, in_file = (tmp_path / f"{name}.db" for name in ("flag", "env", "file"))
    default = tmp_path / "xdg" / "tui-agent" / "runs.db"   # under conftest's XDG_DATA_HOME
    config_file.write_text(f'db = "{in_file}"\n')
    monkeypatch.setenv("TUI_AGENT_DB", str(env))
    made = lambda: {path.name for path in (flag, env, in_file, default) if path.exists()}
    ok(tui_agent("--db", str(flag), "start", "hello"))
    assert made() == {"flag.db"}
    ok(tui_agent("start", "hello"))
    assert made() == {"flag.db", "env.db"}
    monkeypatch.delenv("TUI_AGENT_DB")
    ok(tui_agent("start", "hello"))
    assert made() == {"flag.db", "env.db", "file.db"}
    config_file.unlink()
    ok(tui_agent("start", "hello"))
    assert made() == {"flag.db", "env.db", "file.db", "runs.db"}


def test_the_agents_are_the_flags_then_the_environments_then_the_files_then_the_built_ins(tui_agent, config_file):
    config_file.write_text('agents = ["notify_agents"]\n')
    listed = [ok(tui_agent(*args, "agents", env=environment)).stdout for args, environment in (
        (("--agents", "counting_agents"), {"TUI_AGENT_AGENTS": "ledger_agents"}),
        ((), {"TUI_AGENT_AGENTS": "ledger_agents"}),
        ((), {}))]
    config_file.unlink()
    listed.append(ok(tui_agent("agents")).stdout)
    names = [{word for line in out.splitlines() for word in line.split()[:1]} & {"counting", "ledger", "asking"}
             for out in listed]
    assert names == [{"counting"}, {"ledger"}, {"asking"}, set()]


def test_a_runs_model_is_the_flags_then_its_agents_table_then_the_files_then_the_default(tui_agent, config_file):
    model_of = lambda *args: show_json(tui_agent, ok(tui_agent("start", "hello", *args)).stdout.strip())["run"]
    top = 'model = "anthropic:claude-haiku-4-5"\n'
    config_file.write_text(top + '\n[agent.hello]\nmodel = "anthropic"\nbudget = ["cost_usd=0.25"]\n')
    flagged, from_table = model_of("--model", "scripted"), model_of()
    config_file.write_text(top)
    from_file = model_of()
    config_file.unlink()
    default = model_of()
    assert [run["model"] for run in (flagged, from_table, from_file, default)] == [
        "scripted", "anthropic", "anthropic:claude-haiku-4-5", "default"]
    assert [run["budget"]["cost_usd"] for run in (flagged, from_table)] == [0.25, 0.25]   # under the flag's model
    assert from_file["budget"] == default["budget"]


def test_config_says_where_each_setting_comes_from_flag_environment_file_line_or_default(tui_agent, config_file):
    config_file.write_text('# mine\ndurability = "normal"\n\n[worker]\nconcurrency = 2\n')

    def durability(*args, env=None):
        report = json.loads(ok(tui_agent(*args, "config", "--json", env=env)).stdout)
        return next((row["value"], row["from"], row["where"]) for row in report["settings"]
                    if row["key"] == "durability"), report

    assert durability("--durability", "full", env={"TUI_AGENT_DURABILITY": "normal"})[0] == ("full", "flag",
                                                                                            "--durability")
    assert durability(env={"TUI_AGENT_DURABILITY": "full"})[0] == ("full", "environment", "TUI_AGENT_DURABILITY")
    in_file, report = durability()
    assert in_file == ("normal", "file", f"{config_file}:2")
    assert {"key": "worker.concurrency", "value": 2, "from": "file", "where": f"{config_file}:5"} \
        in report["settings"]
    rows = ok(tui_agent("config")).stdout.splitlines()
    assert rows[0] == str(config_file)
    assert any(re.fullmatch(rf"durability +normal +{re.escape(str(config_file))}:2", row) for row in rows), rows
    config_file.unlink()
    assert durability()[0] == ("full", "default", None)


BAD = [  # (the file, its bad line, the key the line names, what it says)
    ('model = "scripted"\nlease = 30 30\n', 2, "lease", "not valid TOML"),
    ('[worker]\nname = "w-1"\nconcurrency = 0\n', 3, "worker.concurrency", "0 is not in the range 1<=x<="),
    ('durability = "fast"\n', 1, "durability", "'fast' is not one of 'full', 'normal'"),
    ('[worker]\n\nleese = 10\n', 3, "worker.leese", "not a setting (did you mean lease?)"),
    ('\n[agent.helo]\nmodel = "scripted"\n', 2, "agent.helo", "no agent of that name (did you mean hello?)"),
    ('theme = "nordd"\n', 1, "theme", "'nordd' is not a theme (did you mean nord?)"),
    ('lease = 30\n\n[agents.hello]\nmodel = "scripted"\n', 3, "agents", "must be text, not a table"),
]


@pytest.mark.parametrize(("text", "line", "key", "why"), BAD, ids=["syntax", "range", "choice", "unknown", "agent", "theme", "table"])
def test_a_bad_file_is_one_line_naming_the_key_and_line_exit_2_and_nothing_is_created(tui_agent, config_file,
                                                                                     db_path, text, line, key, why):
    config_file.write_text(text)
    done = ok(tui_agent("start", "hello"), 2)
    assert done.stdout == ""
    said = done.stderr.splitlines()
    assert len(said) == 1, done.stderr
    assert said[0].startswith(f"tui-agent: {config_file}:{line}: {key}: {why}"), said[0]
    assert not db_path.exists()


def test_config_path_config_and_doctor_still_work_with_a_bad_file(tui_agent, config_file, db_path):
    ok(tui_agent("start", "hello"))
    config_file.write_text('durability = "normal"\n[worker]\nlease = "long"\n')
    bad = f"{config_file}:3: worker.lease: must be a number, not text (\"long\")"
    assert ok(tui_agent("config", "--path")).stdout.strip() == str(config_file)

    shown = ok(tui_agent("config"), 2)
    assert re.search(rf"^durability +normal +{re.escape(str(config_file))}:1$", shown.stdout, re.M), shown.stdout
    assert shown.stderr.startswith(f"tui-agent: {bad}")
    assert len(shown.stderr.splitlines()) == 1

    checked = ok(tui_agent("doctor"))
    assert checked.stdout.splitlines()[-1] == "healthy"
    assert checked.stderr.startswith(f"tui-agent: {bad}; doctor goes on")
    ok(tui_agent("ls"), 2)


def test_a_bad_key_between_good_ones_is_said_by_its_line_and_config_still_shows_the_good_ones(tui_agent,
                                                                                          config_file):
    config_file.write_text('theme = "nord"\nlease = 30\ndurability = "bogus"\nmodel = "scripted"\n'
                           '[worker]\nconcurrency = 0\nname = "w-7"\n')
    shown = ok(tui_agent("config"), 2)
    assert shown.stderr.startswith(f"tui-agent: {config_file}:3: durability: 'bogus' is not one of"), shown.stderr
    for name, value, line in (("theme", "nord", 1), ("lease", "30", 2), ("model", "scripted", 4),
                             ("worker.name", "w-7", 7)):
        assert re.search(rf"^{re.escape(name)} +{value} +{re.escape(str(config_file))}:{line}$", shown.stdout, re.M), \
            shown.stdout
    assert re.search(r"^durability +full +default$", shown.stdout, re.M), shown.stdout
    assert "concurrency" not in shown.stdout

    config_file.write_text('[worker]\nconcurrency = 0\n\n[agent.hello]\nmodel = "scripted"\nlease = "long"\n'
                           'budget = ["bogus"]\n')   # a table's problem is found before the top-level keys'
    assert ok(tui_agent("start", "hello"), 2).stderr.startswith(f"tui-agent: {config_file}:2: worker.concurrency")
    assert re.search(r"^model +default +default$", ok(tui_agent("config"), 2).stdout, re.M)


def test_the_themes_a_file_may_name_are_textuals_own():
    from textual.theme import BUILTIN_THEMES

    assert config.THEMES == tuple(BUILTIN_THEMES)


async def test_the_theme_chosen_in_the_tui_is_the_one_the_next_launch_opens_with(db_path):
    async with tui(db_path) as (app, pilot):
        assert app.theme == "textual-dark"
        app.action_change_theme()   # the palette's "Change theme": a list of themes to search
        await pilot.pause()
        await pilot.press(*"gruvbox")
        await until(pilot, "the palette to list gruvbox", lambda: "gruvbox" in str(
            pilot.app.screen.query_one("CommandList").get_option_at_index(0).prompt))
        await pilot.press("enter")
        await pilot.pause()
        assert app.theme == "gruvbox"
    assert json.loads(config.state_path().read_text())["theme"] == "gruvbox"
    async with tui(db_path) as (app, pilot):
        await key(pilot, "w")   # a screen painted in it, not just the attribute
        assert app.theme == "gruvbox"


def test_the_tui_is_given_the_files_theme(invoke, config_file, monkeypatch):
    given = {}

    class FakeApp:   # the TUI itself: only what it is given matters here
        def __init__(self, *args, theme=None, **kwargs):
            given["theme"], self.spawned = theme, []

        def run(self):
            pass

    monkeypatch.setattr("tui_agent.app.TuiAgentApp", FakeApp)
    config_file.write_text('theme = "dracula"\n')
    assert invoke().exit_code == 0
    assert given == {"theme": "dracula"}


async def test_the_files_theme_is_the_default_and_an_edit_after_a_choice_wins_over_it(db_path, config_file):
    async def launched(theme: str | None, choose: str | None = None) -> str:
        app = TuiAgentApp(db_path, poll_s=None, theme=theme)
        async with app.run_test() as pilot:
            opened = app.theme
            if choose:
                app.theme = choose
                await pilot.pause()
        return opened

    assert await launched("dracula", choose="gruvbox") == "dracula"   # nothing chosen yet: the file's
    assert await launched("dracula") == "gruvbox"                      # then what was chosen over it
    assert await launched("nord") == "nord"                            # until the file says another


async def test_a_worker_the_tui_starts_reads_the_same_config_file(db_path, config_file):
    config_file.write_text('lease = 90\n\n[worker]\nconcurrency = 3\nlease = 7.5\n')
    async with tui(db_path, cleanup=kill_all) as (app, pilot):
        await open_workers(pilot)
        _, row = await start_one(pilot)
    assert (row["concurrency"], row["lease_s"]) == (3, 7.5)
