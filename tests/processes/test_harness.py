"""The harness agent (agents/harness.py) over a fake command-line coding agent (tests/fixtures/fake_coding_agent.py)
on a tiny repository with a four-task plan (tests/harness_repo.py): the loop to success, the harness deciding
every ending (a test edited to pass, a box ticked by the worker, "all done" claimed, a test broken), the plateaus
and a person's rule, `tui-agent harness init`, and the sample with the built-in model worker. Real `tui-agent`
processes throughout."""

import json
import os
from pathlib import Path

import pytest
from fake_messages import message
from harness_repo import (
    BRANCH,
    FAKE,
    IDS,
    PY,
    TASKS,
    doing_each_task,
    git,
    make_repo,
    module,
    request,
    script,
    snapshot,
    trailers,
)
from helpers import key, later, ok, open_run, rendered, select, show_json, tui

from tui_agent.agents.githost import GitHost


def _worktree(tui_agent, run_id: str) -> Path:
    return Path(show_json(tui_agent, run_id)["journal"][1]["result"]["worktree"])


def _events(report: dict) -> list[str]:
    return [e["message"] for e in report["events"]]


def test_a_fake_coding_agent_works_a_four_task_plan_to_success_and_the_users_checkout_is_untouched(
        tui_agent, tmp_path):
    repo = make_repo(tmp_path)
    before, head = snapshot(repo), git(repo, "rev-parse", "HEAD")
    done = ok(tui_agent("run", "harness", "--input", request(repo, doing_each_task(tmp_path / "agent"))))
    run_id = done.stdout.split()[0]
    assert f"{run_id} succeeded (check_passed)" in done.stdout, done.stdout

    tree = _worktree(tui_agent, run_id)
    commits = trailers(repo)
    assert [c["subject"] for c in commits] == TASKS
    assert [(c["Tui-Agent-Run"], c["Tui-Agent-Task"], c["Tui-Agent-Iteration"]) for c in commits] == [
        (run_id, IDS[k], str(k + 1)) for k in range(4)]
    plan = git(repo, "show", f"{BRANCH}:PLAN.md")
    assert [line for line in plan.splitlines() if line.startswith("- [")] == [f"- [x] {t}" for t in TASKS]
    progress = git(repo, "show", f"{BRANCH}:PROGRESS.md")
    assert [line for line in progress.splitlines() if line.startswith("## ")] == [f"## {t}" for t in TASKS]
    assert [line for line in progress.splitlines() if line.startswith("- verdict:")] == [
        f"- verdict: passed: {k} -> {k + 1} tests passing" for k in range(1, 5)]
    assert all(git(repo, "show", f"{BRANCH}:pkg/m{k}.py") == module(k) for k in range(1, 5))
    assert snapshot(repo) == before and git(repo, "rev-parse", "HEAD") == head   # the user's checkout
    assert git(repo, "status", "--porcelain") == ""
    assert git(tree, "status", "--porcelain") == ""

    report = show_json(tui_agent, run_id)
    assert [e["state"] for e in report["effects"]] == ["confirmed"] * 4
    assert [e["key"] for e in report["effects"]] == [f"harness:{run_id}:{i}" for i in IDS]
    assert report["budget"]["dimensions"]["model_calls"]["used"] == 4   # one unpriced call per iteration
    assert report["budget"]["unpriced_model_calls"] == 4
    assert report["run"]["result"]["final_check"]["passed"] is True


