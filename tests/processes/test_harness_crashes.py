"""The harness agent's recovery, seed 001's exactly, with real processes: `kill -9` of tui-agent's worker while
the fake coding agent runs (in a process group of its own), and a crash after an iteration's commit before its
journal entry. The next claim kills what is left of the coding agent, rolls the worktree back to the last good
commit and runs the iteration again; a commit already made is found by its trailers and not made again. The
branch ends as a crash-free run's does, whether the kills land where a test puts them or at seeded random points
(in a coding agent, a check, a commit, a load)."""

import random
import signal
import time
from pathlib import Path

from harness_repo import BRANCH, IDS, TASKS, doing_each_task, git, make_repo, module, request, script, trailers
from helpers import ok, show_json, until

from tui_agent.store.host import process_alive, process_start


def _tree(repo: Path) -> list[str]:
    """The branch's files with their blobs, PROGRESS.md aside (its entries may say how they were reached)."""
    return [line for line in git(repo, "ls-tree", "-r", BRANCH).splitlines() if not line.endswith("\tPROGRESS.md")]


def _said(repo: Path) -> list[str]:
    progress = git(repo, "show", f"{BRANCH}:PROGRESS.md").splitlines()
    return [line for line in progress if line.startswith(("## ", "- task:", "- verdict:"))]


def test_kill_9_while_the_coding_agent_runs_and_after_a_commit_ends_as_a_crash_free_run_with_no_task_twice(
        tui_agent, spawn, tmp_path):
    clean = make_repo(tmp_path / "clean")
    ok(tui_agent("run", "harness", "--input", request(clean, doing_each_task(tmp_path / "clean-agent"))))

    repo = make_repo(tmp_path / "crashed")
    half = "def f(:\n"   # half an iteration: a file that does not even parse
    agent = script(tmp_path / "agent", {
        IDS[0]: [[{"write": {"pkg/m1.py": module(1)}}]],
        IDS[1]: [[{"write": {"pkg/m2.py": half, "notes.txt": "scratch\n"}}, {"sleep": 120}],
                 [{"write": {"pkg/m2.py": module(2)}}]],
        IDS[2]: [[{"write": {"pkg/m3.py": module(3)}}]],
        IDS[3]: [[{"write": {"pkg/m4.py": module(4)}}]]})
    starts = tmp_path / "agent" / "starts"
    run_id = ok(tui_agent("start", "harness", "--input", request(repo, agent))).stdout.strip()

    first = spawn("worker", "--once", label="w-a", own_group=True)
    until("the coding agent to hang on task 2", lambda: starts.exists() and IDS[1] in starts.read_text(),
          deadline_s=60, why=lambda: (tmp_path / "w-a.err").read_text())
    hung = int(starts.read_text().splitlines()[-1].split()[1])
    started = process_start(hung)
    tree = Path(show_json(tui_agent, run_id)["journal"][1]["result"]["worktree"])
    until("its half edit", lambda: (tree / "notes.txt").exists())
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    assert process_alive(hung, started), "the coding agent outlives a kill -9 of its worker, in its own group"

    # the next claim kills it, rolls back, does task 2 again; then it dies after task 3's commit (after-do:2)
    # (each worker leads its own process group, as one started from a shell does: a gone one's runs are taken
    # at once)
    crashed = spawn("worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-do:2"}, label="w-b", own_group=True)
    assert crashed.wait(timeout=60) == -signal.SIGKILL, (tmp_path / "w-b.err").read_text()
    assert not process_alive(hung, started), "no coding agent survives its worker past the next claim"
    ok(tui_agent("worker", "--once"))

    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded", report["run"]
    assert [c["Tui-Agent-Task"] for c in trailers(repo)] == IDS   # each task committed once, in order
    assert [c["subject"] for c in trailers(repo)] == TASKS
    assert _tree(repo) == _tree(clean)   # byte for byte: blobs are content digests
    assert _said(repo) == _said(clean)
    assert git(tree, "status", "--porcelain", "--ignored") in ("", "!! pkg/__pycache__/\n")

    events = [e["message"] for e in report["events"]]
    assert any(m.startswith("killed what was left of the program") and f"process group {hung})" in m
               for m in events), events
    assert any(m.startswith("iteration 2: rolled back what an earlier attempt left in the worktree (notes.txt, "
                            "pkg/m2.py)") for m in events), events
    effects = {e["key"]: e for e in report["effects"]}
    assert [e["state"] for e in report["effects"]] == ["confirmed"] * 4
    assert effects[f"harness:{run_id}:{IDS[1]}"]["attempts"] == 2
    outcomes = [e["result"] for e in report["journal"] if e["kind"] == "effect"]
    assert [o.get("found_by") for o in outcomes] == [None, None, "lookup", None]   # task 3: found, not redone
    assert [line.split()[0] for line in starts.read_text().splitlines()] == [IDS[0], IDS[1], IDS[1], IDS[2], IDS[3]]
    # the lost iteration's cost stays counted: five coding agents started, five calls
    assert report["budget"]["dimensions"]["model_calls"]["used"] == 5


