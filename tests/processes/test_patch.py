"""Patch on the night shift, offline on its sample repository: a branch and worktree of its own, the tools
scoped to it, the tests as an oracle the worker cannot edit, an approval before the pull request, and one
pull request on the local git host however the workers crash or race."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, later, ok, parked_message, paused_worker, show_json

from tui_agent.agents.githost import GitHost
from tui_agent.agents.patch import oracle_pattern, run_oracle, tools_for
from tui_agent.agents.patch_sample import FIXED, ISSUE, sample_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="Patch needs git")


def unittest_in(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "unittest"], cwd=folder, capture_output=True, text=True)


def waiting_for_approval(tui_agent, *start_args) -> tuple[str, dict]:
    run_id = ok(tui_agent("start", "patch", *start_args)).stdout.strip()
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("waiting", "approval"), report["events"][-1]
    return run_id, report


def test_the_commit_holds_the_fix_alone_where_python_writes_bytecode(tui_agent, tmp_path):
    """A user's machine writes __pycache__ where the tests run (the suite's machines set PYTHONDONTWRITEBYTECODE):
    the commit the question shows, and the pull request would ship, is the fix alone."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}

    def command(*args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "tui_agent", *args], env=env, capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
        assert done.returncode == 0, done.stderr

    command("start", "patch")
    command("worker", "--once")
    [run] = json.loads(ok(tui_agent("ls", "--json")).stdout)
    place, commit = reviewed(show_json(tui_agent, run["id"]))
    assert git("show", "--name-only", "--format=", commit, cwd=Path(place["worktree"])).splitlines() == \
        ["calc/stats.py"]


def test_patch_offline_fixes_the_sample_bug_waits_for_approval_then_opens_one_pull_request(tui_agent, tmp_path):
    run_id, report = waiting_for_approval(tui_agent)
    sample = tmp_path / "runs.data" / "patch" / "sample"
    assert unittest_in(sample).returncode != 0                 # the user's tree still has the bug
    place = next(e["result"] for e in report["journal"] if e["name"] == "worktree")
    tree = Path(place["worktree"])
    assert place["branch"] == "patch/issue-mean-is-wrong"
    assert unittest_in(tree).returncode == 0                    # the fix, on the run's own branch
    assert (tree / "calc" / "stats.py").read_text() == FIXED
    question = report["approvals"][0]["question"]
    assert question.startswith("Open a pull request for patch/issue-mean-is-wrong onto main? The tests pass.")
    assert "calc/stats.py | 2 +-" in question                 # the diff stat, shown with the question
    assert GitHost(sample).pulls() == []                        # nothing opened before a person says so
    ok(tui_agent("approve", run_id))
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "returned")
    [pr] = GitHost(sample).pulls()
    assert (pr["branch"], pr["state"], pr["base"]) == ("patch/issue-mean-is-wrong", "open", "main")
    assert report["run"]["result"]["pull_request"] == pr["number"]


def test_a_kill_after_the_pull_request_and_before_its_record_finds_it_by_lookup(tui_agent, tmp_path):
    run_id, _ = waiting_for_approval(tui_agent)
    ok(tui_agent("approve", run_id))
    crashed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-do"})
    assert crashed.returncode == -9
    sample = tmp_path / "runs.data" / "patch" / "sample"
    assert len(GitHost(sample).pulls()) == 1                    # it went out; nothing recorded that
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded"
    assert len(GitHost(sample).pulls()) == 1
    effect = report["effects"][0]
    assert (effect["name"], effect["state"], effect["attempts"]) == ("open-pull-request", "confirmed", 1)
    assert any("the service has the key" in e["message"] for e in report["events"])


