"""What a person does to a harness run's workspace: start a repository's plan, progress log and rulebook
(`tui-agent harness init`), add a rule a real failure earned (`tui-agent harness rule`, or the TUI), and raise the
harness's own ceilings (`tui-agent harness limit`). The run's worktree is changed only by commits carrying the
run's trailer, so the run's checks of its branch still find only its own commits."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..errors import UserError
from . import harness_plan, worktree
from .files import NotRegular, read_regular, write_atomic

RULE_MARK = {"Tui-Agent-Rule": "added by a person"}


def init(folder: Path, commit: bool) -> tuple[list[str], list[str]]:
    """Write the starter files a repository lacks (PLAN.md, PROGRESS.md, RULES.md) at its top; with `commit`,
    commit them. Returns (the files written, the commands that commit them: none once committed)."""
    top = worktree.toplevel(folder) if folder.is_dir() else None
    if top is None:
        raise UserError(f"{folder} is not in a git repository; the harness works on one (git init it first)")
    starters = {"PLAN.md": harness_plan.starter_plan(top.name), "PROGRESS.md": harness_plan.STARTER_PROGRESS,
                "RULES.md": harness_plan.STARTER_RULES}
    missing = {name: text for name, text in starters.items() if not (top / name).exists()}
    if not missing:
        raise UserError(f"{top} has PLAN.md, PROGRESS.md and RULES.md already; nothing written")
    for name, text in missing.items():
        write_atomic(top, name, text.encode("utf-8"))
    names = list(missing)
    add = ["git", "-C", str(top), "add", "--", *names]
    message = ["git", "-C", str(top), "commit", "-m", "harness: plan, progress and rules", "--", *names]
    if commit:
        worktree.git(*add[3:], cwd=top)
        worktree.git(*worktree.identity(top), *message[3:], cwd=top)
        return names, []
    return names, [shlex.join(add), shlex.join(message)]


def add_rule(place: dict, run_id: str, rules: str, text: str) -> str:
    """One more line in the worktree's rulebook, committed as the run's own (with a mark that a person added it);
    returns the commit."""
    rule = " ".join(text.split())
    if not rule:
        raise UserError("give the rule as text, such as \"run the tests before you stop\"")
    tree = Path(place["worktree"])
    if not tree.is_dir():
        raise UserError(f"the run's worktree {tree} is gone; nothing changed")
    try:
        before = read_regular(tree, rules).decode("utf-8")
    except FileNotFoundError:
        before = ""
    except (NotRegular, UnicodeDecodeError) as e:
        raise UserError(f"{rules} in {tree} cannot be read as text ({e}); nothing changed") from None
    write_atomic(tree, rules, harness_plan.with_rule(before, rule).encode("utf-8"), make_folders=True)
    return worktree.commit(place, run_id, [rules], f"Rule: {rule}", RULE_MARK)