def test_the_harness_decides_a_test_edited_to_pass_a_box_ticked_by_the_worker_and_all_done_are_not_accepted(
        tui_agent, tmp_path):
    repo = make_repo(tmp_path, tasks=2)
    gamed = "import unittest\n\n\nclass M1(unittest.TestCase):\n    def test_f(self):\n        pass\n"
    agent = script(tmp_path / "agent", {
        IDS[0]: [[{"write": {"tests/test_m1.py": gamed}}], [{"write": {"pkg/m1.py": module(1)}}]],
        IDS[1]: [[{"tick": True}, {"progress": "## done it all"}, {"say": "all done"}],
                 [{"write": {"pkg/m2.py": module(2)}}]]})
    done = ok(tui_agent("run", "harness", "--input", request(repo, agent)))
    run_id = done.stdout.split()[0]
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded", report["run"]
    iterations = [e["result"] for e in report["journal"] if e["kind"] == "effect"]
    assert [(o["task_id"], o["status"]) for o in iterations] == [(IDS[0], "open"), (IDS[0], "done"),
                                                                  (IDS[1], "open"), (IDS[1], "done")]
    assert [e["state"] for e in report["effects"]] == ["not_done", "confirmed", "not_done", "confirmed"]
    events = _events(report)
    assert "iteration 1: test gaming: the coding agent changed tests/test_m1.py, the oracle's: restored from the " \
           "base commit before the check" in events, events
    assert iterations[0]["gamed"] == ["tests/test_m1.py"] and iterations[0]["why"].startswith("the check failed")
    assert "iteration 3: the coding agent changed PLAN.md, PROGRESS.md itself: restored (the harness ticks the " \
           "plan and writes the progress log)" in events, events
    assert iterations[2]["agent"]["claim"] == "worked on " + IDS[1]   # its last line: "all done" came before it
    assert "all done" in Path(iterations[2]["agent"]["log"]).read_text()
    # what reached the branch: the tests as they were, one tick and one entry per task, by the harness
    assert git(repo, "show", f"{BRANCH}:tests/test_m1.py") == git(repo, "show", "main:tests/test_m1.py")
    progress = git(repo, "show", f"{BRANCH}:PROGRESS.md")
    assert "done it all" not in progress and progress.count("\n## ") == 2
    assert [c["Tui-Agent-Iteration"] for c in trailers(repo)] == ["2", "4"]


def test_an_iteration_that_breaks_a_test_that_passed_before_is_rolled_back_blocked_and_waits_for_a_rule(
        tui_agent, tmp_path):
    repo = make_repo(tmp_path, tasks=1)
    broken = "def one():\n    return 2\n"
    agent = script(tmp_path / "agent", {IDS[0]: [[{"write": {"pkg/m1.py": module(1), "pkg/base.py": broken}}],
                                                 [{"write": {"pkg/m1.py": module(1)}}]]})
    waited = tui_agent("run", "harness", "--input", request(repo, agent))
    assert waited.returncode == 3, (waited.stdout, waited.stderr)
    run_id = waited.stdout.split()[0]
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("waiting", "plateau"), report["run"]
    [outcome] = [e["result"] for e in report["journal"] if e["kind"] == "effect"]
    assert outcome["status"] == "blocked" and outcome["task_check"]["passed"], outcome
    assert outcome["why"] == "it broke 1 test(s) that passed before: tests.test_base.Base.test_one", outcome
    tree = _worktree(tui_agent, run_id)
    assert (tree / "pkg/base.py").read_text() == "def one():\n    return 1\n" and not (tree / "pkg/m1.py").exists()
    assert f"plateau: task {IDS[0]} is blocked: it broke 1 test(s)" in report["events"][-1]["message"]

    said = ok(tui_agent("harness", "rule", run_id, "Do not change pkg/base.py."))
    assert said.stdout.startswith(f"{run_id}: rule committed in {tree} (") and "resumed" in said.stdout
    assert (tree / "RULES.md").read_text() == "# Rules\n- Do not change pkg/base.py.\n"
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded", report["run"]
    assert [c["subject"] for c in trailers(repo)] == ["Rule: Do not change pkg/base.py.", TASKS[0]]
    prompts = [line for line in (tmp_path / "agent" / "starts").read_text().splitlines()]
    assert len(prompts) == 2
    assert git(repo, "show", f"{BRANCH}:pkg/base.py") == "def one():\n    return 1\n"


