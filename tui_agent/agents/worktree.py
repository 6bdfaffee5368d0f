"""A coding agent's own git worktree and branch: made once from HEAD, recorded, and checked on every resume,
so a run never rewrites a tree that is not the one it started on, nor names (or ships) a commit its branch
is no longer at. Each park says what differs and the git command that puts it back."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..errors import ParkRun, PermanentError

TRAILER = "Tui-Agent-Run"   # in each commit a run makes, so it can tell its own commits from anyone else's


class GitFailed(Exception):
    pass


def git(*args: str, cwd: Path) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    except OSError as e:
        raise GitFailed(f"git could not be run ({e})") from None
    if done.returncode != 0:
        raise GitFailed(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def toplevel(folder: Path) -> Path | None:
    """The repository `folder` is in (its top folder), or None: not in one, or no git on this machine."""
    try:
        return Path(git("rev-parse", "--show-toplevel", cwd=folder))
    except GitFailed:
        return None


def branch_for(prefix: str, words: str, cwd: Path, suffix: str = "") -> str:
    """The branch name `prefix/<slug><suffix>`, checked by `git check-ref-format --branch`. The slug is made from
    `words` with every character git refuses in a branch name replaced."""
    slug = re.sub(r"[^A-Za-z0-9._]+", "-", words).strip("-.") or "change"
    slug = re.sub(r"\.{2,}", ".", slug).removesuffix(".lock")
    branch = f"{prefix}/{slug[:60]}{suffix}"
    try:
        git("check-ref-format", "--branch", branch, cwd=cwd)
    except GitFailed:
        raise PermanentError(f"could not make a branch name git accepts from {words!r} (tried {branch})") from None
    return branch


def create(repo: Path, path: Path, branch: str) -> dict:
    """The worktree at `path` on a new `branch` from the current HEAD: {repo, worktree, branch, base}. A second
    call after a crash finds the first one's worktree and branch and returns them."""
    if path.exists() and _on_branch(path) == branch:
        return {"repo": str(repo), "worktree": str(path), "branch": branch, "base": git("rev-parse", branch, cwd=repo)}
    path.parent.mkdir(parents=True, exist_ok=True)
    base = git("rev-parse", "HEAD", cwd=repo)
    try:
        git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", cwd=repo)
        git("worktree", "add", str(path), branch, cwd=repo)        # the branch was made before a crash
        base = git("rev-parse", branch, cwd=repo)
    except GitFailed:
        git("worktree", "add", "-b", branch, str(path), base, cwd=repo)
    return {"repo": str(repo), "worktree": str(path), "branch": branch, "base": base}


def _on_branch(path: Path) -> str | None:
    try:
        return git("symbolic-ref", "--short", "HEAD", cwd=path)
    except GitFailed:
        return None


