"""refactor-imports end to end with real processes: a 300-file tree survives repeated kill -9 and comes out
byte for byte as a run without crashes; a kill mid-write leaves the file whole; in git it works in its own
worktree and branch and parks when that branch was moved under it; a file it cannot parse parks the run; links,
FIFOs and sockets are left alone and listed, and a name that is not UTF-8 parks the run until it is renamed."""

import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, later, ok, parked_message, show_json

OLD, NEW = "acme_old", "acme_new"


def make_tree(root: Path, count: int, seed: int = 7) -> Path:
    """`count` files that import OLD (Python and TypeScript, nested folders), and a few that do not."""
    rng = random.Random(seed)
    for i in range(count):
        folder = root / f"pkg{i % 7}" / f"sub{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        if i % 2:
            body = (f"import os\nfrom {OLD}.part{i % 5} import thing_{i}\nimport {OLD} as old\n"
                    f"# {OLD} is mentioned in a comment\nVALUE = {rng.randint(0, 10**6)}\n")
            (folder / f"mod_{i}.py").write_text(body, newline="")
        else:
            body = (f"import {{ cn }} from '{OLD}/part{i % 5}';\r\nconst x = require(\"{OLD}\");\r\n"
                    f"// from '{OLD}' in a comment\r\nexport const v{i} = {rng.randint(0, 10**6)};\r\n")
            (folder / f"comp_{i}.ts").write_text(body, newline="")
    (root / "untouched.py").write_text("import json\n")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "dep.js").write_text(f"require('{OLD}')\n")   # a build folder: never touched
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def start(tui_agent, root: Path, *db: str) -> str:
    done = ok(tui_agent(*db, "start", "refactor-imports", "--input",
                        json.dumps({"root": str(root), "from": OLD, "to": NEW})))
    return done.stdout.strip()


def entries(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT count(*) FROM journal").fetchone()[0]


def file_steps(report: dict) -> list[dict]:
    return [e for e in report["journal"] if e["name"].startswith("file:")]


def test_300_files_survive_repeated_kill_9_and_match_a_run_without_crashes(tui_agent, tmp_path, db_path):
    reference = make_tree(tmp_path / "reference", 300)
    tree = make_tree(tmp_path / "tree", 300)
    assert snapshot(reference) == snapshot(tree)
    clean = ok(tui_agent("--db", str(tmp_path / "clean.db"), "run", "refactor-imports", "--input",
                         json.dumps({"root": str(reference), "from": OLD, "to": NEW}), timeout=120))
    assert "succeeded (check_passed)" in clean.stdout

    run_id = start(tui_agent, tree)
    rng, kills, clock = random.Random(2026), 0, 0
    while kills < 6:
        clock += 100
        worker = subprocess.Popen([sys.executable, "-m", "tui_agent", "worker", "--once", "--lease", "30"],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "TUI_AGENT_NOW": later(clock)})
        target = entries(db_path) + rng.randint(3, 40)
        deadline = time.monotonic() + 60
        while entries(db_path) < target and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.004))          # anywhere inside the next file's read, write or record
        if worker.poll() is not None:
            break
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        kills += 1
    assert kills >= 5, "the kills must land mid-run"
    ok(tui_agent("worker", "--once", "--lease", "30", env={"TUI_AGENT_NOW": later(clock + 100)}, timeout=120))

    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed")
    assert report["run"]["attempt"] >= 6
    steps = file_steps(report)
    names = [e["name"] for e in steps]
    assert len(names) == len(set(names)) == 300          # every file recorded exactly once
    results = [e["result"] for e in steps]
    done_again = [r["path"] for r in results if r["status"] == "already done"]
    assert len(done_again) <= kills    # only a file renamed into place and killed before its record
    assert snapshot(tree) == snapshot(reference)          # byte for byte, temporary files included (none left)


def test_a_kill_between_the_temporary_file_and_the_rename_leaves_the_original_whole(tui_agent, tmp_path):
    tree = make_tree(tmp_path / "tree", 6)
    before = snapshot(tree)
    run_id = start(tui_agent, tree)
    crashed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "mid-write:3"})
    assert crashed.returncode == -signal.SIGKILL
    plan = show_json(tui_agent, run_id)["journal"][2]["result"]["files"]
    third = plan[2]
    assert (tree / third).read_bytes() == before[third]       # not truncated, not half-written: the old file
    assert OLD in (tree / third).read_text()
    leftovers = [p for p in tree.rglob(".*.tmp")]
    assert len(leftovers) == 1                                # the new content, never renamed over it
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    assert show_json(tui_agent, run_id)["run"]["status"] == "succeeded"
    assert not list(tree.rglob(".*.tmp"))                     # the retry cleared what the kill left
    assert (tree / third).read_bytes() != before[third] and NEW in (tree / third).read_text()


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed on this machine")   # the agent then edits in place (tested above)
    root = make_tree(tmp_path / "repo", 12)
    (root / ".gitignore").write_text("node_modules/\n")     # tracked files only: the ignored build folder stays out
    git("init", "-q", "-b", "main", cwd=root)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "empty", cwd=root)
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A", cwd=root)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start", cwd=root)
    return root


