"""githost: the local git host a coding agent opens its pull requests on.

It behaves like a real host, so the effect ledger has something honest to reconcile against: a second open
pull request for one branch is refused (AlreadyOpen, carrying the one it has), `lookup(branch)` answers which is
open, and a pull request is for one commit (`head`), refused when the branch is no longer at it (HeadMoved).
A repository's pull requests are one JSON file in its git common dir: every worktree sees one host."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .state_file import locked, write_whole
from .worktree import GitFailed, git


class AlreadyOpen(Exception):
    """The host already has an open pull request for this branch; `pr` is it (the caller treats it as done)."""

    def __init__(self, pr: dict) -> None:
        super().__init__(f"branch {pr['branch']} already has open pull request #{pr['number']}")
        self.pr = pr


class HeadMoved(Exception):
    """The branch is not at the commit the pull request was to be opened for; `found` is where it is."""

    def __init__(self, branch: str, head: str, found: str) -> None:
        super().__init__(f"branch {branch} is at {found[:12]}, not at {head[:12]}; nothing was opened")
        self.branch, self.head, self.found = branch, head, found


class GitHost:
    """The pull requests of one repository; safe for several processes at once (flock)."""

    def __init__(self, repo: Path) -> None:
        """`repo` is any folder of the repository (its top, a subfolder, or one of its worktrees)."""
        self.repo = Path(repo)
        home = _home(self.repo)
        home.mkdir(parents=True, exist_ok=True)
        self._state_path = home / "pulls.json"
        self._lock_path = home / "pulls.lock"

    def open(self, branch: str, *, title: str, body: str, base: str = "main", key: str | None = None,
             head: str | None = None) -> dict:
        """Open a pull request for `branch` at the commit it is at (recorded as `head`), numbered 1, 2, ... per
        repository. With `head`, only if the branch is at that commit (the one a person reviewed): the branch is
        read and the pull request recorded under the host's lock, one act, and a branch elsewhere raises
        HeadMoved. An open one for the branch already there raises AlreadyOpen; a branch the repository does not
        have raises ValueError. Whatever is raised, nothing is recorded."""
        with self._locked():
            pulls = self._load()
            for pr in pulls:
                if pr["branch"] == branch and pr["state"] == "open":
                    raise AlreadyOpen(pr)
            try:
                found = git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", cwd=self.repo)
            except GitFailed:
                raise ValueError(f"no branch {branch!r} in {self.repo}") from None
            if head is not None and found != head:
                raise HeadMoved(branch, head, found)
            pr = {"number": max((p["number"] for p in pulls), default=0) + 1, "branch": branch, "base": base,
                  "head": found, "title": title, "body": body, "state": "open", "key": key,
                  "opened_at": time.time()}
            self._save([*pulls, pr])
            return pr

    def lookup(self, branch: str) -> dict | None:
        """The open pull request for `branch`, or None."""
        return next((pr for pr in self.pulls() if pr["branch"] == branch and pr["state"] == "open"), None)

    def pulls(self) -> list[dict]:
        """Every pull request, open or closed, oldest first."""
        with self._locked():
            return self._load()

    def close(self, number: int) -> dict:
        """Close pull request `number` (closing a closed one changes nothing); its branch may then open
        a new one. An unknown number raises ValueError."""
        with self._locked():
            pulls = self._load()
            for pr in pulls:
                if pr["number"] == number:
                    if pr["state"] != "closed":
                        pr.update(state="closed", closed_at=time.time())
                        self._save(pulls)
                    return pr
        raise ValueError(f"no pull request #{number} in {self.repo}")

    def _locked(self):
        return locked(self._lock_path)

    def _load(self) -> list[dict]:
        return _read(self._state_path)

    def _save(self, pulls: list[dict]) -> None:
        write_whole(self._state_path, {"pulls": pulls}, indent=1)


def _home(repo: Path) -> Path:
    """Where the host keeps a repository's pull requests: `tui-agent` in its git common dir (ValueError when `repo`
    is not in a repository)."""
    if not repo.is_dir():
        raise ValueError(f"{repo} is not a git repository (there is no such folder)")
    try:
        common = git("rev-parse", "--git-common-dir", cwd=repo)
    except GitFailed as e:
        raise ValueError(f"{repo} is not a git repository ({e})") from None
    return (repo / common).resolve() / "tui-agent"   # git may answer relative to `repo`


def read_pulls(repo: Path) -> list[dict]:
    """Every pull request of the repository `repo` is in, oldest first. They are read without making or locking
    anything, as the file is only ever replaced whole. ValueError when `repo` is not in a repository."""
    return _read(_home(Path(repo)) / "pulls.json")


def _read(state: Path) -> list[dict]:
    try:
        return json.loads(state.read_text())["pulls"]
    except FileNotFoundError:
        return []
