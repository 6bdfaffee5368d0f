"""A step cannot hang a worker (runtime/deadlines.py, runtime/pool.py, runtime/commands.py): a call past its
deadline hands its run on and frees its slot; its thread is left behind, its late return refused; a person's park
or cancel frees the slot of a run inside a hung step (or agent code looping between its calls) within a third of
the lease; the wall-clock budget ends a run inside either; a worker with too many threads left behind stops
claiming; an effect's `do` past its deadline is reconciled, never retried; a program run by a step is stopped for
real, its whole process group killed. Real worker processes throughout; the watcher's hand-on write also on
PostgreSQL (`database`)."""

import json
import os
import signal
import time
from pathlib import Path

import pytest
from helpers import registry_of, start_and_work, until

from tui_agent import Agent
from tui_agent.runtime.clock import parse_instant

AGENTS = ["--agents", "deadline_agents"]


def _show(invoke, run_id: str) -> dict:
    done = invoke(*AGENTS, "show", run_id, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _start(invoke, agent: str, **request) -> str:
    done = invoke(*AGENTS, "start", agent, "--input", json.dumps(request))
    assert done.exit_code == 0, done.output
    return done.stdout.strip()


def _log(folder: Path) -> list[str]:
    path = folder / "log"
    return path.read_text().splitlines() if path.exists() else []


def _logged_at(folder: Path, what: str) -> float:
    [line] = [line for line in _log(folder) if line.rsplit(" ", 1)[0] == what]
    return float(line.rsplit(" ", 1)[1])


def _claimed_at(report: dict, attempt: int) -> float:
    [event] = [e for e in report["events"] if e["kind"] == "claimed" and f"(attempt {attempt}," in e["message"]]
    return parse_instant(event["at"])


def _err(tmp_path, proc) -> str:
    return (tmp_path / f"{proc.label}.err").read_text()


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


# -- a step past its deadline ---------------------------------------------------------------------------------


def test_a_step_past_its_timeout_counts_as_a_failed_attempt_is_retried_and_its_late_return_changes_nothing(
        invoke, spawn, tmp_path, database):
    folder, busy = tmp_path / "calls", tmp_path / "busy"
    folder.mkdir(), busy.mkdir()
    run_id = _start(invoke, "retried", dir=str(folder), timeout=0.5, sleep=3)
    _start(invoke, "hangs", dir=str(busy), sleep=5)   # in hand meanwhile: the worker goes on, it does not start afresh
    worker = spawn(*AGENTS, "worker", "--lease", "6", "--concurrency", "2", "--name", "w-a", label="w-a")
    until("the run to succeed", lambda: _show(invoke, run_id)["run"]["status"] == "succeeded", deadline_s=30,
          why=lambda: _err(tmp_path, worker))

    report = _show(invoke, run_id)
    [entry] = report["journal"]
    assert (entry["name"], entry["result"]) == ("slow", {"call": 2}), entry     # the retry's, not the late one's
    assert report["steps"][0]["attempts"] == 2, report["steps"]
    assert entry["fence"] == 3, entry   # the second claim's: attempt 1 was handed on with its fence grown (2)
    assert any(e["message"].startswith("slow: attempt 1 failed (StepTimedOut: still running after 0.5s, its "
                                       "deadline); next in ") for e in report["events"]), report["events"]
    # the first call did return, late (3 s), while this worker still ran: refused, and the run was claimed again
    # only once this process held no thread inside it
    assert _logged_at(folder, "returned 1") <= _claimed_at(report, 2), (_log(folder), report["events"])
    assert (folder / "calls").read_text().count("call") == 2
    err = _err(tmp_path, worker)
    assert (f"tui-agent: w-a: step 'slow' of {run_id} was still running after 0.5s, its deadline: attempt 1 counts "
            "as failed (StepTimedOut)") in err, err
    assert worker.poll() is None, err


def test_an_idle_worker_whose_thread_is_left_in_a_due_run_starts_afresh_and_retries_it(invoke, spawn, tmp_path):
    folder = tmp_path / "calls"
    folder.mkdir()
    run_id = _start(invoke, "retried", dir=str(folder), timeout=0.5, sleep=120)   # its first call never returns
    worker = spawn(*AGENTS, "worker", "--lease", "6", label="w-f")   # the one worker, named by itself
    until("the run to succeed", lambda: _show(invoke, run_id)["run"]["status"] == "succeeded", deadline_s=20,
          why=lambda: _err(tmp_path, worker))

    report = _show(invoke, run_id)
    took = _claimed_at(report, 2) - _logged_at(folder, "started 1")
    print(f"retried {took:.2f} s after the first call began (deadline 0.5 s)")
    assert took < 0.5 + 3, took
    assert [entry["result"] for entry in report["journal"]] == [{"call": 2}]
    assert "returned 1" not in " ".join(_log(folder))   # the thread left behind ended with the old process image
    err = _err(tmp_path, worker)
    assert (f"a run is due again ({run_id}) while this process still has a thread inside it, left behind by its "
            "deadline: this worker starts afresh (the same process id and arguments) to end that thread") in err, err
    [first, again] = [line for line in err.splitlines() if ": working " in line]
    assert first.split(":")[0] == again.split(":")[0], err   # the same worker name
    assert worker.poll() is None, err   # the same process, still working


@pytest.mark.parametrize("agent, begun, inside", [
    ("hangs", "started", "step 'hang'"),
    ("loops", "looping", "the agent's own code, between its journaled calls"),
], ids=["hung-step", "looping-code"])
def test_a_cancel_while_a_step_hangs_or_the_code_loops_frees_the_workers_slot_within_a_third_of_the_lease(
        invoke, spawn, tmp_path, agent, begun, inside):
    hung, quick = tmp_path / "hung", tmp_path / "quick"
    hung.mkdir(), quick.mkdir()
    lease = 3.0
    stuck = _start(invoke, agent, dir=str(hung), sleep=120)   # no deadline of its own: only a person ends it
    behind = _start(invoke, "hangs", dir=str(quick), sleep=0)
    worker = spawn(*AGENTS, "worker", "--lease", f"{lease:g}", "--concurrency", "1", "--name", "w-c", label="w-c")
    until("the step to hang or the code to loop", lambda: any(line.startswith(begun) for line in _log(hung)),
          why=lambda: _err(tmp_path, worker))
    cancelled_at = time.time()
    done = invoke(*AGENTS, "cancel", stuck)
    assert done.exit_code == 0, done.output
    until("the run behind it to succeed", lambda: _show(invoke, behind)["run"]["status"] == "succeeded",
          deadline_s=20, why=lambda: _err(tmp_path, worker))

    freed = _claimed_at(_show(invoke, behind), 1) - cancelled_at
    print(f"slot freed {freed:.2f} s after the cancel (lease {lease:g} s)")
    assert freed < lease / 3 + 0.5, freed   # one heartbeat (a third of the lease) and the loop's look
    assert _show(invoke, stuck)["run"]["status"] == "cancelled"
    err = _err(tmp_path, worker)
    assert f"{stuck} was taken (a person parked or cancelled it, or another worker's lease) while inside {inside}; " \
           "its thread is left behind" in err, err
    (hung / "go").touch()   # the looping code returns: its late return changes nothing
    time.sleep(0.5)
    assert _show(invoke, stuck)["run"]["status"] == "cancelled"
    assert worker.poll() is None, err


def test_the_wall_clock_budget_ends_a_run_inside_a_hung_step(tui_agent, invoke, tmp_path):
    started = time.monotonic()
    done = tui_agent(*AGENTS, "run", "walled", "--input", json.dumps({"dir": str(tmp_path)}))
    took = time.monotonic() - started
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "was still running when the run's wall_s budget ran out: parked (budget:wall_s)" in done.stdout, done.stdout
    assert took < 12, took   # the step sleeps 12 s under a 3 s ceiling: the run did not wait for it
    [run] = json.loads(invoke("ls", "--json").stdout)
    report = _show(invoke, run["id"])
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "budget:wall_s"), report["run"]
    assert 3 <= report["budget"]["dimensions"]["wall_s"]["used"] < 12, report["budget"]
    assert report["journal"] == []   # the step is run again when a person resumes with a larger budget