def test_in_git_it_works_in_its_own_worktree_and_branch_and_commits_once(tui_agent, repo, tmp_path):
    before = snapshot(repo)
    run_id = start(tui_agent, repo)
    crashed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-step-commit:8"})
    assert crashed.returncode == -signal.SIGKILL
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "the user moves on",
        cwd=repo)                                        # the user's own branch advancing is normal
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed")
    place = report["journal"][1]["result"]
    branch = place["branch"]
    assert branch.startswith(f"refactor/{OLD}-to-{NEW}-") and branch.endswith(run_id)
    assert Path(place["worktree"]).is_dir() and Path(place["worktree"]).is_relative_to(tmp_path / "runs.data")
    assert place["base"] == git("rev-parse", "main~1", cwd=repo)     # HEAD when it started, before the user's commit
    def sources(files: dict) -> dict:
        return {k: v for k, v in files.items() if not k.startswith(".git")}

    assert sources(snapshot(repo)) == sources(before)    # the user's own tree is never touched
    assert git("log", "--format=%s", f"{place['base']}..{branch}", cwd=repo).splitlines() == [
        f"Rewrite imports of {OLD} to {NEW} (12 files)"]
    changed = git("diff", "--name-only", place["base"], branch, cwd=repo).splitlines()
    assert len(changed) == 12
    result = report["run"]["result"]
    assert result["merge"] == f"git -C {repo} merge {branch}"
    assert git("show", f"{branch}:pkg1/sub1/mod_1.py", cwd=repo).startswith(f"import os\nfrom {NEW}.part1 import")


@pytest.mark.parametrize("moved, said", [
    (["reset", "-q", "--hard", "HEAD~1"], "no longer starts at"),
    (["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "not the run's"],
     "1 commit(s) this run did not make"),
    (["checkout", "-q", "-b", "elsewhere"], "not refactor/"),
])
def test_in_git_a_refactor_branch_moved_elsewhere_parks_the_run_until_it_is_put_back(tui_agent, repo, moved, said):
    run_id = start(tui_agent, repo)
    crashed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-step-commit:6"})
    assert crashed.returncode == -signal.SIGKILL
    place = show_json(tui_agent, run_id)["journal"][1]["result"]
    before = snapshot(Path(place["worktree"]))
    git(*moved, cwd=Path(place["worktree"]))
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "environment")
    assert said in report["events"][-1]["message"]
    assert len(file_steps(report)) == 3          # nothing more was rewritten in a tree that is not the run's
    if moved[0] != "reset":
        assert {k: v for k, v in snapshot(Path(place["worktree"])).items() if not k.startswith(".git")} == {
            k: v for k, v in before.items() if not k.startswith(".git")}
    run_printed(report["events"][-1]["message"])                # then the advice, as a user would follow it
    finished_after_resume(tui_agent, run_id)
    complete_on_branch(repo, place)


def test_a_file_that_does_not_parse_parks_the_run_and_resume_finishes_after_the_fix(tui_agent, tmp_path):
    tree = make_tree(tmp_path / "tree", 4)
    broken = tree / "pkg0" / "broken.py"
    broken.write_text(f"from {OLD} import x\nif True\n    pass\n")
    run_id = start(tui_agent, tree)
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "environment")
    message = report["events"][-1]["message"]
    assert "pkg0/broken.py" in message and "does not parse" in message and f"resume {run_id}" in message
    assert OLD in broken.read_text()
    broken.write_text(f"from {OLD} import x\nif True:\n    pass\n")
    ok(tui_agent("resume", run_id))
    ok(tui_agent("worker", "--once"))
    assert show_json(tui_agent, run_id)["run"]["status"] == "succeeded"
    assert broken.read_text() == f"from {NEW} import x\nif True:\n    pass\n"


