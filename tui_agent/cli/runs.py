"""The command line. Actions go through operate.py and the runtime; output shapes through report.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from .. import config, filters, notify, operate, output_file
from ..cli_types import TEXT, VERBATIM, Number, Whole
from .. import completion
from ..errors import TuiAgentError, UserError
from ..format import (
    COST_UNKNOWN,
    age,
    ago,
    bar,
    claimable,
    count,
    file_size,
    held_by,
    in_zone,
    pace,
    skew,
    spent,
    step_cell,
    tokens,
    usd,
    usd_exact,
)
from ..models import Unresolved
from ..models.pricing import PRICES_DATE
from ..operate import start as start_run
from ..report import (
    REPORT_KEYS,
    approvals_of,
    budget_stop,
    held_by_gone,
    iso_times,
    live_line,
    report_lists,
    retry_said,
    retry_wait,
    run_view,
    runs_listing,
    saved_filters_report,
    schedules_report,
    step_ends,
    steps_of,
    workers_report,
)
from ..runtime import traces
from ..runtime.clock import clock_time, iso, now, parse_instant
from ..runtime.control import RunControl
from ..runtime.heartbeat import Heartbeat
from ..runtime.liveness import label, on_this_host
from ..runtime.registry import Registry, load_registry, modules_named
from ..runtime.schedule import GRACE_S as SCHEDULE_GRACE_S
from ..runtime.schedule import MISSED, OVERLAP
from ..runtime.schedule import tick as schedule_tick
from ..runtime.serve import GRACE_S, serve
from ..runtime.tracebacks import innermost
from ..runtime.worker import (
    DEFAULT_LEASE_S,
    DROPPED,
    REFUSED,
    Outcome,
    execute,
    worker_name,
)
from ..safe_text import json_text, one_line, visible
from ..spend import BY
from ..spend import report as spend_report
from ..states import (
    EXIT_ENVIRONMENT,
    EXIT_NOT_SUCCEEDED,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WAITING,
    TERMINAL,
    RunStatus,
    WorkerState,
    exit_code,
    needs_person,
)
from ..store import DatabaseError, Store, artifacts, default_path, notices, open_store
from ..store.base import on_server
from ..store import prune as prune_runs
from ..store.doctor import Diagnosis, diagnose
from ..store.effects import requeue_released
from ..store.environment import stop_for
from ..store.host import process_alive
from ..store.runs import claim_run, each_run, get_run, resolve_run, run_exists
from ..store.schema import SCHEMA_VERSION
from ..store.workers import find_worker, release
from ..strict_json import RESULT_EXAMPLE, finite, parse_json

_OPENED: list[Store] = []  # the database this process opened, for naming it in a one-line error


class OneLineErrors(click.Group):
    """Every mistake is one line on stderr and exit 2: click's usage block and tracebacks never show. The config
    file is read first, as the defaults under the flags and environment variables (config.py)."""

    def main(self, args=None, prog_name=None, **extra):  # noqa: D102
        self.settings = config.read(self)
        try:
            code = super().main(args=args, prog_name=prog_name or "tui-agent", standalone_mode=False,
                                default_map=self.settings.default_map, **extra)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx else "tui-agent"
            _fail(f"{e.format_message()} (see '{where} --help')", EXIT_USAGE)
        except click.ClickException as e:
            _fail(e.format_message(), e.exit_code)
        except click.Abort:
            _fail("aborted", 130)
        except TuiAgentError as e:
            _fail(str(e), e.exit_code)
        except DatabaseError as e:  # a read outside a write transaction: classified the same way
            stop = _OPENED[-1].stopped(e) if _OPENED else stop_for(e, Path("the database"))
            if stop is None:
                raise
            _fail(str(stop), stop.exit_code)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def _fail(message: str, code: int) -> None:
    echo(f"tui-agent: {message}", err=True)
    sys.exit(code)


def echo(text: str = "", err: bool = False, nl: bool = True) -> None:
    """Everything a command prints, on a terminal and into a pipe alike (whose reader may print it to one): the
    runs' rows, messages and results hold text that agents, models and services wrote, so what a terminal would
    act on is made visible (safe_text.visible). Only `artifact` writes bytes as stored, into a pipe or a file."""
    click.echo(visible(text), err=err, nl=nl)


class Session:
    """What the global options chose; the store and registry open on first use."""

    def __init__(self, db: str | None, durability: str, agent_modules: tuple[str, ...],
                 settings: config.Settings) -> None:
        self.db, self.durability, self.settings = db, durability, settings
        self.agent_modules = modules_named(agent_modules)
        self._store: Store | None = None
        self._registry: Registry | None = None

    @property
    def store(self) -> Store:
        """For commands that write (start, run, worker, ...): a database that does not exist yet is created."""
        return self._open(create=True)

    @property
    def existing_store(self) -> Store:
        """For commands that read, or act on a run or schedule that must exist: a missing database is
        reported, never created."""
        return self._open(create=False)

    def _open(self, create: bool) -> Store:
        if self._store is None:
            self._store = open_store(self.db, self.durability, create)
            _OPENED.append(self._store)
        return self._store

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = load_registry(self.agent_modules)
            self.settings.check_agents(self._registry.names())
        return self._registry


def _parse_input(text: str) -> Any:
    source = "--input"
    if text.startswith("@"):
        path = Path(text[1:])
        source = f"--input {text}"
        text = _read_text(path, source)
    return parse_json(text, source, " or @file.json")


def _read_text(path: Path, source: str) -> str:
    """A file named on the command line (any name the file system allows), as UTF-8 text."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{source}: cannot read {path} ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{source}: {path} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") \
            from None


def _table(columns: tuple[tuple[str, int], ...], rows: list[tuple]) -> None:
    """Every text listing the same way: a header, then one line per row; a negative width aligns right."""
    def line(cells) -> str:
        return "  ".join(f"{str(cell):>{-width}}" if width < 0 else f"{str(cell):<{width}}"
                         for cell, (_, width) in zip(cells, columns)).rstrip()

    echo(line([name for name, _ in columns]))
    for row in rows:
        echo(line(row))


def json_option(shape: str):
    """`--json` on every command that prints rows: the shape (report.py's) is a stable contract."""
    return click.option("--json", "as_json", is_flag=True, help=f"{shape} (a stable contract).")


def _json_out(value: Any) -> None:
    """Strict JSON for scripts: rows stored before input was read strictly may hold NaN or an infinity,
    which JSON cannot write; those come out as null rather than as bare NaN that breaks every reader."""
    echo(json_text(finite(value), indent=2, allow_nan=False))


