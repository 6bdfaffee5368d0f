"""The `tui-agent` group: its global options, `Session`, one-line errors, and the TUI it opens (no command, demo)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .. import config, operate
from ..cli_types import VERBATIM
from ..errors import TuiAgentError
from ..runtime.registry import Registry, load_registry, modules_named
from ..states import EXIT_OK, EXIT_USAGE
from ..store import DatabaseError, Store, artifacts, default_path, open_store
from ..store.environment import stop_for
from .text import echo

OPENED: list[Store] = []  # the database this process opened, for naming it in a one-line error


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
            stop = OPENED[-1].stopped(e) if OPENED else stop_for(e, Path("the database"))
            if stop is None:
                raise
            _fail(str(stop), stop.exit_code)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def _fail(message: str, code: int) -> None:
    echo(f"tui-agent: {message}", err=True)
    sys.exit(code)


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
            OPENED.append(self._store)
        return self._store

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = load_registry(self.agent_modules)
            self.settings.check_agents(self._registry.names())
        return self._registry


def _given_db(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an empty --db or TUI_AGENT_DB, which is a mistake rather than a wish for the default database. A script's
    unset variable is the usual cause. click reads an empty variable as unset, so it is looked at here."""
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
    assert isinstance(ctx.command, OneLineErrors)   # the group's class
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
    app = TuiAgentApp(db_path, session.durability, registry=session.registry, agent_modules=sources,
                      theme=None if theme is None else theme.value)
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


def main() -> None:
    cli.main()
