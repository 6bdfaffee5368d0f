"""githost: the local git host a coding agent opens its pull requests on.

It behaves like a real host, so the effect ledger has something honest to reconcile
against: it refuses a second open pull request for the same branch (AlreadyOpen,
carrying the one it has), and `lookup(branch)` answers which one is open. The pull
requests of a repository are one JSON file in the repository's git common dir, so
every worktree of the repository sees one host and the user's working tree gets no
new file.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class AlreadyOpen(Exception):
    """The host already has an open pull request for this branch; `pr` is it (the caller treats it as done)."""

    def __init__(self, pr: dict) -> None:
        super().__init__(f"branch {pr['branch']} already has open pull request #{pr['number']}")
        self.pr = pr


class GitHost:
    """The pull requests of one repository; safe for several processes at once (flock)."""

    def __init__(self, repo: Path) -> None:
        """`repo` is any folder of the repository (its top, a subfolder, or one of its worktrees)."""
        self.repo = Path(repo)
        try:
            common = _git(self.repo, "rev-parse", "--git-common-dir")
        except _NoGit as e:
            raise ValueError(str(e)) from None
        except _GitFailed:
            raise ValueError(f"{self.repo} is not a git repository") from None
        home = (self.repo / common).resolve() / "tui-agent"   # git may answer relative to `repo`
        home.mkdir(parents=True, exist_ok=True)
        self._state_path = home / "pulls.json"
        self._lock_path = home / "pulls.lock"

    def open(self, branch: str, *, title: str, body: str, base: str = "main", key: str | None = None) -> dict:
        """Open a pull request for `branch`, numbered 1, 2, ... per repository. An open one for the branch
        already there raises AlreadyOpen; a branch the repository does not have raises ValueError. Either
        way nothing is recorded."""
        with self._locked():
            pulls = self._load()
            for pr in pulls:
                if pr["branch"] == branch and pr["state"] == "open":
                    raise AlreadyOpen(pr)
            try:
                _git(self.repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
            except _GitFailed:
                raise ValueError(f"no branch {branch!r} in {self.repo}") from None
            pr = {"number": max((p["number"] for p in pulls), default=0) + 1, "branch": branch, "base": base,
                  "title": title, "body": body, "state": "open", "key": key, "opened_at": time.time()}
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

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _load(self) -> list[dict]:
        try:
            return json.loads(self._state_path.read_text())["pulls"]
        except FileNotFoundError:
            return []

    def _save(self, pulls: list[dict]) -> None:
        """Write the state whole or not at all: a crash leaves the old file or the new one."""
        fd, tmp = tempfile.mkstemp(dir=self._state_path.parent, prefix=self._state_path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump({"pulls": pulls}, handle, indent=1)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self._state_path)
        except BaseException:
            os.unlink(tmp)
            raise


class _GitFailed(Exception):
    pass


class _NoGit(_GitFailed):
    pass


def _git(repo: Path, *args: str) -> str:
    """git's answer in `repo`; a failure, or no git on this machine, raises _GitFailed."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    except OSError as e:
        raise _NoGit(f"git could not be run ({e})") from None
    if done.returncode != 0:
        raise _GitFailed(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()
