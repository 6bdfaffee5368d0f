"""A person's decisions on runs: reconcile, approve, park, cancel, resume (one RUN or --where) and fork."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import completion, filters, operate
from ..cli_types import TEXT, VERBATIM, Whole
from ..errors import UserError
from ..runtime.clock import now
from ..states import EXIT_NOT_SUCCEEDED, EXIT_OK
from ..store import Store
from ..store.runs import each_run, get_run, resolve_run
from ..strict_json import RESULT_EXAMPLE, parse_json
from .group import Session, cli
from .options import asked_first, budget_option, note_option, read_text
from .text import echo


def many_options(command):
    """`--where FILTER`, `--dry-run` and `--yes`: an action on every run the filter words select."""
    for option in reversed((
            click.option("--where", default=None, type=TEXT, metavar="FILTER",
                         help="Instead of RUN: every run these filter words select, as the TUI's filter takes them "
                              "(\"status:queued agent:hello since:3d\"), each decided in its own transaction."),
            click.option("--dry-run", is_flag=True, help="With --where: say which runs it would act on, and why not "
                                                         "on the others; change nothing."),
            click.option("--yes", is_flag=True, help="With --where: act without asking first (for scripts)."))):
        command = option(command)
    return command


def _target(run_ref: str | None, where: str | None, dry_run: bool, yes: bool) -> tuple[str, bool]:
    """What the command acts on: the FILTER and True for the runs --where selects, or RUN and False; a usage error
    when it is unclear."""
    context = click.get_current_context()
    if where is None:
        if run_ref is None:
            raise click.UsageError("name a RUN, or choose runs with --where FILTER", context)
        if dry_run or yes:
            raise click.UsageError("--dry-run and --yes go with --where FILTER", context)
        return run_ref, False
    if run_ref is not None:
        raise click.UsageError("give a RUN or --where FILTER, not both", context)
    return where, True


def _bulk(session: Session, action: str, *, where: str, dry_run: bool, yes: bool, note: str | None) -> int:
    """Do `action` on every run `where` selects, after the question unless `yes`, and return the exit code. It is 0 when
    it acted on every one, 1 when some were refused, each named on a line of its own under the summary."""
    try:
        chosen = filters.parse(where)
    except filters.FilterError as e:
        raise UserError(f"--where {where!r}: {e}") from None
    store = session.existing_store
    run_ids = [run["id"] for run in each_run(store, chosen, now())]
    if not run_ids:
        echo(f"no run matches {str(chosen)!r}; nothing to do")
        return EXIT_OK
    preview = operate.bulk_preview(store, run_ids, (action,))[action]
    would = f"{action} {len(preview.done)} of the {len(run_ids)} run{'s' * (len(run_ids) != 1)} matching " \
            f"{str(chosen)!r}"
    if dry_run:
        echo(f"would {would}" + (":" if preview.done else ""))
        for run_id in preview.done:
            echo(f"  {run_id}")
        if preview.refused:
            echo(f"{len(preview.refused)} would be refused:")
            for line in preview.refused:
                echo(f"  {line}")
        return EXIT_OK
    refused = f" ({len(preview.refused)} would be refused)" if preview.refused else ""
    if not yes and not asked_first(f"{would}{refused}?", f"--where selects {len(run_ids)} runs; pass --yes to "
                                    f"{action} them without a question, or --dry-run to see which"):
        return EXIT_OK
    decided = operate.bulk(store, action, run_ids, note)
    echo(decided.summary())
    for line in decided.refused:
        echo(f"  {line}")
    return EXIT_NOT_SUCCEEDED if decided.refused else EXIT_OK


@cli.command()
@click.argument("run_ref", metavar="RUN", type=TEXT, required=False, shell_complete=completion.runs)
@click.argument("effect_ref", metavar="EFFECT", type=TEXT, required=False)
@click.option("--happened", "decisions", flag_value="happened", multiple=True, help="It happened: record it as done.")
@click.option("--not-done", "decisions", flag_value="not-done", multiple=True,
              help="It did not happen: do it again, same key.")
@click.option("--ask", "decisions", flag_value="ask", multiple=True,
              help="Have the next worker look the key up at the service.")
@click.option("--abandon", "decisions", flag_value="abandon", multiple=True, help="Give up: cancel the run.")
@click.option("--result", "result_text", default=None, type=VERBATIM, metavar="JSON",
              help="With --happened: what it returned, e.g. '{\"message_id\": \"<...>\"}'.")
@note_option
@many_options
@click.pass_obj
def reconcile(session: Session, run_ref: str | None, *, effect_ref: str | None, decisions: tuple[str, ...],
              result_text: str | None, note: str | None, where: str | None, dry_run: bool, yes: bool) -> int:
    """Decide what happened to an effect whose outcome is unknown (EFFECT: its name, or its position). With
    --where FILTER instead of RUN EFFECT, --ask for each selected run's last effect in doubt."""
    decision = _one_decision(decisions)
    if result_text is not None and decision != "happened":
        raise UserError("--result goes with --happened only")
    ref, many = _target(run_ref, where, dry_run, yes)
    if many:
        if decision != "ask" or effect_ref is not None:
            raise click.UsageError("--where goes with --ask alone: whether an effect happened is decided one run "
                                   "at a time (tui-agent reconcile RUN EFFECT --happened | --not-done | --abandon)",
                                   click.get_current_context())
        return _bulk(session, "reconcile-ask", where=ref, dry_run=dry_run, yes=yes, note=note)
    if effect_ref is None:
        raise click.UsageError("name the EFFECT after the RUN (its name, or its position)", click.get_current_context())
    store = session.existing_store
    if decision == "happened":
        result = None if result_text is None else parse_json(result_text, "--result", example=RESULT_EXAMPLE)
        run_id = operate.reconcile_happened(store, ref, effect_ref=effect_ref, result=result, note=note)
        echo(f"{run_id}: {effect_ref} recorded as done; the run is queued again")
    elif decision == "not-done":
        run_id = operate.reconcile_not_done(store, ref, effect_ref=effect_ref, note=note,
                                            warn=lambda m: echo(f"tui-agent: warning: {m}", err=True))
        echo(f"{run_id}: {effect_ref} recorded as not done; the next worker does it again with the same key")
    elif decision == "ask":
        run_id = operate.reconcile_ask(store, ref, effect_ref, note)
        echo(f"{run_id}: the next worker will ask the service about {effect_ref}")
    else:
        run_id = operate.abandon(store, ref, effect_ref, note)
        echo(f"{run_id}: cancelled")
    return EXIT_OK