PLATEAUS = {
    # the worker changes nothing: the oracle's state stays as it was
    "unchanged": ([[], []], {"unchanged": 2, "shrinking": 9, "same_failure": 9},
                  "the oracle's state did not change for 2 iterations"),
    # a wrong answer each time, a different file each time (so the state is not the point): one failure again
    "same_failure": ([[{"write": {"pkg/m1.py": "def f():\n    return 0\n", f"notes/{n}.txt": "x\n" * n}}]
                      for n in range(1, 4)], {"unchanged": 9, "shrinking": 9, "same_failure": 3},
                     "the check failed the same way 3 times in a row: failing: tests.test_m1.M1.test_f"),
    # ever smaller wrong diffs
    "shrinking": ([[{"write": {"pkg/m1.py": "def f():\n" + "    x = 0\n" * n + "    return 0\n"}}]
                   for n in (4, 3, 2)], {"unchanged": 9, "shrinking": 2, "same_failure": 9},
                  "the diff shrank 2 iterations in a row (to 4 lines)"),
}


@pytest.mark.parametrize("trigger", PLATEAUS)
def test_a_worker_making_no_progress_ends_on_a_plateau_waiting_for_a_person_and_a_rule_then_resume_goes_on(
        tui_agent, tmp_path, trigger):
    attempts, plateau, said = PLATEAUS[trigger]
    count = len(attempts)
    repo = make_repo(tmp_path, tasks=1)
    agent = script(tmp_path / "agent", {IDS[0]: [*attempts, [{"write": {"pkg/m1.py": module(1)}}]]})
    waited = tui_agent("run", "harness", "--input", request(repo, agent, plateau=plateau))
    assert waited.returncode == 3, (waited.stdout, waited.stderr)
    run_id = waited.stdout.split()[0]
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("waiting", "plateau"), report["run"]
    assert report["events"][-1]["message"].startswith(f"plateau: {said} (escalate)"), report["events"][-1]
    assert [e["result"]["status"] for e in report["journal"] if e["kind"] == "effect"] == ["open"] * count
    ok(tui_agent("harness", "rule", run_id, "Write f so that it returns the module's number."))
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded", report["run"]
    assert len((tmp_path / "agent" / "starts").read_text().splitlines()) == count + 1
    assert "- Write f so that it returns the module's number." in git(repo, "show", f"{BRANCH}:RULES.md")


def test_a_hung_coding_agent_is_killed_at_its_timeout_rolled_back_and_run_again_with_no_worker_held_meanwhile(
        tui_agent, tmp_path):
    repo = make_repo(tmp_path, tasks=1)
    agent = script(tmp_path / "agent", {IDS[0]: [[{"write": {"pkg/m1.py": "def f(:\n"}}, {"hang": True}],
                                                 [{"write": {"pkg/m1.py": module(1)}}]]})
    run_id = ok(tui_agent("start", "harness", "--input", request(repo, agent, timeout_s=2))).stdout.strip()
    ok(tui_agent("worker", "--once"))   # the first attempt hangs; killed at 2 s, the run waits out its back-off
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"], report["run"]["worker"]) == ("waiting", "retry", None)
    [hung] = [int(line.split()[1]) for line in (tmp_path / "agent" / "starts").read_text().splitlines()]
    assert not Path(f"/proc/{hung}").exists() or Path(f"/proc/{hung}/stat").read_text().split()[2] == "Z"
    [effect] = report["effects"]
    assert effect["state"] == "not_done" and effect["attempts"] == 1, effect
    assert any("outcome unknown: do raised StepTimedOut: " in m and "was still running after 2s, its timeout; its "
               "process group was killed" in m for m in _events(report)), _events(report)
    until_due = ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(5)}))
    assert until_due.returncode == 0
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded", report["run"]
    tree = _worktree(tui_agent, run_id)
    assert "iteration 1: rolled back what an earlier attempt left in the worktree (pkg/m1.py) to " in \
           "\n".join(_events(report))
    assert (tree / "pkg/m1.py").read_text() == module(1)
    [effect] = report["effects"]
    assert (effect["state"], effect["attempts"]) == ("confirmed", 2)