def _own_commits(place: dict, runs: Sequence[str], marks: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """The commits on the branch since its base, newest first: (those of `runs`, anyone else's). With `marks`, only
    own commits whose trailers also carry each of them (`{"Tui-Agent-Task": "fix-mean"}`) count as own."""
    log = git("log", "--format=%H%x00%B%x01", f"{place['base']}..{place['branch']}", cwd=Path(place["worktree"]))
    own, other = [], []
    for record in filter(None, (r.strip() for r in log.split("\x01"))):
        sha, _, body = record.partition("\x00")
        if not any(f"{TRAILER}: {run}" in body for run in runs):
            other.append(sha)
        elif all(f"\n{name}: {value}" in f"\n{body}\n" for name, value in (marks or {}).items()):
            own.append(sha)
    return own, other


def verify(place: dict, runs: Sequence[str]) -> None:
    """Park the run unless its worktree is still there, on its branch, holding only commits of `runs` past its base.

    `runs` are the run and the runs it was forked from (Context.lineage). The park has reason environment and
    names what differs and the command that puts it back. The user's own branch moving on is normal."""
    tree, branch, base = Path(place["worktree"]), place["branch"], place["base"]
    if not tree.is_dir():
        repo = shlex.quote(place["repo"])
        raise ParkRun(f"the worktree {tree} is gone; restore it (git -C {repo} worktree prune && git -C {repo} "
                      f"worktree add {shlex.quote(str(tree))} {shlex.quote(branch)}) or start a new run")
    on = _on_branch(tree)
    if on != branch:
        raise ParkRun(f"the worktree {tree} is on {on or 'a detached HEAD'}, not {branch}; check out {branch} "
                      f"there again (git -C {shlex.quote(str(tree))} checkout {shlex.quote(branch)})")
    if not _is_ancestor(base, branch, tree):
        raise ParkRun(f"the branch {branch} no longer starts at {base[:12]} (it was reset or rebased elsewhere); "
                      f"put it back (git -C {shlex.quote(str(tree))} reset --keep {base}) or start a new run")
    _, other = _own_commits(place, runs)
    if other:
        below = git("rev-parse", f"{other[-1]}^", cwd=tree)
        raise ParkRun(f"the branch {branch} has {len(other)} commit(s) this run did not make ({other[0][:12]}); "
                      f"remove them, keeping the files as the run left them (git -C {shlex.quote(str(tree))} "
                      f"reset --keep {below}), or start a new run")


def at_commit(place: dict, commit: str, instead: str) -> None:
    """A live guard that parks the run unless the branch is at `commit`.

    It runs on every pass and is never journaled: a recorded "yes" would replay after the branch moved.
    `commit` is the one this run made and recorded (and a person may have reviewed). The message says what
    changed and how to put the branch back; `instead` is the other way on (a fork)."""
    try:
        found = git("rev-parse", "--verify", "--quiet", f"refs/heads/{place['branch']}^{{commit}}",
                    cwd=Path(place["worktree"]))
    except GitFailed:
        found = None
    if found != commit:
        raise off_commit(place, commit, found, instead)


def off_commit(place: dict, commit: str, found: str | None, instead: str) -> ParkRun:
    """The park for a branch found at `found` (None: gone) where this run left it at `commit`."""
    tree, branch = Path(place["worktree"]), place["branch"]
    back = f"git -C {shlex.quote(str(tree))} reset --hard {commit}"
    if found is None:
        what = f"the branch {branch} is gone"
        back = f"git -C {shlex.quote(place['repo'])} branch {shlex.quote(branch)} {commit}"
    elif _is_ancestor(found, commit, tree):
        what = f"the branch {branch} was reset to {found[:12]}: this run's commit {commit[:12]} is no longer on it"
    elif _is_ancestor(commit, found, tree):
        count = git("rev-list", "--count", f"{commit}..{found}", cwd=tree)
        what = f"the branch {branch} has {count} commit(s) after this run's commit {commit[:12]} ({found[:12]})"
    else:
        what = (f"the branch {branch} is at {found[:12]}, which replaced this run's commit {commit[:12]} "
                "(amended or rebased)")
    return ParkRun(f"{what}; {instead}, or put the branch back at {commit[:12]} ({back})")


def _is_ancestor(older: str, newer: str, cwd: Path) -> bool:
    try:
        git("merge-base", "--is-ancestor", older, newer, cwd=cwd)
        return True
    except GitFailed:   # not an ancestor, or a commit git no longer has
        return False


def commit_once(place: dict, runs: Sequence[str], paths: list[str] | None, message: str) -> str:
    """Commit `paths` once, marked as the commit of `runs[0]`.

    `paths` are relative to the worktree; None commits every change. A second call, after a crash, finds the
    newest commit of `runs` (the run, or a run it was forked from)."""
    own, _ = _own_commits(place, runs)
    if own:
        return own[0]
    return commit(place, runs[0], paths, message)


def commit(place: dict, run: str, paths: list[str] | None, message: str, marks: dict[str, str] | None = None) -> str:
    """Commit `paths` with the trailers that say `run` made it, and return the commit.

    `paths` None commits every change. The `marks` follow the run's trailer in one paragraph:
    `Tui-Agent-Run: r-...`, then `Tui-Agent-Task: ...`."""
    tree = Path(place["worktree"])
    if paths is None:
        git("add", "-A", cwd=tree)
    else:
        for start in range(0, len(paths), 500):
            git("add", "--", *paths[start:start + 500], cwd=tree)
    trailers = "\n".join(f"{name}: {value}" for name, value in {TRAILER: run, **(marks or {})}.items())
    git(*identity(tree), "commit", "--allow-empty", "-q", "-m", f"{message}\n\n{trailers}", cwd=tree)
    return git("rev-parse", "HEAD", cwd=tree)


def marked(place: dict, runs: Sequence[str], marks: dict[str, str]) -> str | None:
    """The newest commit on the branch that `runs` made and whose trailers carry `marks`, or None."""
    own, _ = _own_commits(place, runs, marks)
    return own[0] if own else None


def identity(tree: Path) -> list[str]:
    """The options that give a commit an author where git has none configured (tui-agent's own name)."""
    try:
        configured = bool(git("config", "user.email", cwd=tree))
    except GitFailed:
        configured = False
    return [] if configured else ["-c", "user.name=tui-agent", "-c", "user.email=tui-agent@localhost"]


def listed(repo: Path) -> list[dict]:
    """Every worktree git knows of the repository `repo` is in, the main one first.

    It is read from `git worktree list --porcelain`: {worktree, head, branch (None: detached), locked, prunable}
    each."""
    found, entry = [], None
    for line in git("worktree", "list", "--porcelain", cwd=repo).splitlines() + [""]:
        word, _, value = line.partition(" ")
        if word == "worktree":
            entry = {"worktree": value, "head": None, "branch": None, "locked": False, "prunable": False}
        elif entry is not None and word in ("HEAD", "branch"):
            entry["head" if word == "HEAD" else "branch"] = value.removeprefix("refs/heads/")
        elif entry is not None and word in ("locked", "prunable"):
            entry[word] = True
        elif not line and entry is not None:
            found.append(entry)
            entry = None
    return found


def current_branch(repo: Path) -> str | None:
    """The branch the repository's main working tree is on (None: a detached HEAD)."""
    try:
        return git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repo)
    except GitFailed:
        return None


def merged(repo: Path, branch: str, into: str) -> bool:
    """Whether every commit of `branch` is on `into`, so `git branch -d` deletes it."""
    return _is_ancestor(f"refs/heads/{branch}", f"refs/heads/{into}", repo)


def changes(tree: Path) -> list[str]:
    """What the worktree holds that no commit does (`git status --porcelain` lines, untracked files included)."""
    return git("status", "--porcelain", cwd=tree).splitlines()


def remove(repo: Path, tree: Path) -> None:
    """Remove the worktree `tree`, its files and git's record of it, keeping its branch. git refuses one that holds
    changes no commit does, or is locked (GitFailed)."""
    git("worktree", "remove", str(tree), cwd=repo)
