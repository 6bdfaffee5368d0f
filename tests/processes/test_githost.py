"""The local git host: one open pull request per branch, shared by every worktree and process of a repository,
and a state file a crash mid-write leaves whole."""

import json
import multiprocessing
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tui_agent.agents import state_file
from tui_agent.agents.githost import AlreadyOpen, GitHost, HeadMoved

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed on this machine")

ID = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *ID, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A repository on `main` with one commit and branches `feature/a` and `feature/b`."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no repository above tmp_path answers for it
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("hello\n")
    _git(path, "add", "README")
    _git(path, "commit", "-q", "-m", "first")
    for branch in ("feature/a", "feature/b"):
        _git(path, "branch", branch)
    return path


def _state(repo: Path) -> Path:
    return repo / ".git" / "tui-agent" / "pulls.json"


def test_one_open_pull_request_per_branch(repo):
    host = GitHost(repo)
    assert host.pulls() == [] and host.lookup("feature/a") is None
    before = time.time()
    first = host.open("feature/a", title="Fix a", body="Because.", key="patch:run-1")
    assert first == {"number": 1, "branch": "feature/a", "base": "main", "head": _git(repo, "rev-parse", "feature/a"),
                     "title": "Fix a", "body": "Because.", "state": "open", "key": "patch:run-1",
                     "opened_at": first["opened_at"]}
    assert before <= first["opened_at"] <= time.time()
    assert host.lookup("feature/a") == first
    assert host.pulls() == [first]
    assert GitHost(repo / ".git" / "..").lookup("feature/a") == first   # another handle on the same host

    with pytest.raises(AlreadyOpen) as refused:
        host.open("feature/a", title="Fix a again", body="", key="patch:run-2")
    assert refused.value.pr == first
    assert str(refused.value) == "branch feature/a already has open pull request #1"
    assert host.pulls() == [first]

    second = host.open("feature/b", title="Fix b", body="", base="develop")
    assert (second["number"], second["base"], second["key"], second["state"]) == (2, "develop", None, "open")
    assert host.lookup("feature/b") == second

    closed = host.close(1)
    assert (closed["number"], closed["state"]) == (1, "closed")
    assert host.lookup("feature/a") is None
    again = host.open("feature/a", title="Fix a, take two", body="")
    assert again["number"] == 3
    assert host.lookup("feature/a") == again
    assert [(p["number"], p["branch"], p["state"]) for p in host.pulls()] == [
        (1, "feature/a", "closed"), (2, "feature/b", "open"), (3, "feature/a", "open")]
    with pytest.raises(ValueError, match="no pull request #9"):
        host.close(9)


def test_the_state_lives_in_the_git_dir_not_the_working_tree(repo):
    sub = repo / "docs"
    sub.mkdir()
    (sub / "guide.md").write_text("guide\n")
    _git(repo, "add", "docs")
    _git(repo, "commit", "-q", "-m", "docs")
    GitHost(sub).open("feature/a", title="t", body="b")          # from a subfolder: the same repository
    assert json.loads(_state(repo).read_text())["pulls"][0]["branch"] == "feature/a"
    assert GitHost(repo).lookup("feature/a")["number"] == 1
    assert _git(repo, "status", "--porcelain", "--ignored") == ""


def test_a_missing_branch_records_nothing(repo):
    host = GitHost(repo)
    with pytest.raises(ValueError, match=r"no branch 'feature/nope' in "):
        host.open("feature/nope", title="t", body="b")
    assert host.pulls() == []
    assert host.open("feature/a", title="t", body="b")["number"] == 1


