"""Shell completion: the script for bash, zsh or fish (click's own), and what a Tab offers from the database.

Run ids, schedule and worker names come from the database the command line names so far (`--db`, else
TUI_AGENT_DB, else the per-user file), agent names from the agents it registers. Each lookup has DEADLINE_S;
whatever fails or is slow offers nothing and prints nothing, and nothing is ever created or migrated
(store/peek.py)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

import click
from click.shell_completion import CompletionItem, get_completion_class

from .errors import TuiAgentError
from .store import peek
from .store.db import default_path

SHELLS = ("bash", "zsh", "fish")
DEADLINE_S = 0.5
COMPLETE_VAR = "_TUI_AGENT_COMPLETE"   # click's name for it: `_{PROG}_COMPLETE`


def script(cli: click.Command, shell: str) -> str:
    """The completion script `shell` sources, as `_TUI_AGENT_COMPLETE={shell}_source tui-agent` prints it."""
    complete = get_completion_class(shell)
    assert complete is not None, shell   # click has a class for each of SHELLS
    return complete(cli, {}, "tui-agent", COMPLETE_VAR).source()


def runs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Run ids (the newest first), each with its agent and status; typed without its `r-`, too."""
    typed = [incomplete] if "r-".startswith(incomplete[:2]) else [incomplete, f"r-{incomplete}"]
    return _from_database(ctx, lambda conn: [
        CompletionItem(row[0], help=f"{row[1]} {row[2]}" + (f" ({row[3]})" if row[3] else ""))
        for prefix in typed for row in peek.starting_with(conn, peek.RUNS, prefix)])


def schedules(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Schedule names, each with its agent and cron expression."""
    return _from_database(ctx, lambda conn: [
        CompletionItem(name, help=f"{agent} '{cron}' {tz}")
        for name, agent, cron, tz in peek.starting_with(conn, peek.SCHEDULES, incomplete)])


def workers(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Worker names (the newest first), each with its pid and host."""
    return _from_database(ctx, lambda conn: [
        CompletionItem(name, help=f"pid {pid} on {host}" + (" (stopped)" if stopped_at is not None else ""))
        for name, pid, host, stopped_at in peek.starting_with(conn, peek.WORKERS, incomplete)])


def files(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The shell's own completion of file names (for an option that is a path kept as text)."""
    return [CompletionItem(incomplete, type="file")]


def agents(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The names of the agents the command would know, each with its description."""
    from .runtime.registry import load_registry, modules_named

    specs = ctx.find_root().params.get("agent_modules")
    modules = modules_named(specs if isinstance(specs, tuple) else ())   # not a tuple: its own check refused it

    def names() -> list[CompletionItem]:
        try:
            registry = load_registry(modules)
        except TuiAgentError:   # an --agents module that cannot be imported: the command will say so
            return []
        return [CompletionItem(a.name, help=a.description) for a in registry if a.name.startswith(incomplete)]

    return _within(names)


def _from_database(ctx: click.Context, read: Callable[[peek.Connection], list[CompletionItem]]) \
        -> list[CompletionItem]:
    where = ctx.find_root().params.get("db")
    if where is not None and not isinstance(where, str):   # a --db its own check refused (an empty one)
        return []

    def looked_up() -> list[CompletionItem]:
        try:
            with peek.glance(default_path() if where is None else where) as conn:
                return [] if conn is None else read(conn)
        except (sqlite3.Error, OSError, ImportError):   # ImportError: a URL without the postgres extra
            return []

    return _within(looked_up)


def _within(look: Callable[[], list[CompletionItem]]) -> list[CompletionItem]:
    """What `look` found, or nothing when it takes longer than DEADLINE_S.

    It runs on a thread of its own, left behind: a daemon, since the process exits as soon as the shell has its
    answer."""
    found: list[CompletionItem] = []
    thread = threading.Thread(target=lambda: found.extend(look()), name="completion", daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    return [] if thread.is_alive() else found