def test_the_seed_job_rewrites_a_tsx_alias(tui_agent, tmp_path):
    tree = tmp_path / "web"
    (tree / "components").mkdir(parents=True)
    card = tree / "components" / "Card.tsx"
    card.write_text('import { cn } from "@/utils/cn";\nimport x from "@/utils/cnx";\n'
                    'export const Card = () => <div className={cn("a")} />;\n')
    done = ok(tui_agent("run", "refactor-imports", "--input",
                        json.dumps({"root": str(tree), "from": "@/utils/cn", "to": "~/lib/cn"})))
    assert "succeeded" in done.stdout
    assert card.read_text() == ('import { cn } from "~/lib/cn";\nimport x from "@/utils/cnx";\n'
                                'export const Card = () => <div className={cn("a")} />;\n')


def printed_git_command(message: str) -> str:
    """The one git command a park message prints in parentheses, as a user would copy it."""
    [command] = re.findall(r"\((git -C [^()]*)\)", message)
    return command


def run_printed(message: str) -> None:
    subprocess.run(printed_git_command(message), shell=True, check=True, capture_output=True)


def complete_on_branch(repo: Path, place: dict) -> None:
    """The branch is the base plus one commit holding the rewrite of every planned file, byte for byte."""
    from tui_agent.agents.imports_rewrite import rewrite

    branch, base = place["branch"], place["base"]
    assert len(git("log", "--format=%H", f"{base}..{branch}", cwd=repo).splitlines()) == 1
    changed = git("diff", "--name-only", base, branch, cwd=repo).splitlines()
    assert len(changed) == 12
    for name in changed:
        before = subprocess.run(["git", "show", f"{base}:{name}"], cwd=repo, capture_output=True, check=True).stdout
        after = subprocess.run(["git", "show", f"{branch}:{name}"], cwd=repo, capture_output=True, check=True).stdout
        assert after == rewrite(before, name, OLD, NEW).data != before


def recorded_files(report: dict) -> list[str]:
    """The files whose steps are recorded, in the plan's order."""
    return [e["name"].removeprefix("file:") for e in file_steps(report)]


def six_files_recorded(tui_agent, repo: Path) -> tuple[str, dict, list[str]]:
    """A run killed after its sixth file's record: its id, its place and those six files."""
    run_id = start(tui_agent, repo)
    crashed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-step-commit:9"})
    assert crashed.returncode == -signal.SIGKILL
    report = show_json(tui_agent, run_id)
    assert len(file_steps(report)) == 6
    return run_id, report["journal"][1]["result"], recorded_files(report)


def finished_after_resume(tui_agent, run_id: str) -> dict:
    """`resume`, then a worker: the run must succeed; its report."""
    ok(tui_agent("resume", run_id))
    ok(tui_agent("worker", "--once"))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed"), report["events"][-1]
    return report


def foreign_commit(tree: Path) -> None:
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "not the run's", cwd=tree)


@pytest.mark.parametrize("change, said, follow", [
    ("git checkout -- .", "6 of the 6 files this run recorded no longer hold what it wrote there: 6 are back to "
     "their content from before the rewrite", "resume"),
    ("a deleted file", "is gone; put back its committed content (git -C", "printed"),
    ("rm -rf the worktree", "is gone; restore it (git -C", "printed"),
    ("a foreign commit", "has 1 commit(s) this run did not make", "printed"),
    ("a foreign commit, removed with git reset --hard HEAD~1", "has 1 commit(s) this run did not make",
     "reset --hard HEAD~1"),
], ids=["checkout", "deleted", "rm-rf", "foreign", "foreign-reset-hard"])
def test_a_worktree_changed_behind_the_run_parks_it_and_the_advice_followed_finishes_the_rewrite(
        tui_agent, repo, change, said, follow):
    run_id, place, recorded = six_files_recorded(tui_agent, repo)
    tree = Path(place["worktree"])
    if change == "git checkout -- .":
        git("checkout", "--", ".", cwd=tree)                   # the six rewrites thrown away, the branch unchanged
    elif change == "a deleted file":
        (tree / recorded[1]).unlink()
    elif change == "rm -rf the worktree":
        shutil.rmtree(tree)
    else:
        foreign_commit(tree)
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    message = parked_message(tui_agent, run_id)
    assert said in message and message.endswith(f"then tui-agent resume {run_id}")
    if change == "a deleted file":
        assert recorded[1] in message
    assert len(file_steps(show_json(tui_agent, run_id))) == 6   # nothing more written, nothing committed
    assert "Tui-Agent-Run" not in git("log", "--format=%B", f"{place['base']}..{place['branch']}", cwd=repo)
    if follow == "printed":
        run_printed(message)
    elif follow == "reset --hard HEAD~1":
        git("reset", "-q", "--hard", "HEAD~1", cwd=tree)        # drops the commit and the six rewrites with it
    report = finished_after_resume(tui_agent, run_id)
    complete_on_branch(repo, place)
    assert report["run"]["result"]["commit"] == git("rev-parse", place["branch"], cwd=repo)
    again = [e["message"] for e in report["events"] if e["message"].startswith("rewrote again")]
    assert len(again) == (0 if change == "a foreign commit" else 1)   # reset --keep kept the rewrites


