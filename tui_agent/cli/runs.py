"""Commands on runs: agents, start, run, ls, spend, show, diff, replay, copy, export and import."""

from __future__ import annotations

import os
import sys
import time

import click

from .. import completion, filters, operate
from ..cli_types import TEXT, VERBATIM, Number, Whole
from ..errors import UserError
from ..format import age, claimable, count, held_by, spent, step_cell, tokens, usd
from ..models import Unresolved
from ..models.pricing import PRICES_DATE
from ..operate import start as start_run
from ..report import approvals_of, budget_stop, report_lists, retry_wait, run_view, runs_listing, step_ends, steps_of
from ..runtime import traces
from ..runtime.clock import iso, now, parse_instant
from ..runtime.control import RunControl
from ..runtime.here import HandedBack, work_here
from ..runtime.registry import modules_named
from ..runtime.tracebacks import innermost
from ..runtime.worker import DEFAULT_LEASE_S, Outcome
from ..safe_text import json_text
from ..spend import BY
from ..spend import report as spend_report
from ..states import (
    EXIT_ENVIRONMENT,
    EXIT_NOT_SUCCEEDED,
    EXIT_OK,
    EXIT_WAITING,
    TERMINAL,
    RunStatus,
    TurnEnd,
    exit_code,
    needs_person,
)
from ..store.runs import get_run, resolve_run, run_exists
from .group import OPENED, Session, cli
from .options import budget_option, input_option, json_option, key_option, model_option, parse_input
from .signals import interrupted_by_hang_ups
from .text import (
    ProgressLine,
    bounds_line,
    call_state,
    echo,
    json_out,
    json_streamed,
    print_table,
    retrying,
    section,
    step_line,
    unpriced_note,
    usage_cell,
)


@cli.command()
@click.pass_obj
def agents(session: Session) -> int:
    """List the agents this process can run."""
    for agent in session.registry:
        echo(f"{agent.name:<20} v{agent.version:<4} {agent.code_version}  {agent.description}")
    return EXIT_OK


def new_run_options(command):
    """The agent and the options that make a new run, as `start` and `run` both take them."""
    for option in (budget_option, model_option, key_option, input_option,
                   click.argument("agent", type=TEXT, shell_complete=completion.agents)):
        command = option(command)
    return command


@cli.command()
@new_run_options
@click.pass_obj
def start(session: Session, agent: str, *, input_text: str, key: str | None, model: str,
          budget_specs: tuple[str, ...]) -> int:
    """Queue a run for a worker; prints its id alone."""
    run_id, _, gone = _started(session, agent, input_text=input_text, key=key, model=model, budget_specs=budget_specs)
    if gone:
        echo(f"tui-agent: {_removed_by_prune(key, run_id)}", err=True)
    echo(run_id)
    return EXIT_OK


def _started(session: Session, agent: str, *, input_text: str, key: str | None, model: str,
             budget_specs: tuple[str, ...]) -> tuple[str, str, bool]:
    """Start the run for `start` and `run`, with the agent's defaults from the config file under the options. Returns
    its id, the model chosen, and whether its key names a run that prune removed (then nothing new was started)."""
    model, budget_specs = session.settings.agent_defaults(session.registry, agent, model, budget_specs)
    store = session.store
    run_id, created = start_run(store, session.registry, agent_name=agent, request=parse_input(input_text), key=key,
                                model=model, budget=operate.parse_budget(budget_specs, "--budget"))
    return run_id, model, not created and not run_exists(store, run_id)


def _removed_by_prune(key: str | None, run_id: str) -> str:
    return f"run key {key!r} names run {run_id}, which prune removed; nothing new was started (pass another key " \
        "for a new run)"


def report_outcome(outcome: Outcome) -> int:
    if outcome.kind == TurnEnd.REFUSED:
        echo(f"{outcome.run_id} was taken by another worker or a person; it {outcome.message}; "
             f"this worker wrote nothing more (see tui-agent show {outcome.run_id})")
        return EXIT_WAITING
    if outcome.kind == TurnEnd.DROPPED:
        echo(f"{outcome.run_id} {outcome.message}: {outcome.error}")
        return EXIT_ENVIRONMENT
    detail = outcome.error or (outcome.message if outcome.status in (RunStatus.WAITING, RunStatus.PARKED) else None)
    echo(f"{outcome.run_id} {outcome.status} ({outcome.reason})" + (f": {detail}" if detail else ""))
    if outcome.result is not None:
        echo(json_text(outcome.result))
    return exit_code(outcome.status)


