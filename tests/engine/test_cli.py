import json

import pytest
from helpers import stdout_ok

from tui_agent import __version__


def test_run_hello_prints_the_id_and_result(invoke):
    out = stdout_ok(invoke("run", "hello", "--input", '{"name": "Ada", "delay_s": 0}'))
    first, second = out.strip().splitlines()
    run_id, status, reason = first.split()
    assert run_id.startswith("r-")
    assert len(run_id) == 10
    assert (status, reason) == ("succeeded", "(check_passed)")
    assert json.loads(second) == {"greeting": "Hello, Ada!", "loud": "HELLO, ADA!", "letters": 8, "distinct": 6}


def test_start_prints_the_id_alone_and_a_key_makes_one_run(invoke):
    first = stdout_ok(invoke("start", "hello", "--key", "nightly:2026-11-29"))
    second = stdout_ok(invoke("start", "hello", "--key", "nightly:2026-11-29"))
    other = stdout_ok(invoke("start", "hello", "--key", "nightly:2026-11-30"))
    assert first == second
    assert first.strip().startswith("r-")
    assert "\n" not in first.strip()
    assert other != first
    assert len(json.loads(stdout_ok(invoke("ls", "--json")))) == 2


def test_worker_once_works_queued_runs(invoke):
    ids = [stdout_ok(invoke("start", "hello", "--input", '{"delay_s": 0}')).strip() for _ in range(3)]
    result = invoke("worker", "--once", "--name", "w-t")
    stdout_ok(result)
    assert all(f"w-t claimed {i}" in result.stderr for i in ids)
    rows = json.loads(stdout_ok(invoke("ls", "--json")))
    assert {r["status"] for r in rows} == {"succeeded"}
    assert "no run is due" in invoke("worker", "--once").stderr


def test_ls_json_shape(invoke):
    stdout_ok(invoke("run", "hello", "--input", '{"delay_s": 0}'))
    stdout_ok(invoke("start", "hello"))
    rows = json.loads(stdout_ok(invoke("ls", "--json")))
    assert len(rows) == 2
    for row in rows:
        assert {"id", "agent", "status", "reason", "attempt", "created_at"} <= set(row)
    assert [r["status"] for r in rows] == ["queued", "succeeded"], "newest first"
    assert rows[0]["created_at"].endswith("Z")
    assert [r["id"] for r in json.loads(stdout_ok(invoke("ls", "--status", "queued", "--json")))] == [rows[0]["id"]]


def test_show_json_shape(invoke):
    run_id = stdout_ok(invoke("run", "hello", "--input", '{"delay_s": 0}')).split()[0]
    report = json.loads(stdout_ok(invoke("show", run_id[:5], "--json")))
    assert set(report) == {"run", "checkpoint", "steps", "journal", "effects", "events", "budget", "approvals",
                           "model_calls", "imported"}
    assert report["model_calls"] == []  # hello asks no model
    assert report["run"]["id"] == run_id
    assert report["run"]["status"] == "succeeded"
    assert report["run"]["code_version"]
    assert report["run"]["agent_version"] == "1"
    assert [s["name"] for s in report["steps"]] == ["greet", "count-letters", "shout"]
    assert report["journal"][0]["result"] == "Hello, world!"
    assert report["checkpoint"]["current_step"] == 3
    assert report["checkpoint"]["total_steps"] == 3
    assert report["effects"] == []
    assert [e["kind"] for e in report["events"]] == ["queued", "claimed", "succeeded"]
    assert report["budget"]["dimensions"]["steps"] == {"used": 3, "limit": 10, "fraction": 0.3, "percent": 30.0,
                                                       "soft_crossed": False, "default": False}


def test_show_human_names_steps_and_events(invoke):
    run_id = stdout_ok(invoke("run", "hello", "--input", '{"delay_s": 0}')).split()[0]
    out = stdout_ok(invoke("show", run_id))
    assert run_id in out
    assert "count-letters" in out
    assert "claimed by" in out


def test_agents_from_a_module_are_registered(invoke):
    out = stdout_ok(invoke("--agents", "counting_agents", "agents"))
    assert "counting" in out
    assert "failing" in out
    assert "hello" in out


def test_agents_env_var_registers_too(invoke, monkeypatch):
    monkeypatch.setenv("TUI_AGENT_AGENTS", "counting_agents")
    assert "counting" in stdout_ok(invoke("agents"))


