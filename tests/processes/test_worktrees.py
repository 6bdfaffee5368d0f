"""`tui-agent worktrees [--clean]` and `tui-agent pulls`: what the coding agents leave behind, listed by what git
knows and the runs that name it, removed once every run working in it has ended, its branch kept so a merged one
can be deleted; and the TUI's run screen of a coding run, whose W removes its worktree after asking."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import key, later, ok, paused_worker, rendered, run_screen, show_json

from tui_agent import operate
from tui_agent.screens.modals import ConfirmModal
from tui_agent.store import open_store

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the coding agents' worktrees need git")


def git(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=check,
                          capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    for i in range(6):
        (root / "pkg" / f"m{i}.py").write_text(f"from acme_old.part import thing\nVALUE = {i}\n")
    git("init", "-q", "-b", "main", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-qm", "start", cwd=root)
    return root


def refactor(tui_agent, repo: Path) -> str:
    return ok(tui_agent("start", "refactor-imports", "--input",
                        json.dumps({"root": str(repo), "from": "acme_old", "to": "acme_new"}))).stdout.strip()


def listed(tui_agent) -> dict[str, dict]:
    return {tree["run"]: tree for tree in json.loads(ok(tui_agent("worktrees", "--json")).stdout)}


def test_after_a_refactor_and_a_patch_end_both_are_listed_and_clean_lets_the_merged_branch_be_deleted(tui_agent,
                                                                                                      repo):
    moved, fixed = refactor(tui_agent, repo), ok(tui_agent("start", "patch")).stdout.strip()
    ok(tui_agent("worker", "--once"))
    ok(tui_agent("approve", fixed))
    ok(tui_agent("worker", "--once"))
    trees = listed(tui_agent)
    assert set(trees) == {moved, fixed}
    for run_id, agent in ((moved, "refactor-imports"), (fixed, "patch")):
        tree = trees[run_id]
        assert (tree["agent"], tree["status"], tree["merged"], tree["removable"]) == (agent, "succeeded", False, True)
        assert Path(tree["worktree"]).is_dir() and tree["size_bytes"] > 0
    branch = trees[moved]["branch"]
    assert trees[moved]["repo"] == str(repo) and trees[moved]["onto"] == "main"
    assert trees[fixed]["branch"] == "patch/issue-mean-is-wrong"
    git("merge", "-q", branch, cwd=repo)                                # the person merges the refactor
    refused = git("branch", "-d", branch, cwd=repo, check=False)
    assert refused.returncode != 0 and "worktree" in refused.stderr     # what a worktree left behind does
    assert listed(tui_agent)[moved]["merged"] is True
    text = ok(tui_agent("worktrees")).stdout
    assert moved in text and fixed in text and branch in text

    unanswered = tui_agent("worktrees", "--clean", input="")            # a script that did not say --yes
    assert unanswered.returncode == 2 and "read no answer; nothing was removed; add --yes" in unanswered.stderr
    declined = ok(tui_agent("worktrees", "--clean", input="n\n"))
    assert declined.stdout.count("to remove: ") == 2 and "nothing was removed" in declined.stdout
    assert "Remove 2 worktree(s)" in declined.stderr
    assert all(Path(tree["worktree"]).is_dir() for tree in trees.values())
    cleaned = ok(tui_agent("worktrees", "--clean", input="y\n")).stdout
    assert f"merged into main: delete it with git -C {repo} branch -d {branch}" in cleaned
    assert "not merged into main" in cleaned and cleaned.count("removed ") == 2
    assert not any(Path(tree["worktree"]).exists() for tree in trees.values())
    git("branch", "-d", branch, cwd=repo)                              # now it works, as docs/coding-agents.md says
    assert "no worktree" in ok(tui_agent("worktrees")).stdout
    assert any(e["kind"] == "worktree" and "removed" in e["message"] for e in show_json(tui_agent, moved)["events"])


def test_a_worktree_is_kept_while_any_run_may_go_on_in_it_or_it_holds_uncommitted_changes(tui_agent, repo):
    run_id = refactor(tui_agent, repo)
    with paused_worker("worker", "--once", pause_at="before-step:5"):    # running, its lease live
        kept = ok(tui_agent("worktrees", "--clean", "--yes")).stdout
        assert kept.startswith("kept ") and f"{run_id} is running and works in it" in kept
        tree = Path(listed(tui_agent)[run_id]["worktree"])
        assert tree.is_dir()
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))    # takes it over once its lease is over
    assert show_json(tui_agent, run_id)["run"]["status"] == "succeeded"
    fork = ok(tui_agent("fork", run_id, "--from-step", "3")).stdout.strip()  # goes on in the same worktree
    kept = ok(tui_agent("worktrees", "--clean", "--yes")).stdout
    assert f"{fork} is queued" in kept and tree.is_dir()
    assert [r["id"] for r in listed(tui_agent)[fork]["runs"]] == [run_id, fork]
    ok(tui_agent("cancel", fork))
    (tree / "notes.txt").write_text("mine\n")                           # something no commit holds
    kept = tui_agent("worktrees", "--clean", "--yes")
    assert kept.returncode == 1 and "holds 1 change(s) no commit does (?? notes.txt)" in kept.stdout, kept
    assert tree.is_dir()
    (tree / "notes.txt").unlink()
    assert "removed " in ok(tui_agent("worktrees", "--clean", "--yes")).stdout and not tree.exists()


def test_pulls_lists_the_local_hosts_pull_requests(tui_agent, repo, tmp_path):
    fixed = ok(tui_agent("start", "patch")).stdout.strip()
    ok(tui_agent("worker", "--once"))
    assert "no pull request" in ok(tui_agent("pulls")).stdout
    ok(tui_agent("approve", fixed))
    ok(tui_agent("worker", "--once"))
    text = ok(tui_agent("pulls")).stdout
    assert "patch/issue-mean-is-wrong" in text and "open" in text and "Fix: mean() is wrong" in text
    [pr] = json.loads(ok(tui_agent("pulls", "--json")).stdout)
    assert (pr["number"], pr["state"], pr["base"]) == (1, "open", "main")
    assert pr["head"] == show_json(tui_agent, fixed)["run"]["result"]["commit"]
    sample = Path(pr["repo"])
    assert json.loads(ok(tui_agent("pulls", "--repo", str(sample / "calc"), "--json")).stdout)[0]["number"] == 1
    assert "no pull request in" in ok(tui_agent("pulls", "--repo", str(repo))).stdout
    assert not (repo / ".git" / "tui-agent").exists()                   # a read makes nothing
    not_git = tmp_path / "plain"
    not_git.mkdir()
    refused = tui_agent("pulls", "--repo", str(not_git))
    assert refused.returncode == 2 and "is not a git repository" in refused.stderr
    shutil.rmtree(sample)                                               # a repository the runs named is gone
    assert "no pull request: no coding run" in ok(tui_agent("pulls")).stdout


async def test_a_coding_runs_screen_shows_its_worktree_and_W_removes_it_after_asking_once_it_has_ended(
        tui_agent, tmp_path):
    run_id = ok(tui_agent("start", "patch")).stdout.strip()
    ok(tui_agent("worker", "--once"))
    db = tmp_path / "runs.db"
    tree = Path(show_json(tui_agent, run_id)["journal"][1]["result"]["worktree"])
    async with run_screen(db, run_id, size=(80, 24)) as (app, pilot):
        assert "branch patch/issue-mean-is-wrong" in "\n".join(rendered(app))
        toasts = []
        app.notify = lambda message, **kw: toasts.append(message)
        await key(pilot, "W")                                  # waiting for approval: it goes on in it
        assert not isinstance(app.screen, ConfirmModal) and "is waiting: approval and works in it" in toasts[-1]
        store = open_store(db)
        operate.cancel_run(store, run_id)
        store.close()
        await key(pilot, "W")
        assert isinstance(app.screen, ConfirmModal) and "Remove the worktree" in "\n".join(rendered(app))
        await key(pilot, "escape")                              # kept
        assert tree.is_dir()
        await key(pilot, "W")
        await pilot.click("#confirm")
        await pilot.pause()
        assert not tree.exists() and "worktree removed; its branch patch/issue-mean-is-wrong stays" in toasts[-1]


@pytest.mark.postgres
def test_a_postgres_databases_coding_runs_worktrees_are_listed_and_cleaned(tui_agent, repo, pg_url):
    run_id = ok(tui_agent("--db", pg_url, "start", "refactor-imports", "--input",
                          json.dumps({"root": str(repo), "from": "acme_old", "to": "acme_new"}))).stdout.strip()
    ok(tui_agent("--db", pg_url, "worker", "--once"))
    [tree] = json.loads(ok(tui_agent("--db", pg_url, "worktrees", "--json")).stdout)
    assert (tree["run"], tree["status"], tree["repo"], tree["removable"]) == (run_id, "succeeded", str(repo), True)
    assert "removed " in ok(tui_agent("--db", pg_url, "worktrees", "--clean", "--yes")).stdout
    assert not Path(tree["worktree"]).exists() and tree["branch"] in git("branch", cwd=repo).stdout
