"""The harness agent's commands (agents/harness.py): harness init, rule and limit."""

from __future__ import annotations

from pathlib import Path

import click

from .. import completion, operate
from ..cli_types import TEXT, Whole
from ..errors import UserError
from ..states import EXIT_OK
from .group import Session, cli
from .text import echo


@cli.group("harness")
def harness_group() -> None:
    """The harness agent's own commands: start a repository's plan, add a rule, raise a ceiling."""


@harness_group.command("init")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--commit", is_flag=True, help="Commit the files written (otherwise it prints the git commands).")
def harness_init(folder: Path, commit: bool) -> int:
    """Write a starter PLAN.md, PROGRESS.md and RULES.md into the repository FOLDER is in, those it lacks. Nothing is
    committed unless --commit, and the run starts from the committed plan."""
    from ..agents.harness_person import init

    written, commands = init(folder.resolve(), commit)
    echo(f"wrote {', '.join(written)}" + (" and committed them" if commit else "; commit them before a run:"))
    for command in commands:
        echo(f"  {command}")
    return EXIT_OK


@harness_group.command("rule")
@click.argument("run_ref", metavar="RUN", type=TEXT, shell_complete=completion.runs)
@click.argument("text", type=TEXT)
@click.pass_obj
def harness_rule(session: Session, run_ref: str, text: str) -> int:
    """Add TEXT as a rule to a harness run's RULES.md (committed in its worktree), then resume the run if it waits
    for you (a plateau, a blocked task, a park)."""
    echo(operate.harness_rule(session.existing_store, run_ref, text))
    return EXIT_OK


@harness_group.command("limit")
@click.argument("run_ref", metavar="RUN", type=TEXT, shell_complete=completion.runs)
@click.option("--max-iterations", type=Whole(min=1), default=None, help="The most iterations the run may start.")
@click.option("--max-files-changed", type=Whole(min=1), default=None,
              help="The most files its branch may change (PLAN.md, PROGRESS.md and RULES.md not counted).")
@click.pass_obj
def harness_limit(session: Session, run_ref: str, max_iterations: int | None, max_files_changed: int | None) -> int:
    """Raise a harness run's own ceilings, then resume it if it waits for you. It waits when parked limit:iterations or
    limit:files_changed."""
    limits = {k: v for k, v in (("max_iterations", max_iterations), ("max_files_changed", max_files_changed))
              if v is not None}
    if not limits:
        raise UserError("give --max-iterations N, --max-files-changed N, or both")
    echo(operate.harness_limit(session.existing_store, run_ref, limits))
    return EXIT_OK