def test_two_workers_racing_on_the_approved_run_open_one_pull_request(tui_agent, tmp_path):
    run_id, _ = waiting_for_approval(tui_agent)
    ok(tui_agent("approve", run_id))
    workers = [subprocess.Popen([sys.executable, "-m", "tui_agent", "worker", "--once"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for worker in workers:
        worker.communicate(timeout=120)
    assert show_json(tui_agent, run_id)["run"]["status"] == "succeeded"
    assert len(GitHost(tmp_path / "runs.data" / "patch" / "sample").pulls()) == 1


def test_write_file_outside_the_worktree_or_onto_the_oracle_goes_back_to_the_model_as_an_error(tui_agent, tmp_path):
    replies = [
        {"content": [{"type": "tool_use", "name": "write_file", "input": {"path": "../escape.py", "content": "x"}}]},
        {"content": [{"type": "tool_use", "name": "write_file",
                      "input": {"path": "tests/test_stats.py", "content": "import unittest\n"}}]},
        {"content": [{"type": "tool_use", "name": "write_file", "input": {"path": "calc/stats.py", "content": FIXED}}]},
        "Fixed.",
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(replies))
    sample = sample_repo(tmp_path / "runs.data")
    run_id, report = waiting_for_approval(tui_agent, "--model", f"scripted:{script}", "--input",
                                          json.dumps({"repo": str(sample), "issue": ISSUE}))
    tools = [e["result"] for e in report["journal"] if e["kind"] == "tool"]
    assert tools[0]["is_error"] and "outside the worktree" in tools[0]["content"]
    assert tools[1]["is_error"] and "the tests are not yours to edit" in tools[1]["content"]
    assert not tools[2].get("is_error")
    assert not (tmp_path / "runs.data" / "patch" / "escape.py").exists()


def git_commit_all(repo: Path, message: str) -> None:
    for args in (["add", "-A"], ["commit", "-qm", message]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True)


def test_the_tools_never_follow_a_link_to_read_search_list_or_write(tui_agent, tmp_path):
    outside = tmp_path / "outside"
    (outside / "lib").mkdir(parents=True)
    (outside / "secret.py").write_text("SECRET = 'kept out'\n")
    (outside / "lib" / "deep.py").write_text("SECRET = 'kept out too'\n")
    sample = sample_repo(tmp_path / "runs.data")
    for name, target in {"calc/passwd.py": "/etc/passwd", "calc/secret.py": str(outside / "secret.py"),
                         "calc/lib": str(outside / "lib"), "calc/again.py": "stats.py"}.items():
        (sample / name).symlink_to(target)
    git_commit_all(sample, "links")
    before = {p: p.read_bytes() for p in outside.rglob("*.py")}

    def call(name: str, **args) -> dict:
        return {"content": [{"type": "tool_use", "name": name, "input": args}]}

    replies = [call("read_file", path="calc/passwd.py"), call("read_file", path="calc/secret.py"),
               call("read_file", path="calc/lib/deep.py"), call("read_file", path="calc/again.py"),
               call("search", pattern="SECRET|root:"), call("list_files", path="calc"),
               call("list_files", path="calc/lib"), call("write_file", path="calc/secret.py", content="x = 1\n"),
               call("write_file", path="calc/lib/new.py", content="x = 1\n"),
               call("write_file", path="calc/stats.py", content=FIXED), "Fixed."]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(replies))
    run_id, report = waiting_for_approval(tui_agent, "--model", f"scripted:{script}", "--input",
                                          json.dumps({"repo": str(sample), "issue": ISSUE}))
    tools = [e["result"] for e in report["journal"] if e["kind"] == "tool"]
    assert [t.get("is_error", False) for t in tools] == [True] * 4 + [False] * 2 + [True] * 3 + [False]
    assert "calc/passwd.py is a symbolic link to /etc/passwd, not a regular file" in tools[0]["content"]
    assert "calc/lib is a symbolic link to" in tools[2]["content"] and "not a folder" in tools[2]["content"]
    assert "calc/again.py is a symbolic link to stats.py" in tools[3]["content"]   # inside, and still a link
    assert tools[4]["content"] == "no match"                  # nothing behind a link was searched
    assert tools[5]["content"].splitlines() == ["calc/__init__.py", "calc/stats.py"]
    assert not any("kept out" in t["content"] or "root:" in t["content"] for t in tools)   # no content behind a link
    tree = Path(next(e["result"] for e in report["journal"] if e["name"] == "worktree")["worktree"])
    assert os.readlink(tree / "calc" / "secret.py") == str(outside / "secret.py")   # not replaced by a file
    assert {p: p.read_bytes() for p in outside.rglob("*.py")} == before               # nor written through
    assert (tree / "calc" / "stats.py").read_text() == FIXED


def test_the_tools_read_no_fifo_or_socket_and_the_oracle_removes_a_linked_test_folder(tmp_path, monkeypatch):
    repo = sample_repo(tmp_path)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    os.mkfifo(repo / "calc" / "pipe.py")                     # opening it to read would block
    monkeypatch.chdir(repo / "calc")
    server = socket.socket(socket.AF_UNIX)
    server.bind("sock.py")
    server.close()
    oracle = oracle_pattern(["tests/**"])
    tools = {t.name: t for t in tools_for(repo, base, oracle, [sys.executable, "-m", "unittest"])}
    for name in ("calc/pipe.py", "calc/sock.py"):
        with pytest.raises(ValueError, match=f"{name} is a (FIFO|socket), not a regular file"):
            tools["read_file"](path=name)
    assert "pipe.py" not in tools["list_files"](path="calc") and tools["search"](pattern="x") != ""
    elsewhere = tmp_path / "elsewhere"                        # tests the model's code could have linked in
    elsewhere.mkdir()
    (elsewhere / "__init__.py").write_text("")
    (elsewhere / "test_pass.py").write_text("raise SystemExit(0)\n")
    (repo / "tests" / "linked").symlink_to(elsewhere)
    verdict = run_oracle(repo, base, oracle, [sys.executable, "-m", "unittest"])
    assert not verdict["passed"] and not (repo / "tests" / "linked").exists()   # the bug's tests ran, and failed
    assert (elsewhere / "test_pass.py").exists()              # the link was removed, not what it points to


def test_a_test_file_changed_by_any_other_route_is_restored_before_the_oracle_runs(tmp_path):
    repo = sample_repo(tmp_path)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    test_file = repo / "tests" / "test_stats.py"
    original = test_file.read_text()
    test_file.write_text("import unittest\n\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n")
    (repo / "tests" / "test_sneaky.py").write_text("raise SystemExit(0)\n")
    verdict = run_oracle(repo, base, oracle_pattern(["tests/**"]), [sys.executable, "-m", "unittest"])
    assert not verdict["passed"]                                 # the bug is still there: the real tests fail
    assert test_file.read_text() == original and not (repo / "tests" / "test_sneaky.py").exists()
    assert verdict["passing"] == 1                               # spread passes; both mean tests fail
    (repo / "calc" / "stats.py").write_text(FIXED)
    verdict = run_oracle(repo, base, oracle_pattern(["tests/**"]), [sys.executable, "-m", "unittest"])
    assert verdict["passed"] and verdict["passing"] == 3


def test_oracle_globs_match_what_they_name():
    oracle = oracle_pattern(["tests/**", "**/test_*.py", "**/conftest.py"])
    assert all(oracle.match(p) for p in ("tests/a.py", "tests/x/y.txt", "test_a.py", "src/pkg/test_b.py",
                                         "conftest.py", "a/b/conftest.py"))
    assert not any(oracle.match(p) for p in ("src/tests.py", "calc/stats.py", "src/latest_test.txt", "contest.py"))


def test_patch_night_starts_one_run_per_issue_and_a_second_fire_starts_none(tui_agent, tmp_path):
    sample = sample_repo(tmp_path / "runs.data")
    issues = tmp_path / "queue"
    issues.mkdir()
    for name in ("a-first.md", "b-second.md", "c-third.md"):
        (issues / name).write_text(f"# {name}\n")
    request = json.dumps({"repo": str(sample), "issues": str(issues)})
    first = ok(tui_agent("run", "patch-night", "--input", request))
    assert json.loads(first.stdout.splitlines()[-1])["issues"] == 3
    assert len(json.loads(first.stdout.splitlines()[-1])["started"]) == 3
    second = ok(tui_agent("run", "patch-night", "--input", request))
    assert json.loads(second.stdout.splitlines()[-1])["started"] == []
    runs = json.loads(ok(tui_agent("ls", "--json")).stdout)
    assert sorted(r["agent"] for r in runs) == ["patch", "patch", "patch", "patch-night", "patch-night"]


def test_offline_on_another_repository_the_run_parks_for_a_key(tui_agent, tmp_path):
    other = sample_repo(tmp_path / "elsewhere")                 # a copy that is not Patch's own sample
    run_id = ok(tui_agent("start", "patch", "--input", json.dumps({"repo": str(other), "issue": ISSUE}))).stdout.strip()
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "environment")
    assert "without ANTHROPIC_API_KEY" in report["events"][-1]["message"]
    assert report["model_calls"] == []                          # parked before any model call was made


def test_a_second_run_of_the_same_bug_parks_and_one_pull_request_is_opened(tui_agent, tmp_path):
    first, _ = waiting_for_approval(tui_agent)
    second = ok(tui_agent("start", "patch")).stdout.strip()
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, second)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "environment")
    assert "another run of this bug may hold the branch" in report["events"][-1]["message"]
    ok(tui_agent("approve", first))
    ok(tui_agent("worker", "--once"))
    assert len(GitHost(tmp_path / "runs.data" / "patch" / "sample").pulls()) == 1