@pytest.mark.parametrize("change", ["lock file", "command"])
def test_a_changed_lock_file_or_a_missing_coding_agent_command_between_iterations_parks_the_run_naming_it(
        tui_agent, tmp_path, change):
    repo = make_repo(tmp_path, tasks=2)
    (repo / "requirements.txt").write_text("requests==2.0\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pins")
    command = tmp_path / "bin" / "fake-agent"
    command.parent.mkdir()
    command.write_text(f"#!/bin/sh\nexec {PY} -I -S {FAKE} \"$@\"\n")
    command.chmod(0o755)
    made = command.stat().st_mtime_ns
    first = {"write": {"pkg/m1.py": module(1), "requirements.txt": "requests==2.1\n"}} if change == "lock file" else \
        {"write": {"pkg/m1.py": module(1)}}
    steps = [first] if change == "lock file" else [first, {"remove": str(command)}]
    agent = script(tmp_path / "agent", {IDS[0]: [steps], IDS[1]: [[{"write": {"pkg/m2.py": module(2)}}]]})
    path = {"PATH": f"{command.parent}:{os.environ['PATH']}"}
    fields = json.loads(request(repo, agent))
    fields["worker"]["command"] = ["fake-agent", str(agent)]
    parked = tui_agent("run", "harness", "--input", json.dumps(fields), env=path)
    assert parked.returncode == 1, (parked.stdout, parked.stderr)
    run_id = parked.stdout.split()[0]
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "environment"), report["run"]
    changed = ("the lock file requirements.txt changed" if change == "lock file" else
               f"the coding agent's command fake-agent is no longer on PATH (it was {command})")
    assert report["events"][-1]["message"].startswith(f"parked: the environment changed since the run last "
                                                      f"accepted it: {changed}. Put it back, or resume"), report["events"]
    assert [c["Tui-Agent-Task"] for c in trailers(repo)] == [IDS[0]]   # iteration 2 did not start
    if change == "command":   # put back as it was (its time too): the run goes on as if nothing had happened
        command.write_text(f"#!/bin/sh\nexec {PY} -I -S {FAKE} \"$@\"\n")
        command.chmod(0o755)
        os.utime(command, ns=(made, made))
    ok(tui_agent("resume", run_id))
    ok(tui_agent("worker", "--once", env=path))
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded", report["run"]
    accepted = [m for m in _events(report) if "went on with the environment as it is now, as resumed" in m]
    assert bool(accepted) == (change == "lock file"), accepted


def test_harness_init_writes_starter_files_prints_how_to_commit_them_and_commit_commits(tui_agent, tmp_path):
    repo = tmp_path / "mine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "RULES.md").write_text("# Our rules\n")
    done = ok(tui_agent("harness", "init", str(repo)))
    assert done.stdout.splitlines() == [
        "wrote PLAN.md, PROGRESS.md; commit them before a run:",
        f"  git -C {repo} add -- PLAN.md PROGRESS.md",
        f"  git -C {repo} commit -m 'harness: plan, progress and rules' -- PLAN.md PROGRESS.md"]
    assert (repo / "RULES.md").read_text() == "# Our rules\n"   # what was there stays
    assert git(repo, "status", "--porcelain") == "?? PLAN.md\n?? PROGRESS.md\n?? RULES.md\n"   # nothing committed
    assert "- [ ] " in (repo / "PLAN.md").read_text()
    again = tui_agent("harness", "init", str(repo))
    assert again.returncode == 2 and again.stderr == (f"tui-agent: {repo} has PLAN.md, PROGRESS.md and RULES.md "
                                                      "already; nothing written\n"), again.stderr

    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    ok(tui_agent("harness", "init", "--commit", str(other)))
    assert git(other, "log", "--format=%s") == "harness: plan, progress and rules\n"
    assert git(other, "ls-files") == "PLAN.md\nPROGRESS.md\nRULES.md\n"
    outside = tui_agent("harness", "init", str(tmp_path / "nowhere"))
    assert outside.returncode == 2 and "is not in a git repository" in outside.stderr, outside.stderr


