"""The command line, `tui-agent` and `python -m tui_agent`: the group and its commands, a module per audience.

Importing a module registers its commands on the group; docs/architecture.md's module map says which holds which."""

from . import decisions, harness, lessons, runs, schedules, upkeep, workers
from .group import cli, main

COMMANDS = (runs, decisions, workers, upkeep, schedules, lessons, harness)   # the modules whose commands `cli` has

__all__ = ["cli", "main"]
