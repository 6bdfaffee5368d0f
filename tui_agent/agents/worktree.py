"""A coding agent's own git worktree and branch: made once from HEAD, recorded, and checked on every resume,
so a run never rewrites a tree that is not the one it started on."""

from __future__ import annotations

import re
import subprocess
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
    """`prefix/<slug><suffix>`, the slug made from `words` with every character git refuses in a branch name
    replaced, and the whole checked by `git check-ref-format --branch`."""
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


def _own_commits(place: dict, run_id: str) -> tuple[list[str], list[str]]:
    """The commits on the branch since its base: (this run's, anyone else's)."""
    log = git("log", "--format=%H%x00%B%x01", f"{place['base']}..{place['branch']}", cwd=Path(place["worktree"]))
    own, other = [], []
    for record in filter(None, (r.strip() for r in log.split("\x01"))):
        sha, _, body = record.partition("\x00")
        (own if f"{TRAILER}: {run_id}" in body else other).append(sha)
    return own, other


def verify(place: dict, run_id: str) -> None:
    """Park the run (reason environment, naming what differs) unless the worktree is still there, on its branch,
    and the branch is its base plus only this run's commits. The user's own branch moving on is normal."""
    tree = Path(place["worktree"])
    if not tree.is_dir():
        raise ParkRun(f"the worktree {tree} is gone; restore it (git worktree add {tree} {place['branch']}) or "
                      "start a new run")
    branch = _on_branch(tree)
    if branch != place["branch"]:
        raise ParkRun(f"the worktree {tree} is on {branch or 'a detached HEAD'}, not {place['branch']}; check out "
                      f"{place['branch']} there again")
    try:
        git("merge-base", "--is-ancestor", place["base"], place["branch"], cwd=tree)
        _, other = _own_commits(place, run_id)
    except GitFailed:
        raise ParkRun(f"the branch {place['branch']} no longer starts at {place['base'][:12]} (it was reset or "
                      "rebased elsewhere); put it back or start a new run") from None
    if other:
        raise ParkRun(f"the branch {place['branch']} has {len(other)} commit(s) this run did not make "
                      f"({other[0][:12]}); remove them or start a new run")


def commit_once(place: dict, run_id: str, paths: list[str] | None, message: str) -> str:
    """Commit `paths` (relative to the worktree; None: every change) once: a second call, after a crash, finds
    this run's commit."""
    tree = Path(place["worktree"])
    own, _ = _own_commits(place, run_id)
    if own:
        return own[0]
    identity = [] if _configured(tree) else ["-c", "user.name=tui-agent", "-c", "user.email=tui-agent@localhost"]
    if paths is None:
        git("add", "-A", cwd=tree)
    for start in range(0, len(paths or ()), 500):
        git("add", "--", *paths[start:start + 500], cwd=tree)
    git(*identity, "commit", "--allow-empty", "-q", "-m", f"{message}\n\n{TRAILER}: {run_id}", cwd=tree)
    return git("rev-parse", "HEAD", cwd=tree)


def _configured(tree: Path) -> bool:
    try:
        return bool(git("config", "user.email", cwd=tree))
    except GitFailed:
        return False
