"""The command line: `tui-agent` and `python -m tui_agent`."""

from .runs import ProgressLine, cli, main

__all__ = ["ProgressLine", "cli", "main"]