@cli.command()
@new_run_options
@click.option("--lease", type=Number(min=0.1), default=DEFAULT_LEASE_S, show_default=True,
              help="Seconds this process holds the run before another worker may take it.")
@click.pass_obj
def run(session: Session, agent: str, *, input_text: str, key: str | None, model: str,
        budget_specs: tuple[str, ...], lease: float) -> int:
    """Start a run and work it here, showing each step; exit 0 succeeded, 1 ended otherwise, 3 waiting."""
    run_id, model, gone = _started(session, agent, input_text=input_text, key=key, model=model,
                                   budget_specs=budget_specs)
    if gone:
        raise UserError(_removed_by_prune(key, run_id))   # its result went with it: nothing to show or work
    store, registry = session.store, session.registry
    script = registry.get(agent).script
    spec = Unresolved(script).resolve() if model == "default" else model  # what this process will resolve it to
    if (spec or "").startswith("scripted") and script is not None:
        echo("model: offline scripted replies (no API key is used)", err=True)
    progress = ProgressLine()
    try:
        with interrupted_by_hang_ups():
            outcome = work_here(store, registry, run_id=run_id, durability=session.durability, lease_s=lease,
                                on_step=progress, on_given_up=lambda given: _leave_the_step(progress, given))
    except HandedBack:  # ctrl+c, SIGTERM or SIGHUP: the run was handed back now, not when the lease runs out
        progress.done()
        echo(f"{run_id} interrupted; it is queued again where it stopped (tui-agent worker --once goes on)")
        return EXIT_WAITING
    finally:
        progress.done()
    if outcome is None:
        row = get_run(store, run_id)
        echo(f"{run_id} is {row['status']}" + (f" ({row['reason']})" if row["reason"] else "") +
             ("" if row["status"] in TERMINAL else "; another worker has it"))
        return exit_code(row["status"])
    return report_outcome(outcome)


def _leave_the_step(progress: ProgressLine, control: RunControl) -> None:
    """End this process, leaving behind the thread of `run`'s run that is stuck in a call. The run was handed on while
    its thread was inside a call that does not return (its deadline passed, or a person took the run), and that thread
    cannot be stopped."""
    progress.done()
    status, reason = control.given_up_as or (None, None)
    goes_on = status in (RunStatus.WAITING, RunStatus.QUEUED) and not needs_person(status, reason)
    echo(f"{control.given_up}; this process leaves that call behind and exits"
         + (" (tui-agent worker --once goes on with the run)" if goes_on else ""))
    sys.stdout.flush()
    sys.stderr.flush()
    traces.close()   # os._exit runs no atexit hook: the spans held go out first
    os._exit(EXIT_WAITING if status is None else exit_code(status))


@cli.command("diff")
@click.argument("a_ref", metavar="A", type=TEXT, shell_complete=completion.runs)
@click.argument("b_ref", metavar="B", type=TEXT, shell_complete=completion.runs)
@click.option("--all", "every_entry", is_flag=True,
              help="Print every entry, a page at a time (default: a window around the first divergence).")
@json_option("One JSON object, its entries streamed")
@click.pass_obj
def diff_runs(session: Session, a_ref: str, b_ref: str, every_entry: bool, as_json: bool) -> int:
    """Compare two runs side by side, such as a fork with its parent or a rerun with the run before. It shows the
    totals, the first divergence, and per entry whether the name, result, cost and duration differ. Exit 0 when they are
    the same entry for entry (names and results), 1 when they differ, 2 on bad input."""
    from ..services.diff import first_divergence, json_lines, pair, text_lines

    store = session.existing_store
    runs = pair(store, a_ref, b_ref)
    found = first_divergence(store, runs)
    for line in (json_lines if as_json else text_lines)(store, runs, found, every_entry):
        echo(line)
    return EXIT_OK if found is None else EXIT_NOT_SUCCEEDED


@cli.command("copy")
@click.option("--from", "source_where", required=True, type=VERBATIM, metavar="FILE|URL",
              help="The database to copy (read only).")
@click.option("--to", "target_where", required=True, type=VERBATIM, metavar="FILE|URL",
              help="A new or empty database to copy into (made if missing).")
