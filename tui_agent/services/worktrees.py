"""The worktrees the coding agents made, joined with the runs that name them, and their removal once those ended.

Git's list (`git worktree list --porcelain` of each repository a run names) is joined with the runs whose
journal names each worktree (`listing`). A worktree goes only once every run of its family has ended and it
holds nothing a commit does not (`why_not_remove`, `remove`); its branch stays. An imported run is left out.
Why: docs/coding-agents.md, "Tidying up: worktrees and pull requests"."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..agents import worktree as git_tree
from ..agents.githost import read_pulls
from ..states import TERMINAL, EventKind, RunStatus
from ..store import Store
from ..store.coding_runs import family, naming_worktrees, runs_shown
from ..store.events import add_event


@dataclass
class Worktree:
    """One worktree git knows, with the runs that name it and what its branch is to the repository.

    The runs come oldest first, so the last one is the newest. `onto` is where the run meant the branch to go
    (the repository's current branch when the run did not say), and `merged` whether it is merged there."""

    path: str
    repo: str
    branch: str | None
    onto: str | None
    runs: list[dict]
    locked: bool = False
    merged: bool | None = None
    size: int = 0
    changes: list[str] = field(default_factory=list)

    @property
    def run(self) -> dict:
        return self.runs[-1]

    def as_json(self) -> dict:
        newest = self.run
        return {"worktree": self.path, "repo": self.repo, "branch": self.branch, "onto": self.onto,
                "merged": self.merged, "size_bytes": self.size, "locked": self.locked, "run": newest["id"],
                "agent": newest["agent"], "status": newest["status"], "reason": newest["reason"],
                "runs": [{k: r[k] for k in ("id", "agent", "status", "reason")} for r in self.runs],
                "removable": why_not_remove(self) is None}


def _place(result: str | None) -> dict | None:
    """A step result that names a worktree as agents/worktree.create returns it, or None."""
    try:
        place = json.loads(result or "null")
    except ValueError:
        return None
    if isinstance(place, dict) and all(isinstance(place.get(k), str) for k in ("repo", "worktree", "branch")):
        return place
    return None


def _named(store: Store, run_ids: list[str] | None = None) -> dict[str, tuple[dict, list[str]]]:
    """{the worktree's real path: (the place a run recorded, the runs that name it)}, of every run or `run_ids`."""
    found: dict[str, tuple[dict, list[str]]] = {}
    for run_id, result in naming_worktrees(store.conn, run_ids):
        place = _place(result)
        if place is not None:
            path = os.path.realpath(place["worktree"])
            runs = found.setdefault(path, (place, []))[1]
            if run_id not in runs:
                runs.append(run_id)
    return found


def listing(store: Store, run_ids: list[str] | None = None) -> list[Worktree]:
    """The worktrees git knows that runs (every run, or `run_ids`) name, repository by repository.

    A repository that is gone, or no longer a repository, has none. A coding agent names its worktree in a step
    result among its run's first entries (store/coding_runs.WITHIN): an object with the `repo`, `worktree` and
    `branch` that agents/worktree.create returns (patch and refactor-imports record it at #1); any agent that
    records it so is listed, whatever its name. A fork carries the entries before its fork point, so each run of a
    family that goes on in one worktree names it. A run imported from another database is left out: the worktree
    it names is its source's."""
    named = _named(store, run_ids)
    found = []
    for repo in sorted({place["repo"] for place, _ in named.values()}):
        try:
            trees = git_tree.listed(Path(repo))
        except git_tree.GitFailed:
            continue
        current = git_tree.current_branch(Path(repo))
        for tree in trees:
            named_here = named.get(os.path.realpath(tree["worktree"]))
            if named_here is None:
                continue
            place, runs = named_here
            branch, onto = tree["branch"], place.get("onto") or current
            found.append(Worktree(
                tree["worktree"], repo, branch, onto, runs_shown(store.conn, runs), tree["locked"],
                git_tree.merged(Path(repo), branch, onto) if branch and onto else None, _size(Path(tree["worktree"])),
                _changes(Path(tree["worktree"]))))
    return found


def _size(tree: Path) -> int:
    """The bytes of every file under `tree`, links not followed."""
    total = 0
    for top, _, names in os.walk(tree):
        for name in names:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                pass   # gone meanwhile
    return total


def _changes(tree: Path) -> list[str]:
    try:
        return git_tree.changes(tree)
    except git_tree.GitFailed:   # a worktree whose folder is gone (git lists it as prunable)
        return []


def recorded(store: Store, run_id: str) -> dict | None:
    """The worktree the run recorded among its first entries ({repo, worktree, branch, ...}), read without asking
    git; None for a run that names none."""
    return next((place for place, _ in _named(store, [run_id]).values()), None)


def of_run(store: Store, run_id: str) -> Worktree | None:
    """The worktree the run names, as git knows it now, with every run of its family that names it; None when the
    run names none (or git no longer knows it)."""
    found = [tree for tree in listing(store, family(store, run_id)) if any(r["id"] == run_id for r in tree.runs)]
    return found[0] if found else None


def why_not_remove(tree: Worktree) -> str | None:
    """Why the worktree must stay, or None.

    It stays for a run that has not ended, which would go on in it, for changes no commit holds, or for a
    lock."""
    going_on = [run for run in tree.runs if run["status"] not in TERMINAL]
    if going_on:
        run = going_on[-1]
        how = "resume it or cancel it" if run["status"] == RunStatus.PARKED else "wait until it has ended"
        return (f"{run['id']} is {run['status']}{': ' + run['reason'] if run['reason'] else ''} and works in it; "
                f"{how} first")
    if tree.changes:
        return (f"it holds {len(tree.changes)} change(s) no commit does ({tree.changes[0].strip()}); commit or "
                f"discard them (git -C {tree.path} status), or remove it yourself (git -C {tree.repo} worktree "
                f"remove --force {tree.path})")
    if tree.locked:
        return f"git has it locked; unlock it first (git -C {tree.repo} worktree unlock {tree.path})"
    return None


def remove(store: Store, tree: Worktree, who: str, at: float) -> Worktree:
    """Remove the worktree once its runs, read again, have all ended.

    The runs' states, and every run of their families (a fork made since the listing included), are read again
    inside the write that removes it, holding the writers' lock while git removes the folder, so no resume or fork
    of those runs commits in between. Ended means succeeded, failed or cancelled (a parked run resumes into it),
    and git refuses to remove a worktree that holds what no commit does. Its branch stays, so a merged branch can
    then be deleted with `git branch -d`; an event on each run says so and how. Returns the worktree as it was read
    last; raises ValueError with why it stays (why_not_remove) or why git refused."""
    with store.write() as conn:   # held while git removes it: no resume or fork of its runs commits meanwhile
        kin = {run_id for run in tree.runs for run_id in family(store, run["id"])}
        tree.runs = runs_shown(conn, sorted(kin))
        why = why_not_remove(tree)
        if why is not None:
            raise ValueError(why)
        try:
            git_tree.remove(Path(tree.repo), Path(tree.path))
        except git_tree.GitFailed as e:
            raise ValueError(str(e)) from None
        said = f"worktree {tree.path} removed by {who}; {branch_advice(tree)}"
        for run in tree.runs:
            add_event(conn, run["id"], at=at, kind=EventKind.WORKTREE, message=said, worker=who)
    return tree


def branch_advice(tree: Worktree) -> str:
    """What is left of a removed worktree, and how to delete it."""
    if tree.branch is None:
        return "it was on no branch"
    if tree.merged:
        return (f"its branch {tree.branch} stays in {tree.repo}, merged into {tree.onto}: delete it with git -C "
                f"{tree.repo} branch -d {tree.branch}")
    return (f"its branch {tree.branch} stays in {tree.repo}, not merged into {tree.onto or 'a branch'}: merge it, or "
            f"delete it with its commits (git -C {tree.repo} branch -D {tree.branch})")


def repositories(store: Store) -> list[str]:
    """The repositories the runs' worktrees name that are still there, whether or not git still lists the
    worktrees."""
    return sorted({place["repo"] for place, _ in _named(store).values() if os.path.isdir(place["repo"])})


def pulls(repos: list[str]) -> list[dict]:
    """The local git host's pull requests of each repository, each with its `repo`, oldest first.

    The host is agents/githost.py. ValueError for a folder that is not in a repository."""
    return [{"repo": repo, **pr} for repo in repos for pr in read_pulls(Path(repo))]
