"""tui-agent: a terminal UI and local runner for long-running AI agents."""

from .errors import EffectDeclined, EffectNotDone, NotReachable, ParkRun, PermanentError, TemporaryError
from .runtime import Agent, Budget, Context, Plateau, RetryPolicy, Tool, tool
from .runtime.effects import StaleAttempt

__all__ = ["Agent", "Budget", "Context", "EffectDeclined", "EffectNotDone", "NotReachable", "ParkRun", "PermanentError",
           "Plateau", "RetryPolicy", "StaleAttempt", "TemporaryError", "Tool", "__version__", "tool"]


def __getattr__(name: str) -> str:
    """`__version__`, read from the installed package's metadata when it is asked for.

    Importing importlib.metadata costs a command's start some 50 ms that most commands never use."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tui-agent")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0"
