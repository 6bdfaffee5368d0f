"""What a user writes: an `Agent` with its budget, retry policy and check."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from .plateau import Plateau

BUDGET_DIMENSIONS = ("steps", "model_calls", "input_tokens", "output_tokens", "cost_usd", "tool_calls",
                     "effects", "wall_s")


@dataclass(frozen=True)
class Budget:
    """Ceilings per dimension (None = unlimited), the soft threshold, and what exhaustion does."""

    steps: int | None = None
    model_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    tool_calls: int | None = None
    effects: int | None = None
    wall_s: float | None = None
    soft: float = 0.7
    on_exhaust: str | dict[str, str] = "park"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with full jitter, for temporary errors only. A back-off longer than
    `wait_over_s` puts the run in `waiting` (reason retry) instead of holding a worker."""

    attempts: int = 3
    base_s: float = 1.0
    cap_s: float = 60.0
    wait_over_s: float = 30.0


@dataclass(eq=False)
class Agent:
    """A named, versioned definition: `run(ctx, request)` plus its budget, retries and check."""

    name: str
    run: Callable[..., Any]
    version: str = "1"
    budget: Budget = field(default_factory=Budget)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    check: Callable[..., bool] | None = None
    degrade: Callable[..., Any] | None = None
    script: Callable[..., Any] | None = None  # offline model replies: (messages, max_tokens, call_index) -> str
    plateau: Plateau | None = None
    description: str = ""
    journal_inputs: bool = False  # journal a digest of each step's arguments, so a replay can compare them

    @cached_property
    def code_version(self) -> str:
        """A hash of the source of the module that defines `run`, so a run can tell its code changed."""
        try:
            source = inspect.getsource(inspect.getmodule(self.run) or self.run).encode()
        except (OSError, TypeError):
            source = self.run.__code__.co_code
        return hashlib.sha256(source).hexdigest()[:12]