def test_the_wall_clock_budget_ends_a_run_whose_own_code_loops_between_its_calls(tui_agent, invoke, tmp_path):
    started = time.monotonic()
    done = tui_agent(*AGENTS, "run", "loops-walled", "--input", json.dumps({"dir": str(tmp_path)}), timeout=30)
    took = time.monotonic() - started
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert ("the agent's own code, between its journaled calls of r-" in done.stdout
            and "was still running when the run's wall_s budget ran out: parked (budget:wall_s)" in done.stdout), \
        done.stdout
    assert took < 2 + 3, took   # the 2 s ceiling and the watcher's look, not the loop (which never ends)
    [run] = json.loads(invoke("ls", "--json").stdout)
    report = _show(invoke, run["id"])
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "budget:wall_s"), report["run"]
    assert 2 <= report["budget"]["dimensions"]["wall_s"]["used"] < 5, report["budget"]
    assert [e["name"] for e in report["journal"]] == ["before"]


# -- the worker that holds threads left behind ----------------------------------------------------------------


def test_a_worker_with_too_many_threads_left_behind_stops_claiming_and_exits_once_its_other_runs_are_done(
        invoke, spawn, tmp_path):
    folders = [tmp_path / f"h{i}" for i in range(4)]
    for folder in folders:
        folder.mkdir()
    hung = [_start(invoke, "hangs", dir=str(f), timeout=0.3, sleep=120) for f in folders[:3]]
    waiting = _start(invoke, "waits", dir=str(folders[3]))
    worker = spawn(*AGENTS, "worker", "--concurrency", "4", "--lease", "6", "--name", "w-s", label="w-s")
    until("the worker to stop claiming", lambda: "threads are left behind" in _err(tmp_path, worker), deadline_s=20,
          why=lambda: _err(tmp_path, worker))
    later = _start(invoke, "hangs", dir=str(tmp_path), sleep=0)
    time.sleep(1.5)   # three looks of an idle worker's loop, were it claiming
    assert worker.poll() is None, "the worker left before its other run was done"
    assert _show(invoke, later)["run"]["status"] == "queued"

    (folders[3] / "go").touch()
    worker.wait(timeout=20)
    err = _err(tmp_path, worker)
    assert worker.returncode == 4, (worker.returncode, err)
    assert ("tui-agent: w-s: 3 threads are left behind inside calls that outlived their runs (" in err
            and "this worker claims nothing more and exits once its other runs are done: start a fresh worker "
                "(a supervisor or a timer does)" in err), err
    assert _show(invoke, waiting)["run"]["status"] == "succeeded"
    assert _show(invoke, later)["run"]["attempt"] == 0
    assert {_show(invoke, r)["run"]["status"] for r in hung} == {"waiting"}   # to retry, in a fresh worker


