"""The durable engine: agents, the context they call, workers, leases and fences, the clock."""

from .agent import Agent, Budget, RetryPolicy
from .context import Context
from .plateau import Plateau
from .tools import Tool, tool

__all__ = ["Agent", "Budget", "Context", "Plateau", "RetryPolicy", "Tool", "tool"]