def test_a_run_on_a_repository_without_a_committed_plan_fails_saying_how_to_start_one(tui_agent, tmp_path):
    repo = tmp_path / "mine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "PLAN.md").write_text("# Not committed\n\n- [ ] A task\n")
    git(repo, "commit", "-q", "--allow-empty", "-m", "empty")
    failed = tui_agent("run", "harness", "--input", json.dumps({"repo": str(repo), "check": ["true"],
                                                                "worker": {"command": ["true"]}}))
    assert failed.returncode == 1
    assert f"has no PLAN.md in its last commit: the run starts from the committed plan (tui-agent harness init " \
           f"{repo} writes starter files" in failed.stdout, failed.stdout
    without_check = tui_agent("run", "harness", "--input", json.dumps({"repo": str(repo)}))
    assert "give the check, the oracle the harness runs after each iteration" in without_check.stdout


def test_the_sample_runs_offline_with_the_built_in_model_worker_to_success(tui_agent):
    done = ok(tui_agent("run", "harness"))
    run_id = done.stdout.split()[0]
    report = show_json(tui_agent, run_id)
    assert report["run"]["result"]["tasks"] == {"done": 3, "total": 3}
    tree = Path(report["run"]["result"]["worktree"])
    assert [c["Tui-Agent-Iteration"] for c in trailers(tree, "harness/calc-statistics")] == ["1", "2", "3"]
    assert [e["kind"] for e in report["journal"][3:9]] == ["step", "step", "model", "tool", "model", "effect"]


def test_the_built_in_model_worker_does_one_task_through_the_fake_messages_api(tui_agent, fake, tmp_path):
    repo = make_repo(tmp_path, tasks=1)
    write = {"type": "tool_use", "id": "toolu_1", "name": "write_file",
             "input": {"path": "pkg/m1.py", "content": module(1)}}
    fake.play({"body": {**message(), "stop_reason": "tool_use", "content": [write]}},
              {"body": message("Wrote pkg/m1.py.")})
    fields = {"repo": str(repo), "check": [PY, "-m", "unittest"], "worker": {"model": "claude-sonnet-4-5"}}
    done = ok(tui_agent("run", "harness", "--model", "anthropic", "--input", json.dumps(fields)))
    run_id = done.stdout.split()[0]
    report = show_json(tui_agent, run_id)
    assert report["run"]["result"]["tasks"] == {"done": 1, "total": 1}
    first, second = (r["body"] for r in fake.requests)
    assert first["model"] == "claude-sonnet-4-5"
    prompt = first["messages"][0]["content"][0]["text"] if isinstance(first["messages"][0]["content"], list) \
        else first["messages"][0]["content"]
    assert f"- [ ] {TASKS[0]}    <-- YOUR TASK" in prompt and f"(id `{IDS[0]}`" in prompt
    assert second["messages"][-1]["content"][0]["type"] == "tool_result"
    assert git(repo, "show", f"{BRANCH}:pkg/m1.py") == module(1)