def _one_decision(given: tuple[str, ...]) -> str:
    """The one decision given, refused when there is none or more than one. The flags share one destination, so without
    this check the last one given would silently win (and --happened --not-done would send the email again)."""
    chosen = list(dict.fromkeys(given))
    if not chosen:
        raise UserError("say what happened: --happened, --not-done, --ask or --abandon")
    if len(chosen) > 1:
        raise click.UsageError(f"give one decision, not {' and '.join('--' + d for d in chosen)}",
                               click.get_current_context())
    return chosen[0]


def run_decision(action: Callable[..., str], *options: Callable[[Any], Any]) -> Callable[[Callable[..., str]], Any]:
    """A decision on one RUN or, with `many_options`, on every run --where selects, with --note and `options`.

    The decorated function decides one run: it takes the store, the run, the note and the options' values, and
    returns the line to print. On --where, `action(**the options' values)` names what `_bulk` does to each run."""
    def wrap(decide: Callable[..., str]) -> Any:
        @functools.wraps(decide)
        def command(session: Session, run_ref: str | None, *, note: str | None, where: str | None, dry_run: bool,
                    yes: bool, **given: Any) -> int:
            ref, many = _target(run_ref, where, dry_run, yes)
            if many:
                return _bulk(session, action(**given), where=ref, dry_run=dry_run, yes=yes, note=note)
            echo(decide(session.existing_store, ref, note, **given))
            return EXIT_OK
        decorated: Any = command
        for decorator in (click.pass_obj, many_options, note_option, *reversed(options),
                          click.argument("run_ref", metavar="RUN", type=TEXT, required=False,
                                         shell_complete=completion.runs)):
            decorated = decorator(decorated)
        return decorated
    return wrap