@pytest.mark.parametrize("change, said", [
    ("git reset --hard BASE", "was reset to"),
    ("git commit --amend", "which replaced this run's commit"),
    ("a foreign commit", "has 1 commit(s) this run did not make"),
], ids=["reset", "amend", "foreign"])
def test_a_branch_moved_off_the_runs_commit_parks_it_until_the_branch_is_put_back(tui_agent, repo, change, said):
    run_id = start(tui_agent, repo)
    crashed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-step-commit:16"})   # the commit's
    assert crashed.returncode == -signal.SIGKILL
    report = show_json(tui_agent, run_id)
    place, commit = report["journal"][1]["result"], report["journal"][-1]["result"]
    assert report["journal"][-1]["name"] == "commit"
    tree = Path(place["worktree"])
    if change == "git reset --hard BASE":
        git("reset", "-q", "--hard", place["base"], cwd=tree)
    elif change == "git commit --amend":
        with (tree / "untouched.py").open("a") as extra:
            extra.write("EXTRA = 1\n")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-a", "--amend", "--no-edit", cwd=tree)
    else:
        foreign_commit(tree)
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    message = parked_message(tui_agent, run_id)
    assert said in message and commit[:12] in message
    run_printed(message)
    report = finished_after_resume(tui_agent, run_id)
    assert report["run"]["result"]["commit"] == commit == git("rev-parse", place["branch"], cwd=repo)
    complete_on_branch(repo, place)


def test_a_run_recorded_before_the_digests_is_not_checked_and_says_so(tui_agent, repo, db_path):
    run_id, place, _ = six_files_recorded(tui_agent, repo)
    with sqlite3.connect(db_path) as conn:                      # as an older tui-agent recorded them
        for position, result in conn.execute("SELECT position, result FROM journal_rows WHERE run_id = ? AND "
                                             "name LIKE 'file:%'", (run_id,)).fetchall():
            old = {k: v for k, v in json.loads(result).items() if k != "sha256"}
            conn.execute("UPDATE journal_rows SET result = ? WHERE run_id = ? AND position = ?",
                         (json.dumps(old), run_id, position))
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed")
    assert any(e["message"] == "6 of the files this run recorded have no content digest (recorded by an older "
               "tui-agent), so they are not checked against the tree" for e in report["events"])
    complete_on_branch(repo, place)
    assert "reproduced" in ok(tui_agent("replay", run_id)).stdout    # the replay writes no event


def test_outside_git_a_file_put_back_parks_the_run_and_a_file_edited_after_its_rewrite_is_the_users(tui_agent,
                                                                                                  tmp_path):
    tree = make_tree(tmp_path / "tree", 12)
    before = snapshot(tree)
    run_id = start(tui_agent, tree)
    crashed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "after-step-commit:9"})
    assert crashed.returncode == -signal.SIGKILL
    reverted, edited = recorded_files(show_json(tui_agent, run_id))[:2]
    (tree / reverted).write_bytes(before[reverted])              # the user's undo of one rewrite
    own = "// the user's own line\r\n" if edited.endswith(".ts") else "# the user's own line\n"
    with (tree / edited).open("a", newline="") as source:        # and their own work on another
        source.write(own)
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    message = parked_message(tui_agent, run_id)
    assert f"1 of the 6 files this run recorded no longer holds what it wrote there: 1 is back to its content " \
           f"from before the rewrite ({reverted})" in message and edited not in message
    ok(tui_agent("resume", run_id))
    ok(tui_agent("worker", "--once"))
    assert show_json(tui_agent, run_id)["run"]["status"] == "succeeded"
    assert NEW in (tree / reverted).read_text() and (tree / edited).read_bytes().endswith(own.encode())



def special_tree(root: Path, outside: Path) -> dict[str, str]:
    """A tree with a regular file to rewrite, links to a file inside, to files outside (one a FIFO: following it
    would block) and to a folder outside, and a file to rewrite whose name is not UTF-8; the links by name."""
    outside.mkdir()
    (outside / "secret.py").write_text(f"import {OLD}\nSECRET = 1\n")
    os.mkfifo(outside / "pipe.py")
    (outside / "lib").mkdir()
    (outside / "lib" / "deep.py").write_text(f"import {OLD}\n")
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text(f"import {OLD}\n")
    with open(os.fsencode(root / "pkg") + b"/caf\xe9.py", "w") as f:
        f.write(f"from {OLD} import x\n")
    links = {"pkg/in_link.py": "a.py", "pkg/out_link.py": str(outside / "secret.py"),
             "pkg/pipe_link.py": str(outside / "pipe.py"), "pkg/lib": str(outside / "lib")}
    for name, target in links.items():
        os.symlink(target, root / name)
    return links


