"""`ctx.run_command` (runtime/commands.py, store/commands.py): the program's output streamed to files kept as
artifacts with its tail in the entry; the names of `env`, never its values, in the database; its process group and
start time committed before it runs, so that after a `kill -9` of the worker the next claim kills what is left of
it before the run goes on, and a worker killed before that record runs nothing; a replay returns the recorded
result without running the program again. Real worker processes throughout; the claim's kill on PostgreSQL too."""

import json
import signal
import time
from pathlib import Path

from helpers import later, ok, show_json, until

from tui_agent.store.host import process_alive, process_start

AGENTS = ["--agents", "command_agents"]


def _start(tui_agent, request: dict) -> str:
    return ok(tui_agent(*AGENTS, "start", "runs-then-steps", "--input", json.dumps(request))).stdout.strip()


def _gone(pid: int, started: int | None) -> bool:
    return not process_alive(pid, started)


def test_output_is_streamed_to_artifacts_with_its_tail_in_the_entry_and_env_values_never_stored(
        tui_agent, tmp_path, db_path):
    secret = "hunter2-not-for-the-journal"
    # 3,000 numbered lines on stdout, one line on stderr; the variable's value goes to a file of the test's
    script = f"for i in $(seq 3000); do echo line $i; done; echo warned >&2; echo \"$TOKEN\" > {tmp_path}/seen"
    request = {"dir": str(tmp_path), "argv": ["sh", "-c", script], "pass": ["TOKEN"], "limit": 100}
    done = ok(tui_agent(*AGENTS, "run", "runs-then-steps", "--input", json.dumps(request), env={"TOKEN": secret}))
    run_id = done.stdout.split()[0]
    entry = show_json(tui_agent, run_id)["journal"][0]["result"]
    assert entry["exit"] == 0 and entry["env"] == ["TOKEN"], entry
    assert len(entry["stdout"].encode()) == 100 and entry["stdout"].endswith("line 2999\nline 3000\n"), entry
    whole = Path(entry["stdout_artifact"]).read_text()
    assert whole.splitlines() == [f"line {i}" for i in range(1, 3001)]
    assert Path(entry["stderr_artifact"]).read_text() == "warned\n" == entry["stderr"]
    assert ok(tui_agent("artifact", entry["stdout_artifact"])).stdout == whole   # the operator reads it back
    assert (tmp_path / "seen").read_text() == f"{secret}\n"   # the program had it, the database never did
    stored = [path for path in db_path.parent.rglob("*") if path.is_file() and path != tmp_path / "seen"]
    assert db_path in stored and not [path for path in stored if secret.encode() in path.read_bytes()]


def test_the_next_claim_kills_what_a_killed_worker_left_of_its_program_before_the_run_goes_on(
        tui_agent, spawn, tmp_path, database):
    pids = tmp_path / "pids"
    # the first run of the program starts a child and both sleep; a later one records whether the first run's
    # processes were still there (not zombies) when it began, then ends
    alive = "s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); [ -n \"$s\" ] && [ \"$s\" != Z ] && echo alive $p"
    script = (f"if [ -e {tmp_path}/ran ]; then for p in $(cat {pids}); do {alive}; done > {tmp_path}/seen; exit 0; "
              f"fi; touch {tmp_path}/ran; sleep 120 & echo $$ $! > {pids}; wait")
    run_id = _start(tui_agent, {"dir": str(tmp_path), "argv": ["sh", "-c", script]})
    first = spawn(*AGENTS, "worker", "--name", "w-a", label="w-a", own_group=True)
    until("the program and its child to start", lambda: pids.exists() and len(pids.read_text().split()) == 2,
          why=lambda: (tmp_path / "w-a.err").read_text())
    left = [(pid, process_start(pid)) for pid in map(int, pids.read_text().split())]
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    time.sleep(0.3)
    assert all(process_alive(pid, started) for pid, started in left), "kill -9 of the worker leaves its program"

    second = spawn(*AGENTS, "worker", "--name", "w-b", label="w-b")
    until("the run to succeed", lambda: show_json(tui_agent, run_id)["run"]["status"] == "succeeded",
          why=lambda: (tmp_path / "w-b.err").read_text())
    assert all(_gone(pid, started) for pid, started in left)
    assert (tmp_path / "seen").read_text() == "", "the program ran again only once the first one's group was gone"
    report = show_json(tui_agent, run_id)
    [killed] = [e for e in report["events"] if e["kind"] == "command"]
    assert killed["message"] == (f"killed what was left of the program sh (program, process group {left[0][0]}) "
                                 "that an earlier claim started, before this claim touches the run"), killed
    assert killed["worker"] == "w-b"
    second.send_signal(signal.SIGTERM)
    second.wait(timeout=15)


def test_a_worker_killed_before_its_programs_group_is_recorded_runs_nothing(tui_agent, tmp_path):
    marker = tmp_path / "ran"
    run_id = _start(tui_agent, {"dir": str(tmp_path), "argv": ["touch", str(marker)]})
    crashed = tui_agent(*AGENTS, "worker", "--once", env={"TUI_AGENT_CRASH_AT": "command-gated"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, crashed.stderr)
    time.sleep(0.5)   # the gate read end of file when its worker died: it exits without running the program
    assert not marker.exists()
    ok(tui_agent(*AGENTS, "worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    assert marker.exists()
    assert show_json(tui_agent, run_id)["run"]["status"] == "succeeded"


def test_a_replay_returns_the_recorded_result_without_running_the_program_again(tui_agent, tmp_path):
    count = tmp_path / "count"
    run_id = _start(tui_agent, {"dir": str(tmp_path), "argv": ["sh", "-c", f"echo run >> {count}; echo said $$"]})
    crashed = tui_agent(*AGENTS, "worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-step-commit"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    recorded = show_json(tui_agent, run_id)["journal"][0]["result"]
    ok(tui_agent(*AGENTS, "worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded"
    assert count.read_text() == "run\n", "the program ran once"
    assert report["run"]["result"] == recorded and recorded["stdout"].startswith("said "), report["run"]
