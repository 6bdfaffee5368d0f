"""Options several commands share, and reading what they are given: JSON input, a file, a yes at the terminal."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..cli_types import TEXT, VERBATIM
from ..errors import UserError
from ..strict_json import parse_json
from .text import echo


def parse_input(text: str) -> Any:
    source = "--input"
    if text.startswith("@"):
        path = Path(text[1:])
        source = f"--input {text}"
        text = read_text(path, source)
    return parse_json(text, source, " or @file.json")


def read_text(path: Path, source: str) -> str:
    """A file named on the command line (any name the file system allows), as UTF-8 text."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{source}: cannot read {path} ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{source}: {path} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") \
            from None


def json_option(shape: str):
    """`--json` on every command that prints rows: the shape (report.py's) is a stable contract."""
    return click.option("--json", "as_json", is_flag=True, help=f"{shape} (a stable contract).")


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


def asked_first(question: str, refusal: str) -> bool:
    """Whether the person at the terminal says yes to `question` (on stderr, no by default; "nothing changed" when
    not). Off a terminal nobody can answer, so the action is refused with `refusal`, which names --yes."""
    if not sys.stdin.isatty():
        raise UserError(refusal)
    if click.confirm(question, default=False, err=True):
        return True
    echo("nothing changed", err=True)
    return False