def test_a_model_that_never_fixes_it_parks_on_a_plateau(tui_agent, tmp_path):
    script = tmp_path / "stuck.json"
    script.write_text(json.dumps(["I think it is fixed."] * 8))     # ends its turn without changing anything
    sample = sample_repo(tmp_path / "runs.data")
    run_id = ok(tui_agent("start", "patch", "--model", f"scripted:{script}", "--input",
                          json.dumps({"repo": str(sample), "issue": ISSUE}))).stdout.strip()
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "plateau")
    checks = [e for e in report["journal"] if e["name"].startswith("fix/check")]
    assert len(checks) == 5                                      # the same passing count five times in a row
    assert GitHost(sample).pulls() == []


def test_with_a_key_claude_works_on_any_repository_through_the_same_tools(tui_agent, tmp_path, fake):
    from fake_messages import message

    fix = {**message(), "stop_reason": "tool_use", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "write_file",
         "input": {"path": "calc/stats.py", "content": FIXED}}]}
    fake.play({"body": fix}, {"body": message("Divided by len(values).")})
    other = sample_repo(tmp_path / "elsewhere")
    run_id, report = waiting_for_approval(tui_agent, "--input", json.dumps({"repo": str(other), "issue": ISSUE}))
    assert [c["provider"] for c in report["model_calls"]] == ["anthropic", "anthropic"]
    first = fake.requests[0]["body"]
    assert [t["name"] for t in first["tools"]] == ["list_files", "read_file", "search", "write_file", "run_tests"]
    content = first["messages"][0]["content"]
    assert "mean() is wrong" in (content if isinstance(content, str) else content[0]["text"])
    tree = Path(next(e["result"] for e in report["journal"] if e["name"] == "worktree")["worktree"])
    assert unittest_in(tree).returncode == 0 and unittest_in(other).returncode != 0