def test_worker_once_exits_at_once_when_only_threads_left_behind_remain(tui_agent, invoke, tmp_path):
    run_id = _start(invoke, "hangs-once", dir=str(tmp_path), sleep=60)   # the agent's step_timeout_s: 0.5 s
    done = tui_agent(*AGENTS, "worker", "--once", "--name", "w-o", timeout=30)   # the step alone sleeps 60 s
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "w-o: exits with 1 thread(s) left behind inside calls that outlived their runs" in done.stderr, done.stderr
    report = _show(invoke, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("failed", "error"), report["run"]
    assert report["run"]["error"] == "step 1 'hang' raised StepTimedOut: still running after 0.5s, its deadline"


def test_an_effects_do_past_its_deadline_is_unknown_and_reconciled_never_retried(tui_agent, invoke, tmp_path,
                                                                                  database):
    run_id = _start(invoke, "sends", dir=str(tmp_path), timeout=0.5, sleep=60)
    first = tui_agent(*AGENTS, "worker", "--once", "--name", "w-1", timeout=30)
    assert first.returncode == 0, (first.stdout, first.stderr)
    assert f"effect 'send' of {run_id}: do was still running after 0.5s, its deadline: its outcome is unknown" \
           in first.stderr, first.stderr
    [effect] = _show(invoke, run_id)["effects"]
    assert (effect["state"], effect["attempts"]) == ("unknown", 1), effect

    second = tui_agent(*AGENTS, "worker", "--once", "--name", "w-2", timeout=30)
    assert second.returncode == 0, (second.stdout, second.stderr)
    report = _show(invoke, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("waiting", "reconcile"), report["run"]
    assert [line.rsplit(" ", 1)[0] for line in _log(tmp_path)] == [f"do send:{run_id}"]   # never sent again
    assert any("outcome unknown: do was still running after 0.5s, its deadline; reconciled as after a crash"
               in e["message"] for e in report["events"]), report["events"]


# -- the call's own deadline, apart from the step's arguments -----------------------------------------------


def test_within_gives_one_step_its_deadline_and_leaves_every_keyword_to_the_steps_function(store):
    def echo(**kwargs):
        return kwargs

    def agent(ctx, request):
        return [ctx.within(5).step("a", echo, name="n", fn="f", timeout=7, timeout_s=8),
                ctx.step("b", echo, name="n", fn="f", timeout_s=9)]

    outcome = start_and_work(store, registry_of(Agent(name="kw", run=agent)), "kw", {})
    assert outcome.result == [{"name": "n", "fn": "f", "timeout": 7, "timeout_s": 8},
                              {"name": "n", "fn": "f", "timeout_s": 9}], outcome


# -- a program run by a step --------------------------------------------------------------------------------


GROUP = ["sh", "-c", "sleep 120 & echo $! > pids; echo $$ >> pids; wait"]   # a program and its child, one group


def test_run_command_records_exit_code_and_output_of_a_program_fed_its_stdin(tui_agent, invoke, tmp_path):
    argv = ["sh", "-c", "echo out; echo err >&2; read line; echo got $line; exit 3"]
    done = tui_agent(*AGENTS, "run", "runs", "--input", json.dumps({"dir": str(tmp_path), "argv": argv,
                                                                     "stdin": "hi\n"}))
    assert done.returncode == 0, (done.stdout, done.stderr)
    [run] = json.loads(invoke("ls", "--json").stdout)
    [entry] = _show(invoke, run["id"])["journal"]
    result = entry["result"]
    assert (result["argv"], result["exit"], result["stdout"], result["stderr"]) == (argv, 3, "out\ngot hi\n", "err\n")


def test_run_command_kills_the_whole_process_group_at_its_timeout(tui_agent, invoke, tmp_path):
    done = tui_agent(*AGENTS, "run", "runs", "--input", json.dumps({"dir": str(tmp_path), "argv": GROUP,
                                                                     "timeout": 0.5}), timeout=30)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "raised StepTimedOut: sh was still running after 0.5s, its timeout; its process group was killed" \
           in done.stdout, done.stdout
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2 and all(_gone(pid) for pid in pids), pids


@pytest.mark.parametrize("action", ["cancel", "park"])
def test_a_person_taking_a_run_kills_the_program_its_step_runs(invoke, spawn, tmp_path, action):
    run_id = _start(invoke, "runs", dir=str(tmp_path), argv=GROUP)
    worker = spawn(*AGENTS, "worker", "--lease", "3", "--name", "w-p", label="w-p")
    until("the program to start", lambda: (tmp_path / "pids").exists()
          and len((tmp_path / "pids").read_text().split()) == 2, why=lambda: _err(tmp_path, worker))
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    done = invoke(*AGENTS, action, run_id)
    assert done.exit_code == 0, done.output
    until("the program and its child to be killed", lambda: all(_gone(pid) for pid in pids), deadline_s=5,
          why=lambda: _err(tmp_path, worker))
    assert worker.poll() is None, _err(tmp_path, worker)
    if action == "park":   # resumed, it runs the program again (nothing was recorded), in the same worker
        (tmp_path / "pids").unlink()
        assert invoke(*AGENTS, "resume", run_id).exit_code == 0
        until("the program to start again", lambda: (tmp_path / "pids").exists(), why=lambda: _err(tmp_path, worker))
        os.kill(int((tmp_path / "pids").read_text().split()[0]), signal.SIGKILL)   # its child: the program ends
        until("the run to end", lambda: _show(invoke, run_id)["run"]["status"] == "succeeded",
              why=lambda: _err(tmp_path, worker))