@cli.command()
@run_decision(lambda deny: "deny" if deny else "approve",
              click.option("--deny", is_flag=True, help="Deny instead of approve."))
def approve(store: Store, run_ref: str, note: str | None, deny: bool) -> str:
    """Answer the approval a run waits for; the run goes on with the answer."""
    return f"{operate.approve(store, run_ref, deny, note)}: {operate.answered(deny)}"


@cli.command()
@run_decision(lambda: "park")
def park(store: Store, run_ref: str, note: str | None) -> str:
    """Stop a run so a person can look at it; resume continues it."""
    return f"{operate.park(store, run_ref, note)}: parked"


@cli.command()
@run_decision(lambda: "cancel")
def cancel(store: Store, run_ref: str, note: str | None) -> str:
    """End a run for good."""
    return f"{operate.cancel_run(store, run_ref, note)}: cancelled"


@cli.command()
@click.argument("run_ref", metavar="RUN", type=TEXT, required=False, shell_complete=completion.runs)
@click.option("--restart", is_flag=True, help="Start from zero in a new journal generation (the old stays readable).")
@budget_option
@many_options
@click.pass_obj
def resume(session: Session, run_ref: str | None, *, restart: bool, budget_specs: tuple[str, ...],
           where: str | None, dry_run: bool, yes: bool) -> int:
    """Queue a parked run (or one stopped by its budget or a plateau) again where it stopped; a run waiting to
    retry tries again now."""
    ref, many = _target(run_ref, where, dry_run, yes)
    if many:
        if restart or budget_specs:
            raise click.UsageError("--where resumes runs where they stopped; --restart and --budget take one RUN",
                                   click.get_current_context())
        return _bulk(session, "resume", where=ref, dry_run=dry_run, yes=yes, note=None)
    limits = operate.parse_budget(budget_specs, "--budget")
    store = session.existing_store
    before = get_run(store, resolve_run(store, ref))
    run_id = operate.resume(store, ref, restart, limits)
    echo(f"{run_id}: {operate.resumed(before, restart)}; a worker will pick it up")
    return EXIT_OK


@cli.command()
@click.argument("run_ref", metavar="RUN", type=TEXT, shell_complete=completion.runs)
@click.option("--from-step", "from_step", type=Whole(min=0), default=None, metavar="N",
              help="Keep positions before N; run N and everything after anew.")
@click.option("--edit", "edit_at", type=Whole(min=0), default=None, metavar="N",
              help="Keep positions before N, put an edited copy of entry N's result (a step or model reply) in "
                   "its place, and run everything after it anew. Opens $VISUAL or $EDITOR (else vi) on it as JSON.")
@click.option("--result", "result_text", default=None, type=VERBATIM, metavar="JSON|@FILE",
              help="With --edit: the new result itself, as JSON or @path to a file holding it (no editor).")
@click.pass_obj
def fork(session: Session, run_ref: str, from_step: int | None, edit_at: int | None, result_text: str | None) -> int:
    """Make a new run from RUN's journal up to position N; prints the new id. With --edit N, entry N's
    result is edited first: what would the agent have done had the model answered this?"""
    if (from_step is None) == (edit_at is None):
        raise UserError("give --from-step N (run N anew) or --edit N (edit entry N's result), not both or neither")
    if result_text is not None and edit_at is None:
        raise UserError("--result goes with --edit N")
    store = session.existing_store
    if from_step is not None:
        echo(operate.fork(store, run_ref, from_step))
        return EXIT_OK
    assert edit_at is not None   # exactly one of --from-step and --edit, checked above
    from ..services import editing

    entry = operate.recorded_entry(store, run_ref, edit_at)
    if result_text is None:
        text = editing.edit_text(editing.as_text(entry["result"]), editing.file_name(entry))
        source = "the edited result"
    elif result_text.startswith("@"):
        source = f"--result {result_text}"
        text = read_text(Path(result_text[1:]), source)
    else:
        text, source = result_text, "--result"
    value = editing.parse_edited(text, source)
    echo(operate.fork_edited(store, entry["run_id"], position=edit_at, result=value, name=entry["name"],
                             generation=entry["generation"]))
    return EXIT_OK
