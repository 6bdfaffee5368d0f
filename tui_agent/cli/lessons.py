"""The simulator: crash the nightly report yourself, on a screen or headless."""

from __future__ import annotations

import sys

import click

from ..states import EXIT_OK
from .group import cli
from .options import json_option
from .text import echo, json_out


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
    """Crash it yourself: run the nightly report on the real runtime, with a crash where you choose. It runs in a
    throw-away store, as the Simulator screen does, and never touches your runs. A setting left out is the lesson's
    default: save nothing, no key, a service that dedupes, send again on doubt, crash after the send, worker 2 now."""
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
        json_out(outcome.as_json())
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