@click.pass_obj
def copy_command(session: Session, source_where: str, target_where: str) -> int:
    """Copy a whole database into a new one, SQLite file or PostgreSQL URL either way. It copies every run with its ids,
    journal, effects, approvals and events, and the artifacts its rows name (as files or rows, wherever the target keeps
    them)."""
    from ..store.copying import copy_database, open_source, target_for_copy

    shown = {"at": time.monotonic() + 1.0, "tty": sys.stderr.isatty(), "any": False}

    def progress(table: str, done: int, total: int) -> None:   # a long copy only: after a second, twice a second
        if time.monotonic() < shown["at"]:
            return
        shown["at"], shown["any"] = time.monotonic() + (0.5 if shown["tty"] else 5.0), True
        line = f"copying: {done:,} / {total:,} rows ({table})"
        sys.stderr.write(f"\r\x1b[2K{line}" if shown["tty"] else f"{line}\n")
        sys.stderr.flush()

    source = open_source(source_where, session.durability)
    OPENED.append(source)
    try:
        with target_for_copy(target_where, session.durability) as target:
            OPENED.append(target)
            started = time.monotonic()
            counts = copy_database(source, target, progress)
            if shown["any"] and shown["tty"]:
                sys.stderr.write("\r\x1b[2K")
            echo(f"copied {_counted(counts)} from {source.path} to {target.path} in "
                 f"{time.monotonic() - started:.1f} s")
    finally:
        source.close()
    return EXIT_OK


def _counted(counts: dict[str, int]) -> str:
    """What a copy, an export or an import wrote, such as `3 runs (40 journal entries, ...)`. The counts are
    copying.Tally.counts."""
    counts = dict(counts)
    runs, kept, missing = counts.pop("runs"), counts.pop("artifacts"), counts.pop("missing artifacts", 0)
    parts = [f"{n:,} {'journal entries' if t == 'journal' else t.replace('_', ' ')}" for t, n in counts.items()
             if n] + [f"{kept:,} artifacts"] + ([f"{missing:,} missing artifacts"] if missing else [])
    return f"{runs:,} run{'s' * (runs != 1)} ({', '.join(parts)})"


def _with_ancestry(carried) -> str:
    """`r-a and r-b (and r-c, which they were forked from)`: the runs an export or an import carried."""
    named = " and ".join(carried.named)
    if not carried.ancestry:
        return named
    return f"{named} (and {', '.join(carried.ancestry)}, which {'they were' if len(carried.named) > 1 else 'it was'}" \
           " forked from)"


@cli.command("export")
@click.argument("run_refs", metavar="RUN...", nargs=-1, required=True, type=TEXT, shell_complete=completion.runs)
@click.option("-o", "--output", required=True, metavar="FILE", type=click.Path(dir_okay=False),
              help="The SQLite file to write (a new one; --force replaces one that exists).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists, whole or not at all.")
@click.pass_obj
def export_command(session: Session, run_refs: tuple[str, ...], output: str, force: bool) -> int:
    """Write RUN and the runs it was forked from to FILE, a tui-agent SQLite database of those runs alone.

    The file holds their journal, effects, model calls, approvals, events and artifacts as rows: --db FILE opens
    it (show, diff, replay, fork), and tui-agent import FILE loads it into another database."""
    from ..store.exports import export_runs

    done = export_runs(session.existing_store, run_refs, output, force)
    echo(f"exported {_with_ancestry(done)} to {output}: {_counted(done.counts)}; read it with tui-agent --db "
         f"{output} show {done.named[0]}, or load it elsewhere with tui-agent import {output}")
    return EXIT_OK


@cli.command("import")
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--adopt", is_flag=True, help="Take the runs over (each ended or parked in FILE): they are this "
              "database's from now on, and their source must not resume them.")
@click.pass_obj
def import_command(session: Session, file: str, adopt: bool) -> int:
    """Load an export (tui-agent export RUN -o FILE) into this database, SQLite or PostgreSQL, run ids kept.

    Its runs are here to read, diff, replay and fork, never to resume, since their source may still run them
    (--adopt takes an ended or parked run over instead). A clash of run ids or ledger keys is refused and nothing
    is imported."""
    from ..store.exports import open_export

    source, meta = open_export(file, adopt)   # checked before this database is opened (or made)
    try:
        done = operate.import_export(session.store, source, meta, file, adopt)
    finally:
        source.close()
    echo(f"imported {_with_ancestry(done)} from {file} (exported from {done.source} at {iso(done.exported_at)}) into "
         f"{session.store.path}: {_counted(done.counts)}; " + (
             f"taken over: resume or fork {' and '.join(done.adopted)} here; {done.source} must not resume "
             f"{'them' if len(done.adopted) > 1 else 'it'} (both would do the pending effects)" if done.adopted else
             f"to read, diff, replay and fork here, never to resume ({done.source} may still run them); fork one "
             "to go on here"))
    return EXIT_OK