def test_the_harness_ceilings_park_the_run_with_reasons_of_their_own_until_a_person_raises_them(tui_agent, tmp_path):
    repo = make_repo(tmp_path, tasks=2)
    agent = script(tmp_path / "agent", {IDS[0]: [[{"write": {"pkg/m1.py": "def f():\n    return 0\n"}}],
                                                 [{"write": {"pkg/m1.py": module(1)}}]],
                                        IDS[1]: [[{"write": {"pkg/m2.py": module(2)}}]]})
    parked = tui_agent("run", "harness", "--input", request(repo, agent, max_iterations=1, max_files_changed=1))
    assert parked.returncode == 1, (parked.stdout, parked.stderr)
    run_id = parked.stdout.split()[0]
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "limit:iterations"), report["run"]
    assert report["events"][-1]["message"] == (f"limit max_iterations reached: 1 iterations of 1; raise it "
                                               f"with tui-agent harness limit {run_id} --max-iterations N (that "
                                               "resumes the run)")
    said = ok(tui_agent("harness", "limit", run_id, "--max-iterations", "5"))
    assert said.stdout == f"{run_id}: max_iterations 1 -> 5; resumed\n"
    ok(tui_agent("worker", "--once"))   # task 1 is done (one file changed): the branch is at its file ceiling
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "limit:files_changed"), report["run"]
    assert "the branch changes 1 files, of 1 allowed" in report["events"][-1]["message"]
    ok(tui_agent("harness", "limit", run_id, "--max-files-changed", "2"))
    ok(tui_agent("worker", "--once"))
    assert show_json(tui_agent, run_id)["run"]["status"] == "succeeded"


def test_the_harness_commands_refuse_a_run_they_cannot_act_on_in_one_line(tui_agent, tmp_path):
    hello = ok(tui_agent("start", "hello", "--input", '{"name": "Ada"}')).stdout.strip()
    refused = tui_agent("harness", "rule", hello, "Be kind.")
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"tui-agent: {hello} is queued: new since ") and refused.stderr.endswith(
        "it is a run of hello, not of the harness; nothing changed\n"), refused.stderr
    repo = make_repo(tmp_path, tasks=1)
    queued = ok(tui_agent("start", "harness", "--input", request(repo, doing_each_task(tmp_path / "a")))).stdout.strip()
    refused = tui_agent("harness", "rule", queued, "Be kind.")
    assert refused.returncode == 2 and "its worktree is the run's while it is queued or running: do this when it " \
                                       f"waits for you, or park it first (tui-agent park {queued})" in refused.stderr
    nothing = tui_agent("harness", "limit", queued)
    assert nothing.returncode == 2 and nothing.stderr == ("tui-agent: give --max-iterations N, --max-files-changed "
                                                          "N, or both\n")


def test_propose_asks_a_person_then_opens_one_pull_request_for_the_finished_branch(tui_agent, tmp_path):
    repo = make_repo(tmp_path, tasks=1)
    waited = tui_agent("run", "harness", "--input", request(repo, doing_each_task(tmp_path / "agent"), propose=True))
    assert waited.returncode == 3, (waited.stdout, waited.stderr)
    run_id = waited.stdout.split()[0]
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("waiting", "approval"), report["run"]
    head = git(repo, "rev-parse", BRANCH).strip()
    assert GitHost(repo).pulls() == []   # nothing opened before the approval
    ok(tui_agent("approve", run_id))
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded", report["run"]
    [pr] = GitHost(repo).pulls()
    assert (pr["branch"], pr["head"]) == (BRANCH, head), pr
    assert report["run"]["result"]["pull_request"] == pr["number"]