def _given_db(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An empty --db or TUI_AGENT_DB (a script's unset variable, say) is a mistake, not a wish for the
    default database; click reads an empty variable as unset, so it is looked at here."""
    given = value if value is not None else os.environ.get("TUI_AGENT_DB")
    if given is not None and not given.strip():
        raise click.BadParameter("it is empty (or TUI_AGENT_DB is set to ''); name a database file, or leave both "
                                 "unset for the per-user default", ctx, param)
    return value


@click.group(cls=OneLineErrors, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", envvar="TUI_AGENT_DB", type=click.Path(dir_okay=False), callback=_given_db,
              help="Database file, or a postgresql:// URL (default: a per-user file).")
@click.option("--data", envvar=artifacts.ENV, metavar="DIR", type=click.Path(file_okay=False),
              help="For a postgresql:// database: a folder every machine shares, to keep run artifacts (large results, "
                   "reports) in as files; without it they go into the database. A SQLite file keeps its artifacts "
                   "beside it. The agents' own data (sample sources, fetch log, outbox) stays in each machine's data "
                   "folder either way.")
@click.option("--durability", envvar="TUI_AGENT_DURABILITY", type=click.Choice(["full", "normal"]), default="full",
              show_default=True, help="full: a committed step survives power loss; normal: faster, survives crashes.")
@click.option("--agents", "agent_modules", envvar="TUI_AGENT_AGENTS", multiple=True, type=VERBATIM,
              metavar="MODULE|FILE.py",
              help="Register every Agent at the top level of a module (found here too) or a .py file "
                   "(comma-separated, repeatable).")
@click.version_option(None, "--version", package_name="tui-agent", prog_name="tui-agent")   # read when asked
@click.pass_context
def cli(ctx: click.Context, db: str | None, data: str | None, durability: str, agent_modules: tuple[str, ...]) -> int:
    """With no command, tui-agent opens the terminal UI on your database (the demo command: on a demo
    database that it builds).

    A terminal UI and local runner for long-running AI agents; the commands below act on the same runs
    from a shell."""
    settings = ctx.command.settings
    if settings.problem and ctx.invoked_subcommand not in ("config", "doctor"):
        raise settings.problem
    if data:   # in the environment, so the TUI's connections and the workers it starts keep artifacts there too
        os.environ[artifacts.ENV] = str(Path(data).expanduser().resolve())
    ctx.obj = Session(db, durability, agent_modules, settings)
    ctx.call_on_close(lambda: ctx.obj._store and ctx.obj._store.close())
    if ctx.invoked_subcommand is None:
        _open_tui(ctx.obj, ctx.obj.store.path)
    return EXIT_OK


def _open_tui(session: Session, db_path: Path, worker: bool = False) -> None:
    from ..app import TuiAgentApp

    sources = session.registry.sources  # the workers it starts find the same modules from any folder
    theme = session.settings.get("theme")
    app = TuiAgentApp(db_path, session.durability, session.registry, sources, theme=theme and theme.value)
    if worker:
        app.spawned.append(operate.start_worker(app.store, session.durability, sources, "w-demo"))
    app.run()


@cli.command()
@click.pass_obj
def demo(session: Session) -> int:
    """Rebuild demo.db beside your database by executing real runs, then open the TUI on it."""
    from ..demo import build, demo_path

    path = demo_path(Path(session.db) if session.db else default_path())
    echo(f"building {path} by running nightly-report seven times (crashes included)...", err=True)
    roles = build(path, session.registry, lambda message: echo(f"  {message}", err=True))
    echo(f"  {len(roles)} runs; starting a worker and the terminal UI", err=True)
    _open_tui(session, path, worker=True)
    return EXIT_OK


@cli.command()
@click.pass_obj
def agents(session: Session) -> int:
    """List the agents this process can run."""
    for agent in session.registry:
        echo(f"{agent.name:<20} v{agent.version:<4} {agent.code_version}  {agent.description}")
    return EXIT_OK


input_option = click.option("--input", "input_text", default="{}", type=VERBATIM, metavar="JSON|@FILE",
                            help="The request: a JSON object, or @path to a file holding one.")
key_option = click.option("--key", default=None, type=TEXT,
                          help="A run key: starting twice with one key gives one run.")
budget_option = click.option("--budget", "budget_specs", multiple=True, type=TEXT, metavar="NAME=VALUE",
                             help="A ceiling for this run, e.g. cost_usd=0.50 or steps=100 (repeatable); "
                                  "unbounded opts out of the default ceilings (10000 steps, 24h running, "
                                  "$5 priced cost, 2M input tokens).")
note_option = click.option("--note", default=None, type=TEXT, help="Why (kept in the run's events).")
model_option = click.option("--model", default="default", show_default=True, type=TEXT, metavar="SPEC",
                            help="The model provider: default (anthropic when the worker has ANTHROPIC_API_KEY, "
                                 "else the agent's built-in script), scripted (offline, built-in script), "
                                 "scripted:FILE, anthropic (Claude; needs ANTHROPIC_API_KEY) or anthropic:MODEL_ID.")


@cli.command()
@click.argument("agent", type=TEXT, shell_complete=completion.agents)
@input_option
@key_option
@model_option
@budget_option
@click.pass_obj
def start(session: Session, agent: str, input_text: str, key: str | None, model: str,
          budget_specs: tuple[str, ...]) -> int:
    """Queue a run for a worker; prints its id alone."""
    model, budget_specs = session.settings.agent_defaults(session.registry, agent, model, budget_specs)
    store = session.store
    run_id, created = start_run(store, session.registry, agent, _parse_input(input_text), key, model,
                                operate.parse_budget(budget_specs, "--budget"))
    if not created and not run_exists(store, run_id):
        echo(f"tui-agent: {_removed_by_prune(key, run_id)}", err=True)
    echo(run_id)
    return EXIT_OK


def _removed_by_prune(key: str | None, run_id: str) -> str:
    return f"run key {key!r} names run {run_id}, which prune removed; nothing new was started (pass another key for a " \
        "new run)"


PROGRESS_CHARS = 200   # of the progress line, which a long step name must not wrap (\r rewrites one line only)


class ProgressLine:
    """`step i/n name` rewritten in place on a terminal, with a bar, the steps a second and the time left
    once the run has said its length (`ctx.plan`), and a streaming model call's tokens and seconds
    (`summarize · Claude · 312 tokens · 4.1 s`) at most ten times a second; silent when stderr is not one."""

    def __init__(self) -> None:
        self.shown = sys.stderr.isatty()
        self._live_at = 0.0
        self._started: tuple[int, float] | None = None   # the first step this process ran: (position, time)

    def __call__(self, ctx, position: int, name: str, replayed: bool) -> None:
        self._write(self.line(ctx.total_steps, position, name, replayed, time.monotonic()))

    def line(self, total: int | None, position: int, name: str, replayed: bool, at: float) -> str:
        if not total:
            return f"step {position + 1} {name}" + (" (recorded)" if replayed else "")
        if not replayed and self._started is None:
            self._started = (position, at)
        done = position + 1
        rate = pace(done - self._started[0] - 1, total - self._started[0] - 1, at - self._started[1]) \
            if self._started and not replayed else ""
        return " ".join(part for part in (bar(done, total), f"{done}/{total}", name,
                                          "(recorded)" if replayed else "", f"· {rate}" if rate else "") if part)

    def live(self, ctx, name: str, provider: str, tokens: int, elapsed_s: float) -> None:
        if elapsed_s - self._live_at >= 0.1 or elapsed_s < self._live_at:
            self._live_at = elapsed_s
            total = f"/{ctx.total_steps}" if ctx.total_steps else ""
            self._write(f"step {ctx.position}{total} {live_line(name, provider, tokens, elapsed_s)}")

    def _write(self, line: str) -> None:
        if self.shown:   # a step's name is the agent's: one visible line, after this line's own control codes
            sys.stderr.write(f"\r\x1b[2K  {one_line(line, PROGRESS_CHARS)}")
            sys.stderr.flush()

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


def _report_outcome(outcome: Outcome) -> int:
    if outcome.status == REFUSED:
        echo(f"{outcome.run_id} was taken by another worker or a person; it {outcome.message}; "
             f"this worker wrote nothing more (see tui-agent show {outcome.run_id})")
        return EXIT_WAITING
    if outcome.status == DROPPED:
        echo(f"{outcome.run_id} {outcome.message}: {outcome.error}")
        return EXIT_ENVIRONMENT
    detail = outcome.error or (outcome.message if outcome.status in (RunStatus.WAITING, RunStatus.PARKED) else None)
    echo(f"{outcome.run_id} {outcome.status} ({outcome.reason})" + (f": {detail}" if detail else ""))
    if outcome.result is not None:
        echo(json_text(outcome.result))
    return exit_code(outcome.status)


@cli.command()
@click.argument("agent", type=TEXT, shell_complete=completion.agents)
@input_option
@key_option
@model_option
@budget_option
@click.option("--lease", type=Number(min=0.1), default=DEFAULT_LEASE_S, show_default=True,
              help="Seconds this process holds the run before another worker may take it.")
@click.pass_obj
def run(session: Session, agent: str, input_text: str, key: str | None, model: str, budget_specs: tuple[str, ...],
        lease: float) -> int:
    """Start a run and work it here, showing each step; exit 0 succeeded, 1 ended otherwise, 3 waiting."""
    model, budget_specs = session.settings.agent_defaults(session.registry, agent, model, budget_specs)
    store, registry = session.store, session.registry
    run_id, created = start_run(store, registry, agent, _parse_input(input_text), key, model,
                                operate.parse_budget(budget_specs, "--budget"))
    if not created and not run_exists(store, run_id):
        raise UserError(_removed_by_prune(key, run_id))   # its result went with it: nothing to show or work
    script = registry.get(agent).script
    spec = Unresolved(script).resolve() if model == "default" else model  # what this process will resolve it to
    if (spec or "").startswith("scripted") and script is not None:
        echo("model: offline scripted replies (no API key is used)", err=True)
    claim = claim_run(store, run_id, worker_name(), lease, now)
    if claim is None:
        row = get_run(store, run_id)
        echo(f"{run_id} is {row['status']}" + (f" ({row['reason']})" if row["reason"] else "") +
             ("" if row["status"] in TERMINAL else "; another worker has it"))
        return exit_code(row["status"])
    progress = ProgressLine()
    heartbeat = Heartbeat(store.path, session.durability, claim.worker, lease, agents=[])   # it claims no other run
    control = heartbeat.hold(claim)
    control.on_given_up = lambda given: _leave_the_step(progress, given)
    try:
        outcome = execute(store, registry, claim, progress, control)
    except KeyboardInterrupt:  # ctrl+c: hand the run back now rather than when the lease runs out
        progress.done()
        release(store, claim.run_id, claim.fence, claim.worker, "interrupted with ctrl+c", now())
        echo(f"{run_id} interrupted; it is queued again where it stopped (tui-agent worker --once goes on)")
        return EXIT_WAITING
    finally:
        progress.done()
        heartbeat.close()
    return _report_outcome(outcome)


def _leave_the_step(progress: ProgressLine, control: RunControl) -> None:
    """`run`'s run was handed on while its thread was inside a call that does not return (its deadline passed, or a
    person took the run): that thread cannot be stopped, so this process ends, leaving it behind."""
    progress.done()
    status, reason = control.given_up_as or (None, None)
    goes_on = status in (RunStatus.WAITING, RunStatus.QUEUED) and not needs_person(status, reason)
    echo(f"{control.given_up}; this process leaves that call behind and exits"
         + (" (tui-agent worker --once goes on with the run)" if goes_on else ""))
    sys.stdout.flush()
    sys.stderr.flush()
    traces.close()   # os._exit runs no atexit hook: the spans held go out first
    os._exit(EXIT_WAITING if status is None else exit_code(status))


def _notify_options(command):
    """--notify and --remind-after, the same on `worker` and `tick`."""
    command = click.option(
        "--remind-after", type=Number(min=0), default=notify.REMIND_AFTER_H, show_default=True,
        metavar="HOURS", help="Remind once of a run that has needed a person this long (0: never).")(command)
    return click.option(
        "--notify", "notify_cmd", default=None, type=VERBATIM, metavar="CMD",
        help="Run CMD (split like shell words, run without a shell) once per event that needs a person, the "
             "event as JSON on stdin; each event goes to one process's CMD.")(command)


def _stop_on_signals() -> threading.Event:
    """An event that SIGTERM and SIGINT set (instead of ending the process), for a command to stop cleanly."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _attendant(name: str, notify_cmd: str | None, remind_after: float) -> notify.Attendant:
    command = notify.parse_command(notify_cmd) if notify_cmd is not None else None
    return notify.Attendant(name, command, remind_after * 3600 if remind_after else None)


@cli.command()
@click.option("--once", is_flag=True, help="Work every due run, then exit (for a timer).")
@click.option("--concurrency", type=Whole(min=1), default=1, show_default=True, help="Runs worked at once.")
@click.option("--lease", type=Number(min=0.3), default=DEFAULT_LEASE_S, show_default=True,
              help="Seconds a claim lasts without a heartbeat; heartbeats come every third of it.")
@click.option("--grace", type=Number(min=0), default=GRACE_S, show_default=True,
              help="On SIGTERM or SIGINT, seconds to let each run finish its current step.")
@click.option("--name", default=None, type=TEXT, help="This worker's name (default: a short random one).")
@click.option("--log", "log_file", envvar="TUI_AGENT_LOG", default=None, type=TEXT, metavar="FILE",
              shell_complete=completion.files,
              help="Also write every line it says to FILE (appended), each after the time; `tui-agent workers` says "
                   "where, `tui-agent logs NAME` prints it.")
@_notify_options
@click.pass_obj
def worker(session: Session, once: bool, concurrency: int, lease: float, grace: float, name: str | None,
           log_file: str | None, notify_cmd: str | None, remind_after: float) -> int:
    """Claim due runs and work them, until stopped (SIGTERM, SIGINT) or, with --once, until none is due; due runs
    of an agent it does not know are said once per agent (with --once: exit 4, after working the rest)."""
    from .. import worker_log

    name = name or worker_name()
    strangers: list[str] = []
    attendant = _attendant(name, notify_cmd, remind_after)
    log = worker_log.place(log_file) if log_file else None
    if log is not None:   # first: a database that stops the worker is said in its log too
        worker_log.keep(log, name, session.db or default_path())
    worker_log.say_retries()
    store = session.store  # validates the database before anything starts
    stop = _stop_on_signals()
    if not once:
        echo(f"{name}: working {store.path} (concurrency {concurrency}, lease {lease:g}s)"
             + (f", its log {log}" if log else "") + "; SIGTERM or ctrl+c stops it", err=True)
    outcomes, left_behind, spent = serve(
        store.path, session.durability, session.registry, name, concurrency=concurrency, lease_s=lease, once=once,
        grace_s=grace, stop=stop, on_outcome=_report_outcome, attendant=attendant, on_stranger=_saying(strangers),
        log=None if log is None else str(log),
        on_claim=lambda c: echo(f"{name} claimed {c.run_id} ({c.agent}, attempt {c.attempt}, fence {c.fence})",
                                err=True))
    if once and not outcomes and not left_behind and not strangers:
        echo(f"{name}: no run is due", err=True)
    for held in held_by_gone(store, session.registry.names()) if once else ():
        echo(f"{name}: {held['id']} ({held['agent']}) is {held_by(held['worker'], held['claimable_in_s'])}; "
             "run worker --once again then", err=True)
    # stopped by itself (a supervisor starts a fresh one), or --once left due runs of agents it does not know
    code = EXIT_ENVIRONMENT if spent or (once and strangers) else EXIT_OK
    if left_behind:  # threads inside calls that outlived their runs (handed back): they cannot be stopped
        sys.stdout.flush()
        sys.stderr.flush()
        traces.close()   # os._exit runs no atexit hook: the spans held go out first
        os._exit(code)
    return code


def _saying(said: list[str]) -> Callable[[str], None]:
    """A line on due runs this process leaves (runtime/strangers.py), said on stderr and kept in `said`."""
    def say(line: str) -> None:
        said.append(line)
        echo(line, err=True)
    return say


@cli.command()
@click.option("--all", "show_all", is_flag=True, help="Also workers that stopped (kept for a day).")
@json_option("A JSON array")
@click.pass_obj
def workers(session: Session, show_all: bool, as_json: bool) -> int:
    """List workers, the runs each holds, lease time left and fence; a heartbeat stamped in the future (a
    worker whose clock runs ahead) reads "clock ahead", never as a negative age."""
    at = now()
    listed = workers_report(session.existing_store, at)
    rows = [row for row in listed if show_all or row["state"] != WorkerState.STOPPED]
    if as_json:
        _json_out([iso_times(row) | {"runs": [iso_times(r) for r in row["runs"]]} for row in rows])
        return EXIT_OK
    if not rows:
        hidden = len(listed) - len(rows)
        echo(("no workers yet" if not hidden else f"no worker is running ({hidden} stopped: --all lists them)")
             + "; start one with: tui-agent worker")
        return EXIT_OK
    clocks = [skew(row.get("clock_skew_s")) for row in rows]   # only on a server, whose clock judges leases
    shown = any(clocks)
    logs = [row["log"] or "-" for row in rows]
    logged = max(map(len, logs)) if any(row["log"] for row in rows) else 0   # the column only when a worker logs
    _table((("NAME", 10), ("PID", -7), ("STATE", 11), ("HEARTBEAT", -15), *([("CLOCK", 14)] * shown),
            *([("LOG", logged)] * bool(logged)), ("RUNS", 0)),
           [(row["name"], row["pid"], label(row["state"]), ago(row["heartbeat_at"], at),
             *([clock or "-"] * shown), *([log] * bool(logged)),
             ", ".join(f"{r['id']} {r['agent']} ({_lease_left(row, r)}, fence {r['fence']})"
                       for r in row["runs"]) or "-") for row, clock, log in zip(rows, clocks, logs)])
    return EXIT_OK


@cli.command()
@click.argument("worker_ref", metavar="WORKER", type=TEXT, shell_complete=completion.workers)
@click.option("-f", "--follow", is_flag=True, help="Then print each line it adds, until the worker stops (or ctrl+c).")
@click.pass_obj
def logs(session: Session, worker_ref: str, follow: bool) -> int:
    """Print a worker's log (a worker started with --log, or by the TUI), found by its name, a prefix of it or its
    pid; with -f, follow it as tail -f does, ending after its last line once the worker's process has ended."""
    from .. import worker_log

    store = session.existing_store
    row = find_worker(store, worker_ref)
    name, path = row["name"], row["log"]
    if path is None:
        raise UserError(f"worker {name} keeps no log; start a worker with one: tui-agent worker --log FILE")
    if not on_this_host(row):
        raise UserError(f"the log of worker {name} is on {row['host']}, at {path}; read it there")
    try:
        log = open(path, "rb")
    except FileNotFoundError:
        raise UserError(f"the log of worker {name}, {path}, is gone (removed or moved)") from None
    except OSError as e:
        raise UserError(f"the log of worker {name}, {path}, cannot be read ({e.strerror})") from None
    stop = _stop_on_signals() if follow else threading.Event()   # ctrl+c ends -f quietly, exit 0

    def stopped() -> bool:   # its process has written its last line and gone (stopped, or killed)
        again = find_worker(store, name)
        return not process_alive(again["pid"], again["pid_started"])

    def printed(text: str) -> None:
        echo(text, nl=False)
        sys.stdout.flush()

    try:
        with log:
            worker_log.follow(log, printed, stopped, stop, follow)
    except BrokenPipeError:   # the reader went away (`logs w-1 | head`): nothing more to say, to anyone
        sys.stderr.close()
        os._exit(EXIT_OK)
    return EXIT_OK


@cli.command("completion")
@click.argument("shell", metavar="SHELL", type=click.Choice(completion.SHELLS))
def completion_command(shell: str) -> int:
    """Print the script that makes SHELL complete tui-agent's commands, options, run ids, agents and schedules:
    eval "$(tui-agent completion bash)" in ~/.bashrc (zsh: the same in ~/.zshrc; fish: tui-agent completion fish |
    source in ~/.config/fish/config.fish)."""
    echo(completion.script(cli, shell), nl=False)
    return EXIT_OK


def _lease_left(worker: dict, held: dict) -> str:
    """A held run's lease as `workers` says it: never negative; a dead worker's run says when it is claimable."""
    if worker["state"] == WorkerState.DEAD:
        return claimable(held["claimable_in_s"])
    return f"lease {held['lease_left_s']:g}s" if held["lease_left_s"] > 0 else "lease expired, claimable now"


@cli.command()
@json_option("One JSON object")
@click.option("--full", is_flag=True, help="Run integrity_check (every index against its table), not quick_check.")
@click.pass_obj
def doctor(session: Session, as_json: bool, full: bool) -> int:
    """Check the database without changing it: damage, schema, WAL, permissions, free disk; exit 0 when
    healthy, 1 otherwise. It opens the file read-only and never creates one."""
    if session.settings.problem:   # doctor goes on: it may be what a person runs to find out what is wrong
        echo(f"tui-agent: {session.settings.problem.what}; doctor goes on without the settings it could not read",
             err=True)
    found = diagnose(session.db or default_path(), full)
    if as_json:
        _json_out(found.as_json())
    else:
        _print_diagnosis(found)
    return EXIT_OK if found.healthy else EXIT_NOT_SUCCEEDED


@cli.command("config")
@click.option("--path", "path_only", is_flag=True, help="Print where the config file is (it may not exist yet).")
@json_option("One JSON object: path, exists, settings (key, value, from, where), problem")
@click.pass_context
def config_command(ctx: click.Context, path_only: bool, as_json: bool) -> int:
    """Print each setting in effect and where it came from: a flag, an environment variable, the config file (its
    line), the TUI's saved state or the default. Exit 2 when the file is bad, after naming the key and its line."""
    settings = ctx.obj.settings
    if path_only:
        echo(str(settings.path))
        return EXIT_OK
    rows = config.effective(ctx.parent, settings)
    if as_json:
        _json_out({"path": str(settings.path), "exists": settings.exists, "settings": rows,
                   "problem": settings.problem and str(settings.problem)})
    else:
        echo(f"{settings.path}" + ("" if settings.exists else " (no such file: every setting is a default or given)"))
        shown = [(row["key"], _setting_text(row["value"]), config.said(row)) for row in rows]
        _table((("SETTING", max(len(k) for k, _, _ in shown)), ("VALUE", min(40, max(len(v) for _, v, _ in shown))),
                ("FROM", 0)), shown)
    if settings.problem:
        raise settings.problem
    return EXIT_OK


def _setting_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "-"
    return "-" if value is None else str(value).lower() if isinstance(value, bool) else \
        f"{value:g}" if isinstance(value, float) else str(value)


def _print_diagnosis(found: Diagnosis) -> None:
    echo(str(found.path))
    for check in found.checks:
        echo(f"  {'ok' if check.ok else 'FAIL':<5} {check.name:<12} {check.detail}")
        if check.advice:
            echo(f"  {'':<5} {'':<12} what to do: {check.advice}")
    failed = [check.name for check in found.checks if not check.ok]
    echo("healthy" if not failed else f"not healthy: {', '.join(dict.fromkeys(failed))}")


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


def _many(run_ref: str | None, where: str | None, dry_run: bool, yes: bool) -> bool:
    """Whether the command acts on the runs --where selects (True) or on RUN; a usage error when it is unclear."""
    context = click.get_current_context()
    if where is None:
        if run_ref is None:
            raise click.UsageError("name a RUN, or choose runs with --where FILTER", context)
        if dry_run or yes:
            raise click.UsageError("--dry-run and --yes go with --where FILTER", context)
        return False
    if run_ref is not None:
        raise click.UsageError("give a RUN or --where FILTER, not both", context)
    return True


def _bulk(session: Session, action: str, where: str, dry_run: bool, yes: bool, note: str | None) -> int:
    """`action` on every run `where` selects, after the question (or `yes`): 0 when it acted on every one, 1 when
    some were refused, each named on a line of its own under the summary."""
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
    if not yes and not _asked_first(f"{would}{refused}?", f"--where selects {len(run_ids)} runs; pass --yes to "
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
def reconcile(session: Session, run_ref: str | None, effect_ref: str | None, decisions: tuple[str, ...],
              result_text: str | None, note: str | None, where: str | None, dry_run: bool, yes: bool) -> int:
    """Decide what happened to an effect whose outcome is unknown (EFFECT: its name, or its position). With
    --where FILTER instead of RUN EFFECT, --ask for each selected run's last effect in doubt."""
    decision = _one_decision(decisions)
    if result_text is not None and decision != "happened":
        raise UserError("--result goes with --happened only")
    if _many(run_ref, where, dry_run, yes):
        if decision != "ask" or effect_ref is not None:
            raise click.UsageError("--where goes with --ask alone: whether an effect happened is decided one run "
                                   "at a time (tui-agent reconcile RUN EFFECT --happened | --not-done | --abandon)",
                                   click.get_current_context())
        return _bulk(session, "reconcile-ask", where, dry_run, yes, note)
    if effect_ref is None:
        raise click.UsageError("name the EFFECT after the RUN (its name, or its position)", click.get_current_context())
    store = session.existing_store
    if decision == "happened":
        result = None if result_text is None else parse_json(result_text, "--result", example=RESULT_EXAMPLE)
        run_id = operate.reconcile_happened(store, run_ref, effect_ref, result, note)
        echo(f"{run_id}: {effect_ref} recorded as done; the run is queued again")
    elif decision == "not-done":
        run_id = operate.reconcile_not_done(store, run_ref, effect_ref, note,
                                            warn=lambda m: echo(f"tui-agent: warning: {m}", err=True))
        echo(f"{run_id}: {effect_ref} recorded as not done; the next worker does it again with the same key")
    elif decision == "ask":
        run_id = operate.reconcile_ask(store, run_ref, effect_ref, note)
        echo(f"{run_id}: the next worker will ask the service about {effect_ref}")
    else:
        run_id = operate.abandon(store, run_ref, effect_ref, note)
        echo(f"{run_id}: cancelled")
    return EXIT_OK


def _one_decision(given: tuple[str, ...]) -> str:
    """Exactly one decision: the flags share one destination, so without this check the last one given
    would silently win (and --happened --not-done would send the email again)."""
    chosen = list(dict.fromkeys(given))
    if not chosen:
        raise UserError("say what happened: --happened, --not-done, --ask or --abandon")
    if len(chosen) > 1:
        raise click.UsageError(f"give one decision, not {' and '.join('--' + d for d in chosen)}",
                               click.get_current_context())
    return chosen[0]


@cli.command()
@click.argument("run_ref", metavar="RUN", type=TEXT, required=False, shell_complete=completion.runs)
@click.option("--deny", is_flag=True, help="Deny instead of approve.")
@note_option
@many_options
@click.pass_obj
def approve(session: Session, run_ref: str | None, deny: bool, note: str | None, where: str | None, dry_run: bool,
            yes: bool) -> int:
    """Answer the approval a run waits for; the run goes on with the answer."""
    if _many(run_ref, where, dry_run, yes):
        return _bulk(session, "deny" if deny else "approve", where, dry_run, yes, note)
    run_id = operate.approve(session.existing_store, run_ref, deny, note)
    echo(f"{run_id}: {operate.answered(deny)}")
    return EXIT_OK


@cli.command()
@click.argument("run_ref", metavar="RUN", type=TEXT, required=False, shell_complete=completion.runs)
@note_option
@many_options
@click.pass_obj
def park(session: Session, run_ref: str | None, note: str | None, where: str | None, dry_run: bool, yes: bool) -> int:
    """Stop a run so a person can look at it; resume continues it."""
    if _many(run_ref, where, dry_run, yes):
        return _bulk(session, "park", where, dry_run, yes, note)
    echo(f"{operate.park(session.existing_store, run_ref, note)}: parked")
    return EXIT_OK


@cli.command()
@click.argument("run_ref", metavar="RUN", type=TEXT, required=False, shell_complete=completion.runs)
@note_option
@many_options
@click.pass_obj
def cancel(session: Session, run_ref: str | None, note: str | None, where: str | None, dry_run: bool,
           yes: bool) -> int:
    """End a run for good."""
    if _many(run_ref, where, dry_run, yes):
        return _bulk(session, "cancel", where, dry_run, yes, note)
    echo(f"{operate.cancel_run(session.existing_store, run_ref, note)}: cancelled")
    return EXIT_OK


@cli.command()
@click.argument("run_ref", metavar="RUN", type=TEXT, required=False, shell_complete=completion.runs)
@click.option("--restart", is_flag=True, help="Start from zero in a new journal generation (the old stays readable).")
@budget_option
@many_options
@click.pass_obj
def resume(session: Session, run_ref: str | None, restart: bool, budget_specs: tuple[str, ...], where: str | None,
           dry_run: bool, yes: bool) -> int:
    """Queue a parked run (or one stopped by its budget or a plateau) again where it stopped; a run waiting to
    retry tries again now."""
    if _many(run_ref, where, dry_run, yes):
        if restart or budget_specs:
            raise click.UsageError("--where resumes runs where they stopped; --restart and --budget take one RUN",
                                   click.get_current_context())
        return _bulk(session, "resume", where, dry_run, yes, None)
    limits = operate.parse_budget(budget_specs, "--budget")
    store = session.existing_store
    before = get_run(store, resolve_run(store, run_ref))
    run_id = operate.resume(store, run_ref, restart, limits)
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
    if edit_at is None:
        echo(operate.fork(store, run_ref, from_step))
        return EXIT_OK
    from .. import editing

    entry = operate.recorded_entry(store, run_ref, edit_at)
    if result_text is None:
        text = editing.edit_text(editing.as_text(entry["result"]), editing.file_name(entry))
        source = "the edited result"
    elif result_text.startswith("@"):
        source = f"--result {result_text}"
        text = _read_text(Path(result_text[1:]), source)
    else:
        text, source = result_text, "--result"
    value = editing.parse_edited(text, source)
    echo(operate.fork_edited(store, entry["run_id"], edit_at, value, name=entry["name"],
                             generation=entry["generation"]))
    return EXIT_OK


@cli.command("diff")
@click.argument("a_ref", metavar="A", type=TEXT, shell_complete=completion.runs)
@click.argument("b_ref", metavar="B", type=TEXT, shell_complete=completion.runs)
@click.option("--all", "every_entry", is_flag=True,
              help="Print every entry, a page at a time (default: a window around the first divergence).")
@json_option("One JSON object, its entries streamed")
@click.pass_obj
def diff_runs(session: Session, a_ref: str, b_ref: str, every_entry: bool, as_json: bool) -> int:
    """Compare two runs side by side (a fork with its parent, a rerun with the run before): the totals, the
    first divergence, and per entry whether the name, result, cost and duration differ. Exit 0 when they
    are the same entry for entry (names and results), 1 when they differ, 2 on bad input."""
    from ..diff import first_divergence, json_lines, pair, text_lines

    store = session.existing_store
    runs = pair(store, a_ref, b_ref)
    found = first_divergence(store, runs)
    for line in (json_lines if as_json else text_lines)(store, runs, found, every_entry):
        echo(line)
    return EXIT_OK if found is None else EXIT_NOT_SUCCEEDED


@cli.group("db")
def db_group() -> None:
    """Create or upgrade a database: a SQLite file, or a PostgreSQL database named by a postgresql:// URL
    (workers on several machines share it; pip install 'tui-agent[postgres]')."""


@db_group.command("init")
@click.argument("where", metavar="[FILE|URL]", required=False, type=VERBATIM)
@click.pass_obj
def db_init(session: Session, where: str | None) -> int:
    """Make our schema in an empty database (or say it is there already); a database of someone else's is
    refused untouched. WHERE defaults to --db."""
    store = open_store(where or session.db, session.durability)
    try:
        if store.found_version is None:
            echo(f"created tui-agent schema version {SCHEMA_VERSION} in {store.path}")
        else:
            echo(f"{store.path} holds tui-agent schema version {SCHEMA_VERSION} already; nothing to do")
        _print_places(store)
    finally:
        store.close()
    return EXIT_OK


@db_group.command("migrate")
@click.argument("where", metavar="[FILE|URL]", required=False, type=VERBATIM)
@click.pass_obj
def db_migrate(session: Session, where: str | None) -> int:
    """Bring an existing database up to this tui-agent's schema version (a newer one is refused)."""
    store = open_store(where or session.db, session.durability, create=False)
    try:
        if store.found_version == SCHEMA_VERSION:
            echo(f"{store.path} is at schema version {SCHEMA_VERSION} already; nothing to do")
        else:
            echo(f"migrated {store.path} from schema version {store.found_version} to {SCHEMA_VERSION}")
        _print_places(store)
    finally:
        store.close()
    return EXIT_OK


@db_group.command("vacuum")
@click.option("--yes", is_flag=True, help="Rewrite without asking first.")
@click.pass_obj
def db_vacuum(session: Session, yes: bool) -> int:
    """Give a SQLite file's free pages back to the file system: a file made with incremental auto-vacuum (every new
    one) in short batches; an older one by rewriting it with it (VACUUM), which holds the write lock for the whole
    rewrite, so every worker waits, and needs the file's size free twice more (the temporary folder and the
    database's own); asks first."""
    store = session.existing_store
    if on_server(store.conn):
        echo("nothing to do on PostgreSQL: the server's autovacuum reuses the space that prune frees")
        return EXIT_OK
    space = prune_runs.free_space(store)
    if not space["incremental"] and not yes:
        question = (f"rewrite {store.path} ({_size(space['file_bytes'])}, {_size(space['free_bytes'])} free inside) "
                    "with incremental auto-vacuum? Every writer waits until it is done")
        if not _asked_first(question, "db vacuum rewrites the whole file holding the write lock; pass --yes to do "
                            "it without a question"):
            return EXIT_OK
    done = operate.vacuum(store)
    before, after = done["before"], done["after"]
    echo(f"{store.path}: {_size(before['file_bytes'])} before, {_size(after['file_bytes'])} now"
         + ("" if before["incremental"] else "; it gives the pages prune frees back by itself from now on"))
    return EXIT_OK


def _print_places(store: Store) -> None:
    """Where a store keeps what is not rows: artifacts for every machine, the agents' data per machine."""
    root = artifacts.folder(store)
    echo("artifacts   in the database (--data DIR keeps them in a folder every machine shares)" if root is None
         else f"artifacts   {root}")
    mine = " (this machine's own: sample sources, fetch log, outbox)" if on_server(store.conn) else ""
    echo(f"data folder {store.data_dir}{mine}")


@cli.command()
@click.argument("name", metavar="PATH", type=TEXT)
@click.option("-o", "--output", metavar="FILE", type=click.Path(dir_okay=False),
              help="Save it to FILE, a new one (--force replaces one that exists).")
@click.option("--force", is_flag=True, help="With -o: replace FILE if it exists, whole or not at all.")
@click.pass_obj
def artifact(session: Session, name: str, output: str | None, force: bool) -> int:
    """Print one of a run's artifacts (a report, a large result), or save it with -o, from wherever the database
    keeps it. PATH is what show prints (artifact:artifacts/RUN/NAME, or a file's path), or the path relative to
    the artifacts' folder; nothing else is read (not a file outside the artifacts, nor the database). On a
    terminal it is shown as text with what the terminal would act on made visible; into a pipe or a file it is
    the bytes as stored."""
    try:
        data = artifacts.read(session.existing_store, name)
    except OSError as e:
        raise UserError(f"cannot read artifact {name} ({e.strerror}); tui-agent show RUN names a run's "
                        "artifacts") from None
    if output:
        output_file.save(data, output, force)
    elif sys.stdout.isatty():   # to be read, not kept: made visible as every command's text is
        echo(data.decode("utf-8", errors="backslashreplace"), nl=False)
    else:                       # into a pipe or a file, byte for byte (what -o saves)
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return EXIT_OK


@cli.command("copy")
@click.option("--from", "source_where", required=True, type=VERBATIM, metavar="FILE|URL",
              help="The database to copy (read only).")
@click.option("--to", "target_where", required=True, type=VERBATIM, metavar="FILE|URL",
              help="A new or empty database to copy into (made if missing).")
@click.pass_obj
def copy_command(session: Session, source_where: str, target_where: str) -> int:
    """Copy a whole database into a new one, SQLite file or PostgreSQL URL either way: every run with its ids,
    journal, effects, approvals and events, and the artifacts its rows name (as files or rows, wherever the
    target keeps them)."""
    from ..copying import copy_database, open_source, target_for_copy

    shown = {"at": time.monotonic() + 1.0, "tty": sys.stderr.isatty(), "any": False}

    def progress(table: str, done: int, total: int) -> None:   # a long copy only: after a second, twice a second
        if time.monotonic() < shown["at"]:
            return
        shown["at"], shown["any"] = time.monotonic() + (0.5 if shown["tty"] else 5.0), True
        line = f"copying: {done:,} / {total:,} rows ({table})"
        sys.stderr.write(f"\r\x1b[2K{line}" if shown["tty"] else f"{line}\n")
        sys.stderr.flush()

    source = open_source(source_where, session.durability)
    _OPENED.append(source)
    try:
        with target_for_copy(target_where, session.durability) as target:
            _OPENED.append(target)
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
    """What a copy, an export or an import wrote (copying.Tally.counts): `3 runs (40 journal entries, ...)`."""
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
    """Write RUN (and the runs it was forked from) to FILE, a tui-agent SQLite database of those runs alone, with
    their journal, effects, model calls, approvals, events and artifacts as rows: --db FILE opens it (show, diff,
    replay, fork), and tui-agent import FILE loads it into another database."""
    from ..exports import export_runs

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
    """Load an export (tui-agent export RUN -o FILE) into this database, SQLite or PostgreSQL, run ids kept: its runs
    are here to read, diff, replay and fork, never to resume, since their source may still run them (--adopt takes
    an ended or parked run over instead). A clash of run ids or ledger keys is refused and nothing is imported."""
    from ..exports import open_export

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


@cli.command("worktrees")
@click.option("--clean", is_flag=True, help="Remove the worktrees whose runs have all ended, after asking (their "
              "branches stay, so a merged branch can then be deleted with git branch -d).")
@click.option("--yes", is_flag=True, help="With --clean: remove them without asking (for scripts).")
@json_option("An array, one object per worktree: worktree, repo, branch, onto, merged, size_bytes, locked, run, "
             "agent, status, reason, runs, removable")
@click.pass_obj
def worktrees_command(session: Session, clean: bool, yes: bool, as_json: bool) -> int:
    """List the git worktrees the coding agents made (any agent whose run records one), with the run working in each,
    its state, whether its branch is merged into the branch it was meant for, and its size on disk; --clean removes
    those of ended runs that hold nothing a commit does not, after asking. Exit 1 when --clean had to keep one of an
    ended run (changes no commit holds, a lock)."""
    from ..worktrees import listing

    store = session.existing_store
    trees = listing(store)
    if clean:
        return _clean_worktrees(store, trees, yes)
    if as_json:
        _json_out([tree.as_json() for tree in trees])
        return EXIT_OK
    if not trees:
        echo("no worktree of a coding agent's run (patch and refactor-imports make one in a git repository)")
        return EXIT_OK
    rows = [(tree.run["id"], tree.run["agent"], tree.branch or "(detached)",
             tree.run["status"] + (f": {tree.run['reason']}" if tree.run["reason"] else ""),
             {True: "yes", False: "no", None: "-"}[tree.merged], file_size(tree.size), tree.path) for tree in trees]
    _table((("RUN", 11), ("AGENT", 16), ("BRANCH", max(len(row[2]) for row in rows)),
            ("STATE", max(len(row[3]) for row in rows)), ("MERGED", 6), ("SIZE", -9), ("WORKTREE", 0)), rows)
    return EXIT_OK


def _clean_worktrees(store, trees: list, yes: bool) -> int:
    """`worktrees --clean`: say which worktrees stay and why, ask before removing the others (unless --yes), then
    remove each as operate.clean_worktrees decides it again."""
    from ..worktrees import branch_advice, why_not_remove

    if not trees:
        echo("no worktree of a coding agent's run is left")
        return EXIT_OK
    going = [tree for tree in trees if why_not_remove(tree) is None]
    kept = [(tree, why_not_remove(tree)) for tree in trees if tree not in going]
    if going and not yes:
        for tree in going:
            echo(f"to remove: {tree.path} ({tree.run['id']} {tree.run['status']}, {file_size(tree.size)}; its branch "
                 f"{tree.branch or '(none)'} stays)")
        question = f"Remove {len(going)} worktree(s), {file_size(sum(tree.size for tree in going))} in all?"
        try:
            if not click.confirm(question, default=False, err=True):
                echo("nothing was removed")
                going = []
        except click.Abort:   # no answer to read (a script): nothing is removed unasked
            raise UserError(f"--clean would remove {len(going)} worktree(s) and read no answer; nothing was "
                            "removed; add --yes to remove them without asking") from None
    done = operate.clean_worktrees(store, going) + kept
    for tree, why in done:
        echo(f"removed {tree.path} ({tree.run['id']} {tree.run['status']}); {branch_advice(tree)}" if why is None
             else f"kept {tree.path}: {why}")
    ended_but_kept = [tree for tree, why in done if why and all(r["status"] in TERMINAL for r in tree.runs)]
    return EXIT_NOT_SUCCEEDED if ended_but_kept else EXIT_OK


@cli.command()
@click.option("--repo", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="The repository (any folder in it); default: every one this database's coding runs worked in.")
@json_option("An array of pull requests: repo, number, state, branch, base, head, title, body, key, opened_at, "
             "closed_at (when closed)")
@click.pass_obj
def pulls(session: Session, repo: str | None, as_json: bool) -> int:
    """List the pull requests on the local git host (what patch opens, kept in the repository's
    .git/tui-agent/pulls.json), oldest first."""
    from ..worktrees import pulls as pulls_of, repositories

    repos = [str(Path(repo).resolve())] if repo else repositories(session.existing_store)
    try:
        found = pulls_of(repos)
    except ValueError as e:
        raise UserError(f"--repo {repo}: {e}" if repo else str(e)) from None
    if as_json:
        _json_out([{k: iso(v) if k in ("opened_at", "closed_at") else v for k, v in pr.items()} for pr in found])
        return EXIT_OK
    if not found:
        echo(f"no pull request in {repo}" if repo else "no pull request: no coding run of this database opened one "
             "(--repo DIR names a repository)")
        return EXIT_OK
    at = now()
    many = len({pr["repo"] for pr in found}) > 1
    _table((("#", -4), ("STATE", 6), ("BRANCH", max(len(pr["branch"]) for pr in found)), ("BASE", 10), ("HEAD", 12), ("OPENED", -10),
            *([("REPO", 30)] * many), ("TITLE", 0)),
           [(pr["number"], pr["state"], pr["branch"], pr["base"], (pr.get("head") or "-")[:12],
             ago(pr["opened_at"], at), *([pr["repo"]] * many), pr["title"]) for pr in found])
    return EXIT_OK


@cli.command("prune")
@click.option("--older-than", "older_than", required=True, type=TEXT, metavar="SPAN",
              help="Remove runs that ended longer ago than this: 30d, 12h, 2w.")
@click.option("--status", "statuses", default=",".join(prune_runs.PRUNABLE), show_default=True, type=TEXT,
              metavar="STATUS,...", help="Which ended runs (comma-separated).")
@click.option("--keep-last", type=Whole(min=0), default=None, metavar="N",
              help="Keep the N newest of these runs of each agent, however old.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed and kept; change nothing.")
@click.option("--yes", is_flag=True, help="Remove without asking first (for scripts and timers).")
@json_option("One JSON object: what was removed (or would be) and what was kept")
@click.pass_obj
def prune_command(session: Session, older_than: str, statuses: str, keep_last: int | None, dry_run: bool, yes: bool,
                  as_json: bool) -> int:
    """Remove ended runs with their journal, events, effects, model calls, request parts, approvals, notices and
    artifacts, in short batches that let running workers' commits through. The keys of their confirmed effects
    and their run keys are kept, so a later run with the same meaning still finds them. Never removed: a run
    that has not ended, one a fork still needs, one with an effect in doubt."""
    chosen = operate.prune_plan(session.existing_store, filters.parse_span(older_than, "--older-than"),
                                prune_runs.chosen_statuses(statuses), keep_last)
    store = session.existing_store
    what = _pruning_said(chosen)
    if dry_run or not chosen.remove:
        if as_json:
            _json_out(_plan_json(chosen))
        else:
            echo((f"would remove {what}" if chosen.remove else f"nothing to remove: {what}") + _kept_said(chosen.kept))
        return EXIT_OK
    if not yes and not _asked_first(f"remove {what}{_kept_said(chosen.kept)}?", f"prune would remove "
                                    f"{len(chosen.remove)} runs; pass --yes to remove them without a question, or "
                                    "--dry-run to see what it would remove"):
        return EXIT_OK
    done = operate.prune(store, chosen, _pruning_progress(len(chosen.remove)))
    if as_json:
        _json_out({**_plan_json(chosen), "removed": dict(done.removed), "stayed": dict(done.stayed),
                   "kept_keys": done.keys, "artifact_bytes": done.artifact_bytes, "batches": done.batches,
                   "longest_hold_s": round(done.longest_hold_s, 4), "vacuum": done.vacuum})
        return EXIT_OK
    removed = sum(done.removed.values())
    files = f" and {_size(done.artifact_bytes)} of artifact files" if done.artifact_bytes else ""
    keys = (f"; {done.keys:,} key{'s' * (done.keys != 1)} kept, so a later run with the same meaning still finds "
            "them" if done.keys else "")
    echo(f"removed {removed:,} run{'s' * (removed != 1)}{_by_status(done.removed)}{files}{keys}; {done.batches:,} "
         f"batches, the longest held the write lock {done.longest_hold_s * 1000:.0f} ms")
    if done.stayed:
        echo(f"{sum(done.stayed.values())} changed before their turn and stay ("
             + ", ".join(f"{n} {_STAYED[why]}" for why, n in done.stayed.items()) + ")")
    if done.vacuum is not None:
        echo(_vacuum_said(done.vacuum))
    return EXIT_OK


_KEPT = {"newest": "the newest of their agent (--keep-last)", "fork": "a fork still needs",
         "doubt": "with an effect in doubt (reconcile it first)"}
_STAYED = {"changed": "resumed or no longer as chosen", "fork": "forked meanwhile", "doubt": "now in doubt"}


def _by_status(counts) -> str:
    return f" ({', '.join(f'{n:,} {status}' for status, n in counts.most_common())})" if counts else ""


def _pruning_said(chosen) -> str:
    count = len(chosen.remove)
    if not count:
        return f"no {' or '.join(chosen.chosen)} run ended before {clock_time(chosen.cutoff)}"
    return f"{count:,} run{'s' * (count != 1)} that ended before {clock_time(chosen.cutoff)}{_by_status(chosen.statuses)}"


def _kept_said(kept) -> str:
    return f"; kept: {', '.join(f'{n:,} {_KEPT[why]}' for why, n in kept.items())}" if kept else ""


def _asked_first(question: str, refusal: str) -> bool:
    """Whether the person at the terminal says yes to `question` (on stderr, no by default; "nothing changed" when
    not). Off a terminal nobody can answer, so the action is refused with `refusal`, which names --yes."""
    if not sys.stdin.isatty():
        raise UserError(refusal)
    if click.confirm(question, default=False, err=True):
        return True
    echo("nothing changed", err=True)
    return False


def _plan_json(chosen) -> dict:
    return {"cutoff": iso(chosen.cutoff), "statuses": list(chosen.chosen), "remove": chosen.remove,
            "by_status": dict(chosen.statuses), "kept": dict(chosen.kept)}


def _pruning_progress(total: int) -> Callable | None:
    """`removing: N of M runs` rewritten on a terminal at most twice a second; nothing into a pipe."""
    if not sys.stderr.isatty():
        return None
    shown = {"at": time.monotonic() + 1.0}

    def progress(done) -> None:
        if time.monotonic() >= shown["at"]:
            shown["at"] = time.monotonic() + 0.5
            sys.stderr.write(f"\r\x1b[2Kremoving: {sum(done.removed.values()):,} of {total:,} runs")
            sys.stderr.flush()
    return progress


def _size(count: float) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 1024:.1f} KiB" if count >= 1024 else \
        f"{count:.0f} B"


def _vacuum_said(space: dict) -> str:
    if space["incremental"]:
        return f"gave {_size(space['returned_bytes'])} back to the file system (the file is {_size(space['file_bytes'])})"
    return (f"{_size(space['free_bytes'])} are free inside the file, which was made without incremental auto-vacuum "
            "(by an older tui-agent): tui-agent db vacuum gives them back (it rewrites the file, holding the write "
            "lock throughout)")




@cli.group("filter")
def filter_group() -> None:
    """Saved filters: a name for the words of a filter (status:failed agent:NAME since:3d ...), which the TUI's
    palette offers on the runs list."""


@filter_group.command("save")
@click.argument("name", type=TEXT)
@click.argument("words", type=TEXT)
@click.pass_obj
def filter_save(session: Session, name: str, words: str) -> int:
    """Keep WORDS (one argument: quote them) under NAME, replacing what NAME held."""
    echo(operate.save_filter(session.store, name, words))
    return EXIT_OK


@filter_group.command("ls")
@json_option("A JSON array")
@click.pass_obj
def filter_ls(session: Session, as_json: bool) -> int:
    """List the saved filters."""
    shown = saved_filters_report(session.existing_store)
    if as_json:
        _json_out(shown)
        return EXIT_OK
    if not shown:
        echo("no saved filters; save one with: tui-agent filter save NAME 'status:failed since:3d'")
        return EXIT_OK
    _table((("NAME", 20), ("WORDS", 0)), [(r["name"], r["words"]) for r in shown])
    return EXIT_OK


@filter_group.command("rm")
@click.argument("name", type=TEXT)
@click.pass_obj
def filter_rm(session: Session, name: str) -> int:
    """Forget a saved filter."""
    echo(operate.forget_filter(session.existing_store, name))
    return EXIT_OK


@cli.group()
def schedule() -> None:
    """Runs started by a cron expression, with missed-run and overlap policies."""


@schedule.command("add")
@click.argument("name", type=TEXT)
@click.option("--agent", required=True, type=TEXT, help="The agent each fire runs.", shell_complete=completion.agents)
@click.option("--cron", required=True, type=TEXT, help="Five cron fields, read in --tz: '0 2 * * *' is 02:00 daily.")
@click.option("--tz", default="UTC", show_default=True, type=TEXT, help="The zone the cron expression is read in.")
@input_option
@click.option("--missed", type=click.Choice(MISSED), default="once", show_default=True,
              help="Fires missed while nothing ran (the laptop was off): start none, the latest, or all.")
@click.option("--overlap", type=click.Choice(OVERLAP), default="skip", show_default=True,
              help="When the previous run is unfinished at a fire: drop it, hold one until it finishes, or start.")
@click.option("--grace", type=Number(min=0), default=SCHEDULE_GRACE_S / 60, show_default=True,
              help="Minutes after its time a fire still counts as on time.")
@model_option
@click.pass_obj
def schedule_add(session: Session, name: str, agent: str, cron: str, tz: str, input_text: str, missed: str,
                 overlap: str, grace: float, model: str) -> int:
    """Add a schedule; it counts fires from now on."""
    model, _ = session.settings.agent_defaults(session.registry, agent, model, ())
    row = operate.schedule_add(session.store, session.registry, name, agent, cron, tz, _parse_input(input_text),
                               missed, overlap, grace * 60, model)
    echo(f"{name}: next fire {in_zone(row['next_fire_at'], tz).isoformat(timespec='seconds')}")
    return EXIT_OK


@schedule.command("ls")
@json_option("A JSON array")
@click.pass_obj
def schedule_ls(session: Session, as_json: bool) -> int:
    """List schedules with their next fire time in their zone."""
    shown = schedules_report(session.existing_store)
    if as_json:
        _json_out(shown)
        return EXIT_OK
    if not shown:
        echo("no schedules; add one with: tui-agent schedule add NAME --agent A --cron '0 2 * * *'")
        return EXIT_OK
    _table((("NAME", 18), ("AGENT", 16), ("CRON", 14), ("ZONE", 16), ("NEXT FIRE", 25), ("MISSED", 6),
            ("OVERLAP", 7), ("MODEL", 10), ("LAST RUN", 0)),
           [(r["name"], r["agent"], r["cron"], r["tz"], r["next_fire"] if r["enabled"] else "disabled", r["missed"],
             r["overlap"], r["model"], r["last_run_id"] or "-") for r in shown])
    return EXIT_OK


@schedule.command("rm")
@click.argument("name", type=TEXT, shell_complete=completion.schedules)
@click.pass_obj
def schedule_rm(session: Session, name: str) -> int:
    """Remove a schedule (its runs stay)."""
    operate.schedule_remove(session.existing_store, name)
    echo(f"{name}: removed")
    return EXIT_OK


@schedule.command("enable")
@click.argument("name", type=TEXT, shell_complete=completion.schedules)
@click.pass_obj
def schedule_enable(session: Session, name: str) -> int:
    """Enable a schedule; fires while it was disabled never count."""
    operate.schedule_enable(session.existing_store, name, True)
    echo(f"{name}: enabled")
    return EXIT_OK


@schedule.command("disable")
@click.argument("name", type=TEXT, shell_complete=completion.schedules)
@click.pass_obj
def schedule_disable(session: Session, name: str) -> int:
    """Disable a schedule."""
    operate.schedule_enable(session.existing_store, name, False)
    echo(f"{name}: disabled")
    return EXIT_OK


@schedule.command("fire")
@click.argument("name", type=TEXT, shell_complete=completion.schedules)
@click.pass_obj
def schedule_fire(session: Session, name: str) -> int:
    """Fire a schedule now (the overlap policy still applies); prints the run started, if any, and on
    stderr what happened (started, held until the previous run ends, or skipped)."""
    fired = operate.schedule_fire(session.existing_store, session.registry, name)
    if fired.disabled is not None:
        raise UserError(str(fired))
    for run_id in fired.started:
        echo(run_id)
    echo(str(fired), err=True)
    return EXIT_OK


@cli.command()
@click.option("--work", is_flag=True, help="Then work every due run until none is due (sleeps that ended, retries).")
@_notify_options
@click.pass_obj
def tick(session: Session, work: bool, notify_cmd: str | None, remind_after: float) -> int:
    """Fire due schedules (and with --work, work due runs), then exit: for cron or a systemd timer."""
    attendant = _attendant(f"tick-{worker_name()}", notify_cmd, remind_after)
    store = session.store
    strangers: list[str] = []
    stop = _stop_on_signals()   # as a worker: the step in hand finishes, the notices not sent are handed back
    for run_id in schedule_tick(store, session.registry):
        echo(f"started {run_id}", err=True)
    for run_id in requeue_released(store, now()):
        echo(f"queued {run_id} again: the worker whose send it waited for has let go", err=True)
    if work:
        outcomes, left_behind, _ = serve(store.path, session.durability, session.registry, worker_name(),
                                         once=True, stop=stop, on_outcome=_report_outcome,
                                         on_stranger=_saying(strangers))
        if not outcomes and not left_behind and not strangers:
            echo("no run is due", err=True)
        if left_behind:   # threads inside calls that outlived their runs (handed back) cannot be stopped
            attendant.last_pass(store, stop)
            sys.stdout.flush()
            sys.stderr.flush()
            traces.close()   # os._exit runs no atexit hook: the spans held go out first
            os._exit(EXIT_ENVIRONMENT if strangers else EXIT_OK)
    attendant.last_pass(store, stop)   # reminders due, and what needs a person to --notify
    return EXIT_ENVIRONMENT if strangers else EXIT_OK


@cli.command()
@json_option("One JSON object per line: id, run_id, agent, kind, status, reason, message, at, command, superseded")
@click.option("--after", "after_id", type=Whole(min=0), default=None, metavar="ID",
              help="Start after this event id (an earlier line's id) instead of now.")
@click.pass_obj
def watch(session: Session, as_json: bool, after_id: int | None) -> int:
    """Print one line each time a run comes to need a person (or is reminded of), until stopped (ctrl+c); a call
    whose need has passed when it is read (decided, resumed, ended) is not printed (--json: marked superseded)."""
    store = session.existing_store
    cursor = notices.last_id(store) if after_id is None else after_id
    stop = _stop_on_signals()   # either ends it quietly, exit 0
    echo(f"watching {store.path} for runs that need you; ctrl+c stops", err=True)   # stdout is the lines
    try:
        while not stop.is_set():
            for notice in notices.after(store, cursor):
                cursor = notice["id"]
                if as_json:   # the history too, each marked: a script may want what has passed
                    echo(notify.json_line(notify.event(notice)))
                elif not notice["superseded"]:
                    echo(notify.line(notice))
            sys.stdout.flush()
            stop.wait(notify.POLL_S)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:   # the reader went away (`watch | head -1`): nothing more to say, to anyone
        sys.stderr.close()
        os._exit(EXIT_OK)
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
def ls(session: Session, status: tuple[str, ...], agent_name: str | None, since: str | None, until: str | None,
       text: str | None, limit: int | None, as_json: bool) -> int:
    """List runs, newest first, with what each spent; the options select as the TUI filter's words do."""
    where = filters.options(status, agent_name, since, until, text)
    rows = runs_listing(session.existing_store, where, limit)
    if as_json:
        _json_out(rows)
        return EXIT_OK
    if not rows:
        echo(f'no run matches "{where}"' if where else "no runs yet; try: tui-agent run hello")
        return EXIT_OK
    _table((("ID", 11), ("AGENT", 18), ("STATUS", 24), ("STEP", -11), ("ATT", -3), ("COST", -8), ("TOKENS", -11),
            ("WORKER", 8), ("AGE", 0)),
           [(r["id"], r["agent"], r["status"] + (f": {r['reason']}" if r["reason"] else ""),
             step_cell(r["current_step"], r["total_steps"], r["tasks"]), r["attempt"],
             spent(r["cost_usd"], r["unpriced_calls"], r["possibly_billed_usd"]), tokens(r), _holder(r),
             _age(r["created_at"])) for r in rows])
    for r in rows:   # under the table: each run waiting to retry, its next try and how the last one failed
        if r["retry"]:
            echo(f"{r['id']} waits to retry: {_retrying(r['retry'])}")
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
def spend(session: Session, since: str | None, by: str, utc: bool, reprice: bool, as_json: bool) -> int:
    """What the model calls cost, with their tokens, calls and runs: a row per day, agent or model. Each call
    counts what its run's budget counted (the price when it was answered); what calls in flight when their
    worker died may have been billed, and calls without a price, are shown apart, never as zero."""
    at = now()
    start = filters.instant(since, at, f"--since {since}") if since else None
    done = spend_report(session.existing_store, at, by, start, utc, reprice)
    if as_json:
        _json_out(done)
        return EXIT_OK
    days = "UTC days" if utc else "local days"
    prices = f"priced by today's table ({PRICES_DATE})" if reprice else "as charged"
    echo(f"spend by {by}{f' since {since}' if since else ''} ({days}; {prices})")
    if not done["rows"]:
        echo("no model calls" + (f" since {since}" if since else " yet"))
        return EXIT_OK
    rows = [*done["rows"], {by: "total", **done["total"]}]
    _table(((by.upper(), max(10, *(len(r[by]) for r in rows))), ("COST", -8), ("POSSIBLY BILLED", -15),
            ("CALLS", -6), ("RUNS", -5), ("INPUT", -8), ("CACHE READ", -10), ("CACHE WRITE", -11), ("OUTPUT", -8)),
           [(r[by], spent(r["cost_usd"], r["unpriced_calls"], 0), usd(r["possibly_billed_usd"] or None),
             r["calls"], r["runs"], count(r["input_tokens"]), count(r["cache_read_tokens"]),
             count(r["cache_write_tokens"]), count(r["output_tokens"])) for r in rows])
    return EXIT_OK


def _retrying(wait: dict) -> str:
    return retry_said(wait, now()) + (f"; the last: {wait['last_error']}" if wait["last_error"] else "")


def _holder(run: dict) -> str:
    """The WORKER cell of `ls`: a worker whose process is gone says so, and when its run is claimable."""
    if run["holder_gone"]:
        return f"{run['worker']}, gone; {claimable(run['claimable_in_s'])}"
    return run["worker"] or "-"


SHOWN_ENDS = 20   # steps `show` prints at each end of a run; --steps all prints every one


def _json_streamed(summary: dict, lists: dict[str, Iterator[dict]]) -> None:
    """The report as one JSON object in REPORT_KEYS order, the long lists written an item at a time, so memory
    does not grow with the run's length (the same document `_json_out` would write, compact inside lists)."""
    def dumped(value: Any, indent: int | None = 2) -> str:
        try:
            return json_text(value, indent=indent, allow_nan=False)
        except ValueError:   # a NaN stored before input was read strictly: written as null
            return json_text(finite(value), indent=indent, allow_nan=False)

    out = sys.stdout
    out.write("{")
    for i, key in enumerate(REPORT_KEYS):
        out.write(("," if i else "") + f"\n  {json.dumps(key)}: ")
        if key not in lists:
            out.write(dumped(summary[key]).replace("\n", "\n  "))
            continue
        out.write("[")
        for j, item in enumerate(lists[key]):
            out.write(("," if j else "") + "\n    " + dumped(item, None))
        out.write("\n  ]")
    out.write("\n}\n")
    out.flush()


def _step_line(s: dict) -> str:
    cost = f"  {usd_exact(s['cost_usd'])}" if s["cost_usd"] else "  cost unknown" if s["kind"] == "model" \
        and s["cost_usd"] is None else ""
    return f"  {s['position']:>4}  {s['name']:<28} {s['kind']:<7}{s['duration_ms']:>10.1f} ms{cost}"


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
        _json_streamed(report, report_lists(store, report["run"]))
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
    total = f"/{cp['total_steps']}" if cp.get("total_steps") else ""
    echo(f"step      {cp.get('current_step', 0)}{total} (generation {r['generation']})")
    if wait := retry_wait(r, cp.get("step_attempts")):
        echo(f"retry     {_retrying(wait)}; tui-agent resume {r['id']} tries now")
    elif r["error"]:
        echo(f"error     {r['error']}")
    if r["traceback"]:
        echo(f"raised at {innermost(r['traceback'])}  (every frame: show --json)")
    if r["result"] is not None:
        echo(f"result    {json_text(r['result'])}")
    budget = report["budget"]
    echo("budget    " + "  ".join(_usage(name, d) for name, d in budget["dimensions"].items()
                                  if d["used"] or d["limit"]) + _unpriced(budget))
    if bounds := _bounds(budget):
        echo(f"bounds    {bounds}")
    from ..forecast import sentence as forecast_sentence

    if ahead := forecast_sentence(budget["forecast"]):
        echo(f"forecast  {ahead}")
    if stop := budget_stop(store, r["id"], raise_with="tui-agent resume {run} --budget {dimension}=VALUE"):
        echo(f"stopped   {stop}")
    first, total, last = step_ends(store, r, SHOWN_ENDS)
    if total:
        echo("\nsteps")
        for s in steps_of(store, r) if all_steps else first:
            echo(_step_line(s))
        if not all_steps and total > len(first) + len(last):
            between = total - len(first) - len(last)
            echo(f"  … {between:,} more step{'s' * (between != 1)} (show {r['id']} --steps all prints every one)")
        for s in [] if all_steps else last:
            echo(_step_line(s))
    lists = report_lists(store, r)
    _section("model calls", lists["model_calls"], lambda c: f"  {c['position']:>4}  {c['name']:<20} #{c['call']}  "
             f"{c['provider']} {c['model']}  " + _call_state(c))
    _section("effects", lists["effects"], lambda e: f"  {e['position']:>4}  {e['name']:<20} {e['state']:<10} "
             f"attempts {e['attempts']}  key {e['key']}")
    echo("\nevents")
    _section(None, lists["events"], lambda e: f"  {e['at']}  {e['message']}")
    return EXIT_OK


def _section(title: str | None, items: Iterator[dict], line: Callable[[dict], str]) -> None:
    """A list printed as it is read (a page at a time), under its title when it has an item."""
    for i, item in enumerate(items):
        if i == 0 and title:
            echo(f"\n{title}")
        echo(line(item))


def _setting_option(name: str):
    from ..sim.settings import CHOICES, FLAGS, Settings

    default = getattr(Settings(), name)
    return click.option(FLAGS[name], name, type=click.Choice(list(CHOICES[name])), default=default, show_default=True)


@cli.command()
@click.option("--headless", is_flag=True, help="Execute the scenario once and print what happened (no screen).")
@click.option("--table", "table", is_flag=True,
              help="Print the lessons (the document's steps, then the further ones) x every crash point as Markdown.")
@click.option("--all", "whole", is_flag=True, help="With --table: every combination of the settings.")
@_setting_option("saving")
@_setting_option("key")
@_setting_option("service")
@_setting_option("after_crash")
@_setting_option("crash_at")
@_setting_option("restart_after")
@click.option("--person", type=click.Choice(["happened", "not-done"]), default=None,
              help="Headless: the person's answer whenever the run waits for one (without it: reported waiting).")
@json_option("Headless: the outcome as JSON: counts, workers (timeline, effect_states), effect_state, why")
def simulate(headless: bool, table: bool, whole: bool, person: str | None, as_json: bool, **chosen: str) -> int:
    """Crash it yourself: the nightly report on the real runtime, in a throw-away store, with a crash where
    you choose (the Simulator screen; never touches your runs). A setting left out is the lesson's default:
    save nothing, no key, a service that dedupes, send again on doubt, crash after the send, worker 2 now."""
    from ..sim import Settings
    from ..sim import simulate as execute_scenario
    from ..sim.explain import why

    if table:
        from ..sim.table import lessons_matrix, markdown, whole_matrix

        rows = list(whole_matrix() if whole else lessons_matrix())
        with click.progressbar(length=len(rows), label="executing", file=sys.stderr) as bar:
            text = markdown(iter(rows), progress=lambda done: bar.update(1))
        echo(text, nl=False)
        return EXIT_OK
    settings = Settings(**chosen)
    if not (headless or as_json or person):   # asking for JSON or a person's answer means headless
        from ..screens.simulator import SimulatorApp

        SimulatorApp(settings).run()
        return EXIT_OK
    outcome = execute_scenario(settings, person)
    if as_json:
        _json_out(outcome.as_json())
        return EXIT_OK
    for n, rows in enumerate(outcome.workers, 1):
        echo(f"worker {n}" + ("" if n == 1 else f" (starts {settings.describe('restart_after')})"))
        for row in rows or []:
            if row.fate in ("ledger", "found"):   # the email's row in the effect ledger, and the key it holds
                echo(f"  {row.fate:<13} {row.step} {row.detail}  ({'key ' + row.key if row.key else 'no key'})")
            else:
                echo(f"  {row.fate:<13} {row.step}" + (f"  ({row.detail})" if row.detail else ""))
        if not rows:
            echo("  (nothing to do)")
    echo("  ".join(f"{name.replace('_', ' ')} {count}" for name, count in outcome.counts.items()))
    echo(why(outcome))
    return EXIT_OK


@cli.command()
@click.argument("run_ref", metavar="RUN", required=False, type=TEXT, shell_complete=completion.runs)
@click.option("--agent", "agent_name", default=None, type=TEXT, help="With --last: whose runs to replay.",
              shell_complete=completion.agents)
@click.option("--last", type=Whole(min=1), default=None, metavar="N",
              help="Replay the agent's N most recently finished runs (a check before releasing new code).")
@click.option("--agents", "more_modules", multiple=True, type=VERBATIM, metavar="MODULE|FILE.py",
              help="The agent code to replay with, as the global --agents.")
@click.option("--timeout", "timeout_s", type=Whole(1, 86_400), default=60, show_default=True,
              metavar="SECONDS", help="Stop the agent's code after this long (exit 1); with --last, all the runs' together.")
@click.option("--on-copy", is_flag=True, hidden=True)   # the child replay_copy starts: --db is the copy
@json_option("One JSON object (an array with --last)")
@click.pass_obj
def replay(session: Session, run_ref: str | None, agent_name: str | None, last: int | None,
           more_modules: tuple[str, ...], timeout_s: int, on_copy: bool, as_json: bool) -> int:
    """Run the agent's current code against RUN's journal: every step, model call, tool and effect is
    answered from the journal, none is executed. The code runs on a copy of the database (its --db,
    TUI_AGENT_DB and data folder name the copy's), in a process of its own stopped after --timeout. Exit 0
    when the code reproduces the run, 1 at the first divergence (a renamed call, another model request,
    other step inputs, another result, a write of its own to the database) or when it ran out of time, 2 on
    bad input."""
    from ..replay import replay_last, replay_run
    from ..replay_copy import replay_on_copy

    by_agent = agent_name is not None and last is not None
    if (run_ref is None) != by_agent or (not by_agent and (agent_name or last)):
        raise UserError("give a RUN, or --agent NAME --last N")
    session.agent_modules += modules_named(more_modules)
    store = session.existing_store
    if not on_copy:
        chosen = [run_ref] if run_ref else ["--agent", agent_name, "--last", str(last)]
        return replay_on_copy(store, session.agent_modules, [*chosen, *(["--json"] if as_json else [])],
                              timeout_s, run_ref or f"{agent_name}'s last {last} runs")
    done = ([replay_run(store.path, session.registry, run_ref, on_copy=True)] if run_ref else
            replay_last(store.path, session.registry, agent_name, last, on_copy=True))
    if as_json:
        _json_out([r.to_json() for r in done] if run_ref is None else done[0].to_json())
    else:
        if not done:
            echo(f"{agent_name} has no finished runs to replay")
        for r in done:
            echo(f"{r.run_id} {r.agent}: " + (f"reproduced ({r.answered} of {r.entries} entries; {r.note})"
                                             if r.reproduced else
                                             f"DIVERGED at #{r.divergence.position} ({r.divergence.kind}): "
                                             f"{r.divergence.message}"))
            for line in () if r.reproduced else r.divergence.diff:
                echo(f"    {line}")
    return EXIT_OK if all(r.reproduced for r in done) else EXIT_NOT_SUCCEEDED


# -- the harness agent (agents/harness.py) --------------------------------------------------------------------


@cli.group("harness")
def harness_group() -> None:
    """The harness agent's own commands: start a repository's plan, add a rule, raise a ceiling."""


@harness_group.command("init")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--commit", is_flag=True, help="Commit the files written (otherwise it prints the git commands).")
def harness_init(folder: Path, commit: bool) -> int:
    """Write a starter PLAN.md, PROGRESS.md and RULES.md into the repository FOLDER is in (those it lacks);
    nothing is committed unless --commit: the run starts from the committed plan."""
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
    """Raise a harness run's own ceilings, then resume it if it waits for you (parked limit:iterations or
    limit:files_changed)."""
    limits = {k: v for k, v in (("max_iterations", max_iterations), ("max_files_changed", max_files_changed))
              if v is not None}
    if not limits:
        raise UserError("give --max-iterations N, --max-files-changed N, or both")
    echo(operate.harness_limit(session.existing_store, run_ref, limits))
    return EXIT_OK


def _call_state(call: dict) -> str:
    if call["state"] == "died":
        held = call["reserved_usd"]
        return "in flight when the worker died, possibly billed " + (usd_exact(held) if held is not None else
                                                                     "(cost unknown)")
    if call["state"] == "in_flight":
        return f"in flight: {call['tokens'] or 0} tokens, {call['elapsed_s']:.1f} s"
    if call["state"] == "failed":
        return f"failed: {call['error']}"
    cost = usd_exact(call["cost_usd"]) if call["cost_usd"] is not None else COST_UNKNOWN
    return f"answered {call['request_id'] or ''} {call['tokens']} tokens {cost}".replace("  ", " ")


def _usage(name: str, d: dict) -> str:
    used = usd_exact(d["used"]) if name == "cost_usd" else f"{d['used']:g}"
    limit = "" if d["limit"] is None else (f"/${d['limit']:.2f}" if name == "cost_usd" else
                                           f"/{d['limit']:.0f}" if float(d["limit"]).is_integer() else f"/{d['limit']:g}")
    return f"{name.removesuffix('_usd')} {used}{limit}" + (" (default)" if d.get("default") else "")


def _bounds(budget: dict) -> str:
    """`show`'s line on how the run is bounded, when that is not just the ceilings on the budget line."""
    if budget["bounds"] == "unbounded":
        return "unbounded: this run opted out of the default ceilings; only the ceilings above (if any) hold"
    if budget["bounds"] == "legacy":
        return ("made before default ceilings: no default applies, so it is unbounded wherever no ceiling is "
                "shown; tui-agent resume RUN --budget NAME=VALUE sets one")
    return ""


def _unpriced(budget: dict) -> str:
    count = budget["unpriced_model_calls"]
    return f"  (cost unknown for {count} model call{'s' * (count != 1)})" if count else ""


def main() -> None:
    cli.main()