def _age(created: str | None) -> str:
    return age(max(0.0, now() - parse_instant(created)) if created else 0.0)


WHEN = "WHEN"   # an age back from now (30m, 2h, 3d, 2w) or an ISO date or instant (local unless zoned)


@cli.command("ls")
@click.option("--status", type=click.Choice([s.value for s in RunStatus]), multiple=True,
              help="Only runs with this status (repeatable: any of them).")
@click.option("--agent", "agent_name", type=TEXT, default=None, metavar="NAME", help="Only runs of this agent.",
              shell_complete=completion.agents)
@click.option("--since", type=TEXT, default=None, metavar=WHEN,
              help="Only runs created at or after WHEN: an age (30m, 2h, 3d, 2w) or an ISO date or instant "
                   "(2026-11-29, 2026-11-29T14:00; local time unless it names its zone).")
@click.option("--until", type=TEXT, default=None, metavar=WHEN, help="Only runs created before WHEN.")
@click.option("--text", type=TEXT, default=None, metavar="WORDS",
              help="Only runs whose id, agent, reason or request holds every one of these words (case aside).")
@click.option("--limit", type=Whole(min=1), default=None, metavar="N", help="The newest N at most.")
@json_option("A JSON array")
@click.pass_obj
def ls(session: Session, status: tuple[str, ...], *, agent_name: str | None, since: str | None, until: str | None,
       text: str | None, limit: int | None, as_json: bool) -> int:
    """List runs, newest first, with what each spent; the options select as the TUI filter's words do."""
    where = filters.options(status, agent_name, since, until, text)
    rows = runs_listing(session.existing_store, where, limit)
    if as_json:
        json_out(rows)
        return EXIT_OK
    if not rows:
        echo(f'no run matches "{where}"' if where else "no runs yet; try: tui-agent run hello")
        return EXIT_OK
    print_table((("ID", 11), ("AGENT", 18), ("STATUS", 24), ("STEP", -11), ("ATT", -3), ("COST", -8), ("TOKENS", -11),
                 ("WORKER", 8), ("AGE", 0)),
                [(r["id"], r["agent"], r["status"] + (f": {r['reason']}" if r["reason"] else ""),
                  step_cell(r["current_step"], r["total_steps"], r["tasks"]), r["attempt"],
                  spent(r["cost_usd"], r["unpriced_calls"], r["possibly_billed_usd"]), tokens(r), _holder(r),
                  _age(r["created_at"])) for r in rows])
    for r in rows:   # under the table: each run waiting to retry, its next try and how the last one failed
        if r["retry"]:
            echo(f"{r['id']} waits to retry: {retrying(r['retry'])}")
    return EXIT_OK


@cli.command()
@click.option("--since", type=TEXT, default=None, metavar=WHEN,
              help="Only the model calls sent at or after WHEN: an age (30m, 2h, 3d, 2w) or an ISO date or instant "
                   "(local time unless it names its zone). Default: every call.")
@click.option("--by", type=click.Choice(BY), default="day", show_default=True, help="A row per day, agent or model.")
@click.option("--utc", is_flag=True, help="Days in UTC (default: local time).")
@click.option("--reprice", is_flag=True,
              help=f"Price the stored usage by today's table ({PRICES_DATE}) instead of what each run was charged.")