async def test_the_runs_list_counts_tasks_and_the_timeline_has_a_row_per_iteration_with_its_verdict(tui_agent, db_path):
    run_id = ok(tui_agent("run", "harness")).stdout.split()[0]
    toasts: list[str] = []
    async with tui(db_path, size=(200, 50), toasts=toasts) as (app, pilot):
        await pilot.pause()
        listed = next(line for line in rendered(app) if run_id in line and " harness " in line)
        screen = await open_run(app, pilot, run_id)
        rows = [line for line in rendered(app) if " effect " in line]
        screen.timeline.highlighted = next(i for i, item in enumerate(screen.timeline.items) if item.kind == "effect")
        await pilot.pause()
        await key(pilot, "enter")   # the built-in model worker's iteration: its turns are the timeline's rows
        assert app.screen is screen
    assert "iteration 1 has no coding agent's log: it was worked by the built-in model worker, whose turns are " \
           "the timeline's entries" in toasts, toasts
    assert " tasks 3/3 " in listed, listed   # the runs list: tasks done of the plan's, in place of steps
    # the sample's three tasks: 0 -> 2 -> 4 -> 5 unittest tests passing, each a one-file change
    assert [row.split(" effect ", 1)[1].split(" · ")[:2] for row in rows] == [
        ["done 0→2", "1f +1 −1"], ["done 2→4", "1f +9"], ["done 4→5", "1f +5"]], rows


async def test_u_on_a_harness_run_waiting_on_a_plateau_commits_a_rule_and_resumes_it(tui_agent, db_path, tmp_path):
    repo = make_repo(tmp_path, tasks=1)
    agent = script(tmp_path / "agent", {IDS[0]: [[]]})
    plateau = {"unchanged": 1, "shrinking": 9, "same_failure": 9}
    waited = tui_agent("run", "harness", "--input", request(repo, agent, plateau=plateau))
    assert waited.returncode == 3, (waited.stdout, waited.stderr)
    run_id = waited.stdout.split()[0]
    toasts: list[str] = []
    async with tui(db_path, size=(160, 50), toasts=toasts) as (app, pilot):
        await open_run(app, pilot, run_id)
        await key(pilot, "u")
        app.screen.query_one("#rule").value = "Write pkg/m1.py,  nothing else."
        await key(pilot, "enter")
    tree = _worktree(tui_agent, run_id)
    assert (tree / "RULES.md").read_text() == "# Rules\n- Write pkg/m1.py, nothing else.\n"
    assert [c["subject"] for c in trailers(repo)] == ["Rule: Write pkg/m1.py, nothing else."]
    assert show_json(tui_agent, run_id)["run"]["status"] == "queued"
    assert any(t.startswith(f"{run_id}: rule committed in {tree}") and t.endswith("resumed") for t in toasts), toasts


def _waiting_on_task_2(tui_agent, tmp_path) -> str:
    """A run that did task 1 (its coding agent saying so) and waits on a plateau at task 2."""
    repo = make_repo(tmp_path)
    agent = script(tmp_path / "agent", {IDS[0]: [[{"write": {"pkg/m1.py": module(1)}}, {"say": "wrote pkg/m1.py"}]],
                                        IDS[1]: [[{"say": "nothing to do"}]]})
    plateau = {"unchanged": 1, "shrinking": 9, "same_failure": 9}
    waited = tui_agent("run", "harness", "--input", request(repo, agent, plateau=plateau))
    assert waited.returncode == 3, (waited.stdout, waited.stderr)
    return waited.stdout.split()[0]


async def test_the_run_screen_shows_the_plan_the_run_recorded_and_enter_opens_an_iterations_coding_agent_log(
        tui_agent, db_path, tmp_path):
    run_id = _waiting_on_task_2(tui_agent, tmp_path)
    (tmp_path / "repo" / "PLAN.md").write_text("# Four functions\n\n- [x] not the run's plan\n")   # the checkout
    async with tui(db_path, size=(160, 50)) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        plan = screen.query_one("#plan").text.plain
        title = screen.query_one("#plan-pane").border_title
        # iteration 1's row: the first effect of the timeline
        effects = [i for i, item in enumerate(screen.timeline.items) if item.kind == "effect"]
        screen.timeline.highlighted = effects[0]
        await pilot.pause()
        await key(pilot, "enter")
        log = app.screen.query_one("#log").render()
        heading = str(app.screen.query_one(".title").render())
        await key(pilot, "escape")
        screen.timeline.highlighted = effects[1]
        await pilot.pause()
        await key(pilot, "enter")
        second = str(app.screen.query_one("#log").render())
    assert plan.splitlines() == [f"[x] {TASKS[0]}", f"[ ] {TASKS[1]} ◂ iteration 2", f"[ ] {TASKS[2]}",
                                 f"[ ] {TASKS[3]}"], plan
    assert title == "Plan · 1/4 tasks done"
    assert str(log).splitlines() == ["wrote pkg/m1.py", f"worked on {IDS[0]}"], log
    assert f"iteration 1 · {IDS[0]} · " in heading and heading.endswith("-coding-agent.stdout"), heading
    assert second.splitlines() == ["nothing to do", f"worked on {IDS[1]}"], second


