"""Retries for temporary errors only: exponential back-off with full jitter, the attempt count
kept in the checkpoint (a crash between attempts does not reset it), and a long back-off turned
into a durable wait instead of a held worker."""

from __future__ import annotations

import random
from collections.abc import Callable

from ..errors import NotReachable, PermanentError, TemporaryError
from .agent import RetryPolicy

TEMPORARY = (TemporaryError, TimeoutError, ConnectionError)
UNREACHABLE = (NotReachable, TimeoutError, ConnectionError)


def is_temporary(error: BaseException) -> bool:
    """Timeouts, dropped connections and what a provider calls temporary; anything else fails at once."""
    return isinstance(error, TEMPORARY) and not isinstance(error, PermanentError)


def is_unreachable(error: BaseException) -> bool:
    """The service could not be reached or did not answer: what the policy's patience is for."""
    return isinstance(error, UNREACHABLE) and not isinstance(error, PermanentError)


def backoff_s(policy: RetryPolicy, attempt: int, rng: Callable[[], float] | None = None) -> float:
    """The wait after failed attempt `attempt` (1-based): uniform in [0, min(cap, base * 2^(attempt-1))]."""
    return (rng or random.random)() * min(policy.cap_s, policy.base_s * 2 ** (attempt - 1))