@json_option("One JSON object: rows, total, daily")
@click.pass_obj
def spend(session: Session, since: str | None, *, by: str, utc: bool, reprice: bool, as_json: bool) -> int:
    """What the model calls cost, with their tokens, calls and runs: a row per day, agent or model. Each call
    counts what its run's budget counted (the price when it was answered); what calls in flight when their
    worker died may have been billed, and calls without a price, are shown apart, never as zero."""
    at = now()
    start = filters.instant(since, at, f"--since {since}") if since else None
    done = spend_report(session.existing_store, at, by=by, since=start, utc=utc, reprice=reprice)
    if as_json:
        json_out(done)
        return EXIT_OK
    days = "UTC days" if utc else "local days"
    prices = f"priced by today's table ({PRICES_DATE})" if reprice else "as charged"
    echo(f"spend by {by}{f' since {since}' if since else ''} ({days}; {prices})")
    if not done["rows"]:
        echo("no model calls" + (f" since {since}" if since else " yet"))
        return EXIT_OK
    rows = [*done["rows"], {by: "total", **done["total"]}]
    print_table(((by.upper(), max(10, *(len(r[by]) for r in rows))), ("COST", -8), ("POSSIBLY BILLED", -15),
                 ("CALLS", -6), ("RUNS", -5), ("INPUT", -8), ("CACHE READ", -10), ("CACHE WRITE", -11), ("OUTPUT", -8)),
                [(r[by], spent(r["cost_usd"], r["unpriced_calls"], 0), usd(r["possibly_billed_usd"] or None),
                  r["calls"], r["runs"], count(r["input_tokens"]), count(r["cache_read_tokens"]),
                  count(r["cache_write_tokens"]), count(r["output_tokens"])) for r in rows])
    return EXIT_OK


def _holder(run: dict) -> str:
    """The WORKER cell of `ls`: a worker whose process is gone says so, and when its run is claimable."""
    if run["holder_gone"]:
        return f"{run['worker']}, gone; {claimable(run['claimable_in_s'])}"
    return run["worker"] or "-"


SHOWN_ENDS = 20   # steps `show` prints at each end of a run; --steps all prints every one


@cli.command()
@click.argument("run_id", metavar="RUN", type=TEXT, shell_complete=completion.runs)
@click.option("--steps", type=click.Choice(["all"]), default=None,
              help=f"all: print every step (default: the first and last {SHOWN_ENDS}, and a count between).")
@json_option("One JSON object, streamed")
@click.pass_obj
def show(session: Session, run_id: str, steps: str | None, as_json: bool) -> int:
    """Show one run: its checkpoint, steps, journal, effects, events and budget."""
    all_steps = steps == "all"
    store = session.existing_store
    report = run_view(store, resolve_run(store, run_id))
    if as_json:
        json_streamed(report, report_lists(store, report["run"]))
        return EXIT_OK
    r, cp = report["run"], report["checkpoint"]
    echo(f"{r['id']} · {r['agent']} v{r['agent_version']} · {r['status']}"
         + (f": {r['reason']}" if r["reason"] else "") + f" · attempt {r['attempt']} · fence {r['fence']}")
    if r["holder_gone"]:
        echo(f"worker    {held_by(r['worker'], r['claimable_in_s'])}")
    echo(f"request   {json_text(r['request'])}")
    if r["parent_id"]:
        echo(f"forked    from {r['parent_id']} at position {r['fork_step']}")
    if found := report["imported"]:
        echo(f"imported  from {found['source']} (exported {found['exported_at']}): here to read, diff, replay and "
             "fork, never to resume")
    for question in approvals_of(store, r["id"]):
        answer = question["decision"] or "waiting for a person"
        echo(f"approval  {question['name']}: {question['question']} -> {answer}")
    echo(f"created   {r['created_at']}   finished {r['finished_at'] or '-'}")
    of_total = f"/{cp['total_steps']}" if cp.get("total_steps") else ""
    echo(f"step      {cp.get('current_step', 0)}{of_total} (generation {r['generation']})")
    if wait := retry_wait(r, cp.get("step_attempts")):
        echo(f"retry     {retrying(wait)}; tui-agent resume {r['id']} tries now")
    elif r["error"]:
        echo(f"error     {r['error']}")
    if r["traceback"]:
        echo(f"raised at {innermost(r['traceback'])}  (every frame: show --json)")
    if r["result"] is not None:
        echo(f"result    {json_text(r['result'])}")
    budget = report["budget"]
    echo("budget    " + "  ".join(usage_cell(name, d) for name, d in budget["dimensions"].items()
                                  if d["used"] or d["limit"]) + unpriced_note(budget))
    if bounds := bounds_line(budget):
        echo(f"bounds    {bounds}")
    from ..services.forecast import sentence as forecast_sentence

    if ahead := forecast_sentence(budget["forecast"]):
        echo(f"forecast  {ahead}")
    if stop := budget_stop(store, r["id"], raise_with="tui-agent resume {run} --budget {dimension}=VALUE"):
        echo(f"stopped   {stop}")
    first, total, last = step_ends(store, r, SHOWN_ENDS)
    if total:
        echo("\nsteps")
        for s in steps_of(store, r) if all_steps else first:
            echo(step_line(s))
        if not all_steps and total > len(first) + len(last):
            between = total - len(first) - len(last)
            echo(f"  … {between:,} more step{'s' * (between != 1)} (show {r['id']} --steps all prints every one)")
        for s in [] if all_steps else last:
            echo(step_line(s))
    lists = report_lists(store, r)
    section("model calls", lists["model_calls"], lambda c: f"  {c['position']:>4}  {c['name']:<20} #{c['call']}  "
             f"{c['provider']} {c['model']}  " + call_state(c))
    section("effects", lists["effects"], lambda e: f"  {e['position']:>4}  {e['name']:<20} {e['state']:<10} "
             f"attempts {e['attempts']}  key {e['key']}")
    echo("\nevents")
    section(None, lists["events"], lambda e: f"  {e['at']}  {e['message']}")
    return EXIT_OK