async def test_at_80x24_the_plan_is_a_tab_of_a_harness_run_and_no_other_run_has_one(tui_agent, db_path, tmp_path):
    run_id = _waiting_on_task_2(tui_agent, tmp_path)
    other = ok(tui_agent("run", "hello")).stdout.split()[0]
    async with tui(db_path, size=(80, 24)) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        await key(pilot, "t")   # Budget, then Plan
        shown = rendered(app)
        await key(pilot, "escape")
        screen = await open_run(app, pilot, other)
        tabs = [t.id for t in screen.query("Tab") if t.display]
        pane = screen.query_one("#plan-pane").display
    assert any(f"[x] {TASKS[0]}" in line for line in shown), shown
    assert any(f"[ ] {TASKS[1]} ◂ iteration 2" in line for line in shown), shown
    assert "tab-plan" not in tabs and not pane, tabs


def test_ls_counts_a_harness_runs_tasks_as_the_runs_list_does(tui_agent):
    run_id = ok(tui_agent("run", "harness")).stdout.split()[0]
    other = ok(tui_agent("run", "hello")).stdout.split()[0]
    header, *lines = ok(tui_agent("ls")).stdout.splitlines()
    line, hello = (next(row for row in lines if row.startswith(r)) for r in (run_id, other))
    end = header.index("STEP") + len("STEP")   # the column is aligned right
    assert line[:end].endswith(" tasks 3/3"), (header, line)
    assert not hello[:end].split()[-1].startswith("tasks"), (header, hello)
    rows = json.loads(ok(tui_agent("ls", "--json")).stdout)
    assert {r["id"]: r["tasks"] for r in rows} == {run_id: [3, 3], other: None}


async def test_the_palette_offers_a_rule_on_a_waiting_harness_run_only_and_it_commits_then_resumes(
        tui_agent, db_path, tmp_path):
    from tui_agent.screens.palette import RunCommands

    repo = make_repo(tmp_path, tasks=1)
    agent = script(tmp_path / "agent", {IDS[0]: [[]]})
    waited = tui_agent("run", "harness", "--input", request(repo, agent, plateau={"unchanged": 1}))
    assert waited.returncode == 3, (waited.stdout, waited.stderr)
    run_id = waited.stdout.split()[0]
    other = ok(tui_agent("run", "hello")).stdout.split()[0]
    rule = f"Add a rule to {run_id}'s RULES.md, then resume it"
    async with tui(db_path, size=(160, 50)) as (app, pilot):
        await select(pilot, other)
        elsewhere = [str(hit.display) async for hit in RunCommands(app.screen).discover()]
        await select(pilot, run_id)
        offered = {str(hit.display): hit.command async for hit in RunCommands(app.screen).discover()}
        offered[rule]()
        await pilot.pause()
        asked = type(app.screen).__name__
        app.screen.query_one("#rule").value = "Write pkg/m1.py."
        await key(pilot, "enter")
    assert not any(c.startswith("Add a rule") for c in elsewhere), elsewhere
    assert asked == "RuleModal"
    assert [c["subject"] for c in trailers(repo)] == ["Rule: Write pkg/m1.py."]
    assert show_json(tui_agent, run_id)["run"]["status"] == "queued"