def test_a_failed_run_exits_1_with_its_error(invoke):
    result = invoke("--agents", "counting_agents", "run", "failing")
    assert result.exit_code == 1
    assert "failed (error): step 1 'boom' raised ValueError: the source is missing" in result.stdout


@pytest.mark.parametrize("args, words", [
    (["run", "nope"], "no agent named 'nope'"),
    (["run", "hello", "--input", "{not json"], "--input is not valid JSON"),
    (["run", "hello", "--input", "[1, 2]"], "must be a JSON object"),
    (["run", "hello", "--input", "@/no/such/file.json"], "cannot read"),
    (["--agents", "no_such_module_xyz", "agents"], "cannot import"),
    (["show", "r-ffffffff"], "no run has an id starting with"),
    (["ls", "--status", "sleeping"], "'sleeping' is not one of"),
    (["frobnicate"], "No such command"),
    (["run"], "Missing argument 'AGENT'"),
    (["--durability", "sometimes", "ls"], "--durability"),
    (["worker", "--concurrency", "0"], "--concurrency"),
])
def test_user_mistakes_are_one_line_and_exit_2(invoke, store, args, words):
    result = invoke(*args)  # `store`: the database exists, so `show` gets as far as looking for the run
    assert result.exit_code == 2
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_an_ambiguous_prefix_says_so(invoke, monkeypatch):
    from tui_agent.store import runs
    ids = iter(["r-abc00001", "r-abc00002"])
    monkeypatch.setattr(runs, "_new_id", lambda conn: next(ids))
    stdout_ok(invoke("start", "hello"))
    stdout_ok(invoke("start", "hello"))
    result = invoke("show", "abc")
    assert result.exit_code == 2
    assert "ambiguous" in result.stderr
    assert json.loads(stdout_ok(invoke("show", "abc00002", "--json")))["run"]["id"] == "r-abc00002"
    assert json.loads(stdout_ok(invoke("show", "r-abc00001", "--json")))["run"]["id"] == "r-abc00001"


def test_input_from_a_file(invoke, tmp_path):
    request = tmp_path / "req.json"
    request.write_text('{"name": "Grace", "delay_s": 0}')
    assert "Hello, Grace!" in stdout_ok(invoke("run", "hello", "--input", f"@{request}"))


def test_version(invoke):
    assert __version__ in stdout_ok(invoke("--version"))


def test_the_console_script_runs_hello_end_to_end(tui_agent):
    done = tui_agent("run", "hello", "--input", '{"delay_s": 0}')
    assert done.returncode == 0, done.stderr
    assert "succeeded (check_passed)" in done.stdout


def test_nightly_report_with_an_unknown_source_fails_and_says_which(invoke):
    result = invoke("run", "nightly-report", "--input", '{"sources": ["sales", "weather"]}')
    assert result.exit_code == 1
    assert "there is no source 'weather'" in result.stdout
    assert "PermanentError" in result.stdout


def test_nightly_report_journals_the_model_reply_with_its_cost(invoke):
    run_id = stdout_ok(invoke("run", "nightly-report", "--input", '{"date": "2026-11-20"}')).split()[0]
    report = json.loads(stdout_ok(invoke("show", run_id, "--json")))
    (model,) = [s for s in report["steps"] if s["kind"] == "model"]
    assert model["name"] == "summarize"
    assert model["cost_usd"] > 0
    reply = next(e["result"] for e in report["journal"] if e["name"] == "summarize")
    assert reply["type"] == "message"
    assert reply["content"][0]["type"] == "text"
    assert report["budget"]["dimensions"]["model_calls"]["used"] == 1
    assert report["budget"]["dimensions"]["cost_usd"]["used"] == pytest.approx(model["cost_usd"])
    assert report["budget"]["unpriced_model_calls"] == 0
    assert [(e["name"], e["state"], e["attempts"]) for e in report["effects"]] == [("send-report", "confirmed", 1)]
    assert report["effects"][0]["key"] == "nightly-report:2026-11-20:team"


def test_a_bad_model_spec_is_a_usage_error(invoke):
    result = invoke("start", "hello", "--model", "gpt-9")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["agents", "start", "run", "worker", "workers", "ls", "show", "resume", "park",
                                     "cancel", "approve", "reconcile", "fork"])
def test_every_operator_command_exists(invoke, command):
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert f"Usage: cli {command}" in result.stdout
