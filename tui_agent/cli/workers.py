"""Commands that work runs and watch them: worker, workers, logs, tick and watch."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

import click

from .. import completion, operate
from ..cli_types import TEXT, VERBATIM, Number, Whole
from ..errors import UserError
from ..format import ago, claimable, held_by, skew
from ..report import held_by_gone, iso_times, workers_report
from ..runtime import traces
from ..runtime.clock import now
from ..runtime.liveness import label, on_this_host
from ..runtime.serve import GRACE_S, serve
from ..runtime.worker import DEFAULT_LEASE_S, worker_name
from ..services import notify
from ..states import EXIT_ENVIRONMENT, EXIT_OK, WorkerState
from ..store import default_path, notices
from ..store.host import process_alive
from ..store.workers import find_worker
from .group import Session, cli
from .options import json_option
from .runs import report_outcome
from .signals import stop_on_signals
from .text import echo, json_out, print_table


def _notify_options(command):
    """--notify and --remind-after, the same on `worker` and `tick`."""
    command = click.option(
        "--remind-after", type=Number(min=0), default=notify.REMIND_AFTER_H, show_default=True,
        metavar="HOURS", help="Remind once of a run that has needed a person this long (0: never).")(command)
    return click.option(
        "--notify", "notify_cmd", default=None, type=VERBATIM, metavar="CMD",
        help="Run CMD (split like shell words, run without a shell) once per event that needs a person, the "
             "event as JSON on stdin; each event goes to one process's CMD.")(command)


def _attendant(name: str, notify_cmd: str | None, remind_after: float) -> notify.Attendant:
    command = notify.parse_command(notify_cmd) if notify_cmd is not None else None
    return notify.Attendant(name, command, remind_after_s=remind_after * 3600 if remind_after else None)


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
def worker(session: Session, once: bool, *, concurrency: int, lease: float, grace: float, name: str | None,
           log_file: str | None, notify_cmd: str | None, remind_after: float) -> int:
    """Claim due runs and work them, until stopped or, with --once, until none is due.

    SIGTERM and SIGINT stop it. Due runs of an agent it does not know are said once per agent (with --once:
    exit 4, after working the rest)."""
    from .. import worker_log

    name = name or worker_name()
    strangers: list[str] = []
    attendant = _attendant(name, notify_cmd, remind_after)
    log = worker_log.place(log_file) if log_file else None
    if log is not None:   # first: a database that stops the worker is said in its log too
        worker_log.keep(log, name, session.db or default_path())
    worker_log.say_retries()
    store = session.store  # validates the database before anything starts
    stop = stop_on_signals()
    if not once:
        echo(f"{name}: working {store.path} (concurrency {concurrency}, lease {lease:g}s)"
             + (f", its log {log}" if log else "") + "; SIGTERM or ctrl+c stops it", err=True)
    outcomes, left_behind, spent, restart = serve(
        store.path, session.durability, registry=session.registry, name=name, concurrency=concurrency, lease_s=lease,
        once=once, grace_s=grace, stop=stop, on_outcome=report_outcome, attendant=attendant,
        on_stranger=_saying(strangers), log=None if log is None else str(log),
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
        if restart:
            os.execv(sys.executable, _again(sys.orig_argv, name))   # a new image: those threads are gone
        os._exit(code)
    return code


def _again(argv: list[str], name: str) -> list[str]:
    """This process's command line, to run again as the same worker: with its name, when it was given none."""
    named = any(arg == "--name" or arg.startswith("--name=") for arg in argv)
    return argv if named else [*argv, "--name", name]


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
    """List workers, the runs each holds, lease time left and fence. A heartbeat stamped in the future, by a worker
    whose clock runs ahead, reads "clock ahead", never as a negative age."""
    at = now()
    listed = workers_report(session.existing_store, at)
    rows = [row for row in listed if show_all or row["state"] != WorkerState.STOPPED]
    if as_json:
        json_out([iso_times(row) | {"runs": [iso_times(r) for r in row["runs"]]} for row in rows])
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
    print_table((("NAME", 10), ("PID", -7), ("STATE", 11), ("HEARTBEAT", -15), *([("CLOCK", 14)] * shown),
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
    """Print a worker's log, found by its name, a prefix of it or its pid. The worker was started with --log, or by the
    TUI. With -f, follow it as tail -f does, ending after its last line once the worker's process has ended."""
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
    stop = stop_on_signals() if follow else threading.Event()   # ctrl+c ends -f quietly, exit 0

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


def _lease_left(worker: dict, held: dict) -> str:
    """A held run's lease as `workers` says it: never negative; a dead worker's run says when it is claimable."""
    if worker["state"] == WorkerState.DEAD:
        return claimable(held["claimable_in_s"])
    return f"lease {held['lease_left_s']:g}s" if held["lease_left_s"] > 0 else "lease expired, claimable now"


@cli.command()
@click.option("--work", is_flag=True, help="Then work every due run until none is due (sleeps that ended, retries).")
@_notify_options
@click.pass_obj
def tick(session: Session, work: bool, notify_cmd: str | None, remind_after: float) -> int:
    """Fire due schedules (and with --work, work due runs), then exit: for cron or a systemd timer."""
    attendant = _attendant(f"tick-{worker_name()}", notify_cmd, remind_after)
    store = session.store
    strangers: list[str] = []
    stop = stop_on_signals()   # as a worker: the step in hand finishes, the notices not sent are handed back
    for run_id in operate.schedule_tick(store, session.registry):
        echo(f"started {run_id}", err=True)
    for run_id in operate.requeue_released(store):
        echo(f"queued {run_id} again: the worker whose send it waited for has let go", err=True)
    if work:
        outcomes, left_behind, *_ = serve(store.path, session.durability, registry=session.registry,
                                          name=worker_name(), once=True, stop=stop, on_outcome=report_outcome,
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
    """Print one line each time a run comes to need a person or is reminded of, until stopped with ctrl+c.

    A call whose need has passed when it is read (decided, resumed, ended) is not printed; with --json it is
    printed marked superseded."""
    store = session.existing_store
    cursor = notices.last_id(store) if after_id is None else after_id
    stop = stop_on_signals()   # either ends it quietly, exit 0
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