def _started(starts: Path) -> list[tuple[str, int]]:
    """(task id, pid) of each coding agent started so far, in order."""
    if not starts.exists():
        return []
    return [(line.split()[0], int(line.split()[1])) for line in starts.read_text().splitlines()]


KILLS = 3


def test_kill_9_of_the_worker_at_seeded_random_points_ends_as_a_crash_free_run_each_rollback_recorded(
        tui_agent, spawn, tmp_path):
    clean = make_repo(tmp_path / "clean")
    ok(tui_agent("run", "harness", "--input", request(clean, doing_each_task(tmp_path / "clean-agent"))))

    repo = make_repo(tmp_path / "crashed")
    # each task's first coding agent leaves half an edit, pauses (a kill lands while it runs, or in the checks,
    # the commit, the next load), then does the task; a second one does it at once
    agent = script(tmp_path / "agent", {IDS[k - 1]: [
        [{"write": {f"pkg/m{k}.py": "def f(:\n", "notes.txt": "scratch\n"}}, {"sleep": 1.5},
         {"write": {f"pkg/m{k}.py": module(k)}}, {"remove": "notes.txt"}],
        [{"write": {f"pkg/m{k}.py": module(k)}}]] for k in range(1, 5)})
    starts = tmp_path / "agent" / "starts"
    run_id = ok(tui_agent("start", "harness", "--input", request(repo, agent))).stdout.strip()
    tree: Path | None = None
    rng = random.Random(1)
    agents: list[tuple[int, int | None]] = []   # every coding agent started so far, with its start time
    dirty_at_kill: list[str] = []                # the task worked when a kill left the worktree changed
    for n in range(KILLS):
        seen = len(_started(starts))
        worker = spawn("worker", "--once", label=f"w-{n}", own_group=True)
        until("this worker to start a coding agent (or finish the run)",
              lambda: len(_started(starts)) > seen or worker.poll() is not None, deadline_s=60,
              why=lambda: (tmp_path / f"w-{n}.err").read_text())
        # the claim came first: what the killed worker left running is gone before the next agent starts
        assert not any(process_alive(pid, at) for pid, at in agents), "a coding agent outlived the next claim"
        agents += [(pid, process_start(pid)) for _, pid in _started(starts)[len(agents):]]
        time.sleep(rng.uniform(0.0, 2.5))
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        tree = tree or Path(show_json(tui_agent, run_id)["journal"][1]["result"]["worktree"])
        if git(tree, "status", "--porcelain"):
            dirty_at_kill.append(_started(starts)[-1][0])
    ok(tui_agent("worker", "--once"))
    assert not any(process_alive(pid, at) for pid, at in agents), "a coding agent outlived the next claim"

    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded", report["run"]
    assert [c["Tui-Agent-Task"] for c in trailers(repo)] == IDS   # each task committed once, in order
    assert _tree(repo) == _tree(clean)   # byte for byte: blobs are content digests
    assert _said(repo) == _said(clean)
    events = [e["message"] for e in report["events"]]
    for task in dirty_at_kill:   # a kill that left half an iteration: rolled back, and said so
        assert any(m.startswith(f"iteration {IDS.index(task) + 1}: rolled back what an earlier attempt left")
                   for m in events), (task, events)
    started = [task for task, _ in _started(starts)]
    attempts = {e["key"]: e["attempts"] for e in report["effects"]}
    assert [e["state"] for e in report["effects"]] == ["confirmed"] * 4
    for task in IDS:   # every coding agent started is an attempt of its task's effect, in the ledger
        assert attempts[f"harness:{run_id}:{task}"] >= started.count(task), (attempts, started)
    assert len(started) > 4 or not dirty_at_kill, started   # a rolled-back iteration ran again