@cli.command()
@click.argument("run_ref", metavar="RUN", required=False, type=TEXT, shell_complete=completion.runs)
@click.option("--agent", "agent_name", default=None, type=TEXT, help="With --last: whose runs to replay.",
              shell_complete=completion.agents)
@click.option("--last", type=Whole(min=1), default=None, metavar="N",
              help="Replay the agent's N most recently finished runs (a check before releasing new code).")
@click.option("--agents", "more_modules", multiple=True, type=VERBATIM, metavar="MODULE|FILE.py",
              help="The agent code to replay with, as the global --agents.")
@click.option("--timeout", "timeout_s", type=Whole(1, 86_400), default=60, show_default=True, metavar="SECONDS",
              help="Stop the agent's code after this long (exit 1); with --last, all the runs' together.")
@click.option("--on-copy", is_flag=True, hidden=True)   # the child replay_copy starts: --db is the copy
@json_option("One JSON object (an array with --last)")
@click.pass_obj
def replay(session: Session, run_ref: str | None, *, agent_name: str | None, last: int | None,
           more_modules: tuple[str, ...], timeout_s: int, on_copy: bool, as_json: bool) -> int:
    """Run the agent's current code against RUN's journal: every step, model call, tool and effect is
    answered from the journal, none is executed. The code runs on a copy of the database (its --db,
    TUI_AGENT_DB and data folder name the copy's), in a process of its own stopped after --timeout. Exit 0
    when the code reproduces the run, 1 at the first divergence (a renamed call, another model request,
    other step inputs, another result, a write of its own to the database) or when it ran out of time, 2 on
    bad input."""
    from ..services.replay import replay_last, replay_run
    from ..services.replay_copy import replay_on_copy

    by_agent = agent_name is not None and last is not None
    if (run_ref is None) != by_agent or (not by_agent and (agent_name or last)):
        raise UserError("give a RUN, or --agent NAME --last N")
    session.agent_modules += modules_named(more_modules)
    store = session.existing_store
    if not on_copy:
        chosen = [run_ref] if run_ref else ["--agent", agent_name, "--last", str(last)]
        return replay_on_copy(store, session.agent_modules, [*chosen, *(["--json"] if as_json else [])],
                              timeout_s, run_ref or f"{agent_name}'s last {last} runs")
    if run_ref:
        done = [replay_run(store.path, session.registry, run_ref, on_copy=True)]
    else:
        assert agent_name is not None and last is not None   # without a RUN, both: checked above
        done = replay_last(store.path, session.registry, agent_name, last, on_copy=True)
    if as_json:
        json_out([r.to_json() for r in done] if run_ref is None else done[0].to_json())
    else:
        if not done:
            echo(f"{agent_name} has no finished runs to replay")
        for r in done:
            if r.divergence is None:   # reproduced
                echo(f"{r.run_id} {r.agent}: reproduced ({r.answered} of {r.entries} entries; {r.note})")
                continue
            echo(f"{r.run_id} {r.agent}: DIVERGED at #{r.divergence.position} ({r.divergence.kind}): "
                 f"{r.divergence.message}")
            for line in r.divergence.diff:
                echo(f"    {line}")
    return EXIT_OK if all(r.reproduced for r in done) else EXIT_NOT_SUCCEEDED