def reviewed(report: dict) -> tuple[dict, str]:
    """The run's worktree (its recorded place) and the commit its approval question is about."""
    entries = {e["name"]: e["result"] for e in report["journal"]}
    return entries["worktree"], entries["commit"]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def move(change: str, tree: Path, base: str) -> None:
    """What a person (or another program) does to the run's branch behind its back."""
    if change == "git reset --hard BASE":
        git("reset", "-q", "--hard", base, cwd=tree)
    elif change == "git commit --amend":                         # one more line, the message and trailer kept
        with (tree / "calc" / "stats.py").open("a") as source:
            source.write("UNREVIEWED = True\n")
        git("commit", "-q", "-a", "--amend", "--no-edit", cwd=tree)
    else:
        git("commit", "-q", "--allow-empty", "-m", "not the run's", cwd=tree)


def printed(message: str, command: str) -> str:
    """The one command of this kind (`git -C`, `tui-agent fork`) the message prints in parentheses."""
    [found] = re.findall(rf"\(({command} [^()]*)\)", message)
    return found


@pytest.mark.parametrize("change, said", [
    ("git reset --hard BASE", "was reset to"),
    ("git commit --amend", "which replaced this run's commit"),
    ("a foreign commit", "has 1 commit(s) this run did not make"),
], ids=["reset", "amend", "foreign"])
def test_a_branch_moved_between_the_question_and_the_approval_opens_no_pull_request(tui_agent, tmp_path, change,
                                                                                     said):
    run_id, report = waiting_for_approval(tui_agent)
    place, commit = reviewed(report)
    question = report["approvals"][0]["question"]
    assert f"Commit {commit}:" in question and "1 insertion(+), 1 deletion(-)" in question
    tree, sample = Path(place["worktree"]), tmp_path / "runs.data" / "patch" / "sample"
    move(change, tree, place["base"])
    ok(tui_agent("approve", run_id))
    ok(tui_agent("worker", "--once"))
    message = parked_message(tui_agent, run_id)
    assert said in message and commit[:12] in message
    assert GitHost(sample).pulls() == []                          # nothing opened for what nobody reviewed
    subprocess.run(printed(message, "git -C"), shell=True, check=True, capture_output=True)   # as a user would
    ok(tui_agent("resume", run_id))
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "returned")
    [pr] = GitHost(sample).pulls()
    assert pr["head"] == commit == report["run"]["result"]["commit"] == git("rev-parse", place["branch"], cwd=tree)


