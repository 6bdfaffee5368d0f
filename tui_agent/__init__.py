"""tui-agent: a terminal UI and local runner for long-running AI agents."""

from importlib.metadata import PackageNotFoundError, version

from .runtime import Agent, Budget, Context, Plateau, RetryPolicy, Tool, tool

try:
    __version__ = version("tui-agent")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["Agent", "Budget", "Context", "Plateau", "RetryPolicy", "Tool", "__version__", "tool"]
