"""The durable engine: agents, the context they call, workers, leases and fences, the clock."""

from .agent import Agent, Budget, RetryPolicy
from .context import Context

__all__ = ["Agent", "Budget", "Context", "RetryPolicy"]