def test_an_amended_branch_is_asked_about_again_by_a_fork_from_the_commit_step(tui_agent, tmp_path):
    run_id, report = waiting_for_approval(tui_agent)
    place, commit = reviewed(report)
    tree, sample = Path(place["worktree"]), tmp_path / "runs.data" / "patch" / "sample"
    move("git commit --amend", tree, place["base"])
    amended = git("rev-parse", "HEAD", cwd=tree)
    ok(tui_agent("approve", run_id))
    ok(tui_agent("worker", "--once"))
    message = parked_message(tui_agent, run_id)
    fork = ok(tui_agent(*printed(message, "tui-agent fork").split()[1:])).stdout.strip()
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, fork)
    assert (report["run"]["status"], report["run"]["reason"]) == ("waiting", "approval"), report["events"][-1]
    question = report["approvals"][0]["question"]
    assert f"Commit {amended}:" in question and "2 insertions(+), 1 deletion(-)" in question   # what would ship
    assert "tests-on-commit" in [e["name"] for e in report["journal"]], "the tests were run on the amended commit"
    assert GitHost(sample).pulls() == []
    ok(tui_agent("approve", fork))
    ok(tui_agent("worker", "--once"))
    assert show_json(tui_agent, fork)["run"]["status"] == "succeeded"
    [pr] = GitHost(sample).pulls()
    assert pr["head"] == amended
    assert show_json(tui_agent, run_id)["run"]["status"] == "parked"


def test_a_fork_of_a_branch_amended_to_fail_its_tests_parks_instead_of_asking(tui_agent, tmp_path):
    run_id, report = waiting_for_approval(tui_agent)
    place, _ = reviewed(report)
    tree, sample = Path(place["worktree"]), tmp_path / "runs.data" / "patch" / "sample"
    with (tree / "calc" / "stats.py").open("a") as source:       # an amendment that breaks the fix
        source.write("def mean(values):\n    return 0\n")
    git("commit", "-q", "-a", "--amend", "--no-edit", cwd=tree)
    ok(tui_agent("approve", run_id))
    ok(tui_agent("worker", "--once"))
    fork = ok(tui_agent(*printed(parked_message(tui_agent, run_id), "tui-agent fork").split()[1:])).stdout.strip()
    ok(tui_agent("worker", "--once"))
    message = parked_message(tui_agent, fork)
    assert "the tests fail on commit" in message and message.endswith(f"then tui-agent resume {fork}")
    assert show_json(tui_agent, fork)["approvals"] == [], "never asked about a commit whose tests fail"
    assert GitHost(sample).pulls() == []


def test_a_branch_moved_while_the_pull_request_is_opened_is_refused_by_the_host(tui_agent, tmp_path):
    run_id, report = waiting_for_approval(tui_agent)
    place, commit = reviewed(report)
    tree, sample = Path(place["worktree"]), tmp_path / "runs.data" / "patch" / "sample"
    ok(tui_agent("approve", run_id))
    with paused_worker("worker", "--once", pause_at="after-attempted") as worker:   # past the guard on the claim
        move("git commit --amend", tree, place["base"])
        worker.send_signal(signal.SIGCONT)
        worker.communicate(timeout=60)
    message = parked_message(tui_agent, run_id)
    assert "which replaced this run's commit" in message
    assert GitHost(sample).pulls() == []
    effect = show_json(tui_agent, run_id)["effects"][0]
    assert (effect["name"], effect["state"]) == ("open-pull-request", "not_done")   # the host did nothing
    subprocess.run(printed(message, "git -C"), shell=True, check=True, capture_output=True)
    ok(tui_agent("resume", run_id))
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded"
    [pr] = GitHost(sample).pulls()
    assert pr["head"] == commit and report["effects"][0]["state"] == "confirmed"


def test_a_branch_amended_between_the_commit_and_the_question_parks_before_asking(tui_agent, tmp_path):
    run_id = ok(tui_agent("start", "patch")).stdout.strip()
    crashed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-step-commit:4"})   # the commit's
    assert crashed.returncode == -9
    place, commit = reviewed(show_json(tui_agent, run_id))
    move("git commit --amend", Path(place["worktree"]), place["base"])
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    assert "which replaced this run's commit" in parked_message(tui_agent, run_id)
    assert show_json(tui_agent, run_id)["approvals"] == []          # never asked about a commit not there