def outside_bytes(outside: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in [outside / "secret.py", outside / "lib" / "deep.py"]}


@pytest.mark.parametrize("mode", ["plain", "git"])
def test_links_and_special_files_are_left_alone_listed_and_a_name_not_utf8_parks(tui_agent, tmp_path, mode,
                                                                                    monkeypatch):
    root, outside = tmp_path / "tree", tmp_path / "outside"
    links = special_tree(root, outside)
    before = outside_bytes(outside)
    if mode == "git":
        if shutil.which("git") is None:
            pytest.skip("git is not installed on this machine")
        git("init", "-q", "-b", "main", cwd=root)
        git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A", cwd=root)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start", cwd=root)
    else:   # a FIFO and a socket named like sources: opening either would block or fail
        os.mkfifo(root / "pkg" / "fifo.py")
        monkeypatch.chdir(root / "pkg")   # a socket's path must be short
        server = socket.socket(socket.AF_UNIX)
        server.bind("sock.py")
        server.close()
    run_id = start(tui_agent, root)

    ok(tui_agent("worker", "--once"))            # would hang on the FIFO or a link to one, if it opened them
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "environment")
    message = report["events"][-1]["message"]
    assert "pkg/caf\\xe9.py: not a UTF-8 name" in message and "rename each such file" in message
    assert f"resume {run_id}" in message
    tree = Path(report["journal"][1]["result"]["tree"])
    if mode == "git":                            # the advice, followed: renamed in the run's worktree, with git mv
        git("mv", os.fsdecode(b"pkg/caf\xe9.py"), "pkg/cafe.py", cwd=tree)
    else:
        os.rename(os.fsencode(tree / "pkg") + b"/caf\xe9.py", tree / "pkg" / "cafe.py")
    ok(tui_agent("resume", run_id))
    killed = tui_agent("worker", "--once", env={"TUI_AGENT_CRASH_AT": "before-step:2"})   # before the first file
    assert killed.returncode == -signal.SIGKILL
    (tree / "pkg" / "a.py").rename(tree / "a.py.moved")       # a planned file swapped for a link, under the run
    os.symlink(outside / "secret.py", tree / "pkg" / "a.py")
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(120)}))
    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "environment")
    assert "pkg/a.py is a symbolic link" in report["events"][-1]["message"]
    assert "put the file back" in report["events"][-1]["message"]
    (tree / "pkg" / "a.py").unlink()
    (tree / "a.py.moved").rename(tree / "pkg" / "a.py")
    ok(tui_agent("resume", run_id))
    ok(tui_agent("worker", "--once", env={"TUI_AGENT_NOW": later(240)}))

    report = show_json(tui_agent, run_id)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed")
    assert report["run"]["result"]["files"] == ["pkg/a.py", "pkg/cafe.py"]
    notes = [e["message"] for e in report["events"] if e["kind"] == "note"]
    assert len(notes) == 1                        # said once, though the run was replayed after it
    expected = {f"{name} (a symbolic link to {target})" for name, target in links.items()}
    if mode == "plain":
        expected |= {"pkg/fifo.py (a FIFO)", "pkg/sock.py (a socket)"}
    assert f"left {len(expected)} entries alone" in notes[0]
    assert all(item in notes[0] for item in expected), notes[0]
    assert "pkg/lib/" not in notes[0]              # the linked folder was never walked
    for name, target in links.items():            # every link still a link, to where it pointed
        assert (tree / name).is_symlink() and os.readlink(tree / name) == target
    assert outside_bytes(outside) == before
    assert (tree / "pkg" / "a.py").read_text() == f"import {NEW}\n"
    assert (tree / "pkg" / "cafe.py").read_text() == f"from {NEW} import x\n"
    if mode == "git":
        branch, base = report["run"]["result"]["branch"], report["journal"][1]["result"]["base"]
        summary = git("diff", "--summary", base, branch, cwd=root)
        assert " mode change " not in summary     # a link kept as a link (the old bug: mode change 120000 => 100644)
        assert 'delete mode 100644 "pkg/caf\\351.py"' in summary and "create mode 100644 pkg/cafe.py" in summary
        modes = {line.split("\t")[1]: line.split()[0] for line in git("ls-tree", "-r", branch, cwd=root).splitlines()}
        assert all(modes[name] == "120000" for name in links)
