"""Saved filters and schedules: filter save|ls|rm, schedule add|ls|rm|enable|disable|fire."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .. import completion, operate
from ..cli_types import TEXT, Number
from ..errors import UserError
from ..format import in_zone
from ..report import saved_filters_report, schedules_report
from ..runtime.schedule import GRACE_S as SCHEDULE_GRACE_S
from ..runtime.schedule import MISSED, OVERLAP
from ..states import EXIT_OK
from .group import Session, cli
from .options import input_option, json_option, model_option, parse_input
from .text import echo, json_out, print_table


def _listing(shown: list[dict[str, Any]], as_json: bool, empty: str, columns: tuple[tuple[str, int], ...],
             cells: Callable[[dict[str, Any]], tuple[object, ...]]) -> int:
    """`ls`'s output: the rows as JSON, or a table of each row's `cells`, or `empty` when there are none."""
    if as_json:
        json_out(shown)
    elif not shown:
        echo(empty)
    else:
        print_table(columns, [cells(r) for r in shown])
    return EXIT_OK


@cli.group("filter")
def filter_group() -> None:
    """Saved filters: a name for the words of a filter, which the TUI's palette offers on the runs list.

    The words are a filter's, such as status:failed agent:NAME since:3d."""


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
    return _listing(saved_filters_report(session.existing_store), as_json,
                    "no saved filters; save one with: tui-agent filter save NAME 'status:failed since:3d'",
                    (("NAME", 20), ("WORDS", 0)), lambda r: (r["name"], r["words"]))


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
def schedule_add(session: Session, name: str, *, agent: str, cron: str, tz: str, input_text: str, missed: str,
                 overlap: str, grace: float, model: str) -> int:
    """Add a schedule; it counts fires from now on."""
    model, _ = session.settings.agent_defaults(session.registry, agent, model, ())
    row = operate.schedule_add(session.store, session.registry, name=name, agent=agent, cron=cron, tz=tz,
                               request=parse_input(input_text), missed=missed, overlap=overlap, grace_s=grace * 60,
                               model=model)
    echo(f"{name}: next fire {in_zone(row['next_fire_at'], tz).isoformat(timespec='seconds')}")
    return EXIT_OK


@schedule.command("ls")
@json_option("A JSON array")
@click.pass_obj
def schedule_ls(session: Session, as_json: bool) -> int:
    """List schedules with their next fire time in their zone."""
    return _listing(schedules_report(session.existing_store), as_json,
                    "no schedules; add one with: tui-agent schedule add NAME --agent A --cron '0 2 * * *'",
                    (("NAME", 18), ("AGENT", 16), ("CRON", 14), ("ZONE", 16), ("NEXT FIRE", 25), ("MISSED", 6),
                     ("OVERLAP", 7), ("MODEL", 10), ("LAST RUN", 0)),
                    lambda r: (r["name"], r["agent"], r["cron"], r["tz"],
                               r["next_fire"] if r["enabled"] else "disabled",
                               r["missed"], r["overlap"], r["model"], r["last_run_id"] or "-"))


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
    return _switched(session, name, True)


@schedule.command("disable")
@click.argument("name", type=TEXT, shell_complete=completion.schedules)
@click.pass_obj
def schedule_disable(session: Session, name: str) -> int:
    """Disable a schedule."""
    return _switched(session, name, False)


def _switched(session: Session, name: str, enabled: bool) -> int:
    operate.schedule_enable(session.existing_store, name, enabled)
    echo(f"{name}: {'enabled' if enabled else 'disabled'}")
    return EXIT_OK


@schedule.command("fire")
@click.argument("name", type=TEXT, shell_complete=completion.schedules)
@click.pass_obj
def schedule_fire(session: Session, name: str) -> int:
    """Fire a schedule now, the overlap policy still applying. Prints the run started, if any, and on stderr what
    happened (started, held until the previous run ends, or skipped)."""
    fired = operate.schedule_fire(session.existing_store, session.registry, name)
    if fired.disabled is not None:
        raise UserError(str(fired))
    for run_id in fired.started:
        echo(run_id)
    echo(str(fired), err=True)
    return EXIT_OK