def test_a_pull_request_for_a_commit_the_branch_is_no_longer_at_is_refused_and_records_nothing(repo):
    host = GitHost(repo)
    reviewed = _git(repo, "rev-parse", "feature/a")
    _git(repo, "checkout", "-q", "feature/a")
    (repo / "README").write_text("hello\nand one more line\n")
    _git(repo, "commit", "-q", "-a", "--amend", "--no-edit")          # the message kept, the change not
    amended = _git(repo, "rev-parse", "feature/a")
    with pytest.raises(HeadMoved) as refused:
        host.open("feature/a", title="t", body="b", head=reviewed)
    assert (refused.value.head, refused.value.found) == (reviewed, amended)
    assert str(refused.value) == f"branch feature/a is at {amended[:12]}, not at {reviewed[:12]}; nothing was opened"
    assert host.pulls() == [] and not _state(repo).exists()
    _git(repo, "reset", "-q", "--hard", reviewed)                       # the branch put back
    opened = host.open("feature/a", title="t", body="b", head=reviewed)
    assert (opened["number"], opened["head"]) == (1, reviewed)


def test_a_folder_that_is_not_a_repository_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ValueError, match="is not a git repository") as refused:
        GitHost(plain)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="is not a git repository"):
        GitHost(tmp_path / "missing")
    assert list(plain.iterdir()) == []


def test_worktrees_of_one_repository_share_one_host(repo, tmp_path):
    other = tmp_path / "wt"
    _git(repo, "worktree", "add", "-q", "-b", "feature/wt", str(other))
    opened = GitHost(other).open("feature/wt", title="From the worktree", body="")
    assert GitHost(repo).lookup("feature/wt") == opened
    with pytest.raises(AlreadyOpen) as refused:
        GitHost(repo).open("feature/wt", title="From the main tree", body="")
    assert refused.value.pr == opened
    assert GitHost(other).pulls() == [opened]
    assert not (other / ".git").is_dir()                      # a worktree's .git is a file pointing home
    assert _git(other, "status", "--porcelain", "--ignored") == ""


def test_a_crash_mid_write_leaves_the_old_state_whole(repo, monkeypatch):
    host = GitHost(repo)
    first = host.open("feature/a", title="t", body="b")
    old = _state(repo).read_bytes()

    def crash(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(state_file.os, "replace", crash)   # the one rename every state write goes through
    with pytest.raises(OSError, match="power cut"):
        host.open("feature/b", title="t", body="b")
    monkeypatch.undo()

    assert _state(repo).read_bytes() == old
    assert json.loads(old)["pulls"] == [first]
    assert sorted(p.name for p in _state(repo).parent.iterdir()) == ["pulls.json", "pulls.lock"]
    assert host.open("feature/b", title="t", body="b")["number"] == 2   # the lock was let go


def _race(repo: str, branches: list[str], start, results) -> None:
    """One racer: for each branch, wait for everyone, then try to open it; report what the host said."""
    host = GitHost(Path(repo))
    for branch in branches:
        start.wait(timeout=60)
        try:
            results.put((branch, "opened", host.open(branch, title=f"pid {os.getpid()}", body="",
                                                     key=str(os.getpid()))["number"]))
        except AlreadyOpen as refused:
            results.put((branch, "already", refused.pr["number"]))


def test_racing_processes_open_one_pull_request_per_branch(repo):
    branches = [f"race/{i}" for i in range(5)]
    for branch in branches:
        _git(repo, "branch", branch)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(9)     # 8 racers and this test: nobody opens before all are ready
    results = ctx.Queue()
    racers = [ctx.Process(target=_race, args=(str(repo), branches, start, results)) for _ in range(8)]
    for racer in racers:
        racer.start()
    try:
        host = GitHost(repo)
        for round, branch in enumerate(branches, 1):
            start.wait(timeout=60)
            said = [results.get(timeout=60) for _ in racers]
            assert {b for b, _, _ in said} == {branch}
            assert sorted(what for _, what, _ in said) == ["already"] * 7 + ["opened"]
            assert {number for _, _, number in said} == {round}       # the refused ones were shown the winner
            assert [p["branch"] for p in host.pulls()] == branches[:round]
            assert host.lookup(branch)["number"] == round
    finally:
        start.abort()              # a failed round must not leave the racers waiting for the next one
        for racer in racers:
            racer.join(timeout=60)
            if racer.exitcode is None:
                racer.kill()
    assert [r.exitcode for r in racers] == [0] * 8
