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

# The ceiling of each dimension a run has unless its agent (or `--budget`) sets one: every run is bounded by
# default. Cost is counted over priced calls only (an unpriced model's cost cannot be kept); the input-token
# ceiling bounds every call, a model the price table does not know included.
DEFAULT_CEILINGS: dict[str, float] = {"steps": 10_000, "wall_s": 86_400, "cost_usd": 5.0, "input_tokens": 2_000_000}
UNBOUNDED = "unbounded"   # `--budget unbounded`, and the key of the run's budget JSON that records an opt-out


@dataclass(frozen=True)
class Budget:
    """Ceilings per dimension, the soft threshold, and what exhaustion does. A dimension left None gets its
    default ceiling (`DEFAULT_CEILINGS`: 10,000 steps, 24 h of running time, $5 over priced calls, 2 million
    input tokens) unless `unbounded=True`, which opts out of the defaults: only the ceilings set here hold."""

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
    unbounded: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def run_budget(budget: Budget, overrides: dict | None = None) -> dict:
    """The budget JSON a new run records: the agent's `budget`, then `overrides` (`--budget`; `unbounded`
    True opts the run out), then a default ceiling for each dimension in `DEFAULT_CEILINGS` still unset.

    The defaults are applied here, once, when the run is created, and written into the run's row with the
    list of dimensions they fill (`"defaults": ["steps", "wall_s", ...]`), rather than by the worker each
    time it loads the run. So a run's bounds are fixed for its life (a later release that changes the
    defaults does not move a run already made), every reader (`show`, `show --json`, the gauges, the budget
    meter, forks, which copy the row) sees the same ceilings without knowing the rule, and a run made before
    defaults existed (a budget JSON without `defaults` and `unbounded`) keeps working as it did: unbounded
    where it set nothing. An opted-out run records `"unbounded": true` and `"defaults": []`."""
    limits = {**budget.to_dict(), **(overrides or {})}
    limits[UNBOUNDED] = bool(limits.get(UNBOUNDED))
    defaults = [] if limits[UNBOUNDED] else [d for d in DEFAULT_CEILINGS if limits.get(d) is None]
    for dimension in defaults:
        limits[dimension] = DEFAULT_CEILINGS[dimension]
    limits["defaults"] = defaults
    return limits


def raised_budget(limits: dict, overrides: dict) -> dict:
    """A run's budget JSON after `resume --budget`: each ceiling given replaces the run's (and is no longer a
    default); `unbounded` removes the default ceilings still in place (the ones the run or a person set stay)
    and records the opt-out. A run made before defaults existed gains no `defaults` list."""
    after = {**limits, **{k: v for k, v in overrides.items() if k != UNBOUNDED}}
    defaults = [d for d in limits.get("defaults") or () if d not in overrides]
    if overrides.get(UNBOUNDED):
        for dimension in defaults:
            after[dimension] = None
        defaults, after[UNBOUNDED] = [], True
    if "defaults" in limits or overrides.get(UNBOUNDED):
        after["defaults"] = defaults
    return after


def bounds_of(limits: dict) -> str:
    """How a run's budget JSON bounds it: "defaults" (made since every run is bounded by default: unset
    dimensions have default ceilings), "unbounded" (opted out), or "legacy" (made before defaults existed:
    unbounded wherever it set no ceiling)."""
    if limits.get(UNBOUNDED):
        return "unbounded"
    return "defaults" if "defaults" in limits else "legacy"


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with full jitter, for temporary errors only. A back-off longer than
    `wait_over_s` puts the run in `waiting` (reason retry) instead of holding a worker.

    `attempts` bounds every temporary error. With `patience_s`, an error that says the service is not reachable
    (`NotReachable`, `ConnectionError`, `TimeoutError`) is retried past `attempts` for as long as the step has been
    failing less than `patience_s` seconds, its back-off growing to `cap_s`; when that runs out the run is parked
    with reason `environment` (resume it once the service is back), never failed. None: no patience, `attempts`
    alone decides. An agent without a policy of its own gets `DEFAULT_RETRY`, which has six hours of it."""

    attempts: int = 3
    base_s: float = 1.0
    cap_s: float = 60.0
    wait_over_s: float = 30.0
    patience_s: float | None = None


PATIENCE_S = 6 * 3600.0
# What an agent without a `retry` of its own gets: three quick attempts for any temporary error, and for a service
# that is not reachable, six hours of patience with a back-off growing to five minutes (a run waiting to retry is
# not running, so its `wall_s` does not bound the wait: the patience does).
DEFAULT_RETRY = RetryPolicy(cap_s=300.0, patience_s=PATIENCE_S)


# How long a step, a model call or a tool may run before its run is handed back to be retried elsewhere, unless
# the agent says otherwise (`Agent(step_timeout_s=...)`, None: no deadline) or the call does (`ctx.within`).
DEFAULT_STEP_TIMEOUT_S = 3600.0


@dataclass(eq=False)
class Agent:
    """A named, versioned definition: `run(ctx, request)` plus its budget, retries and check. `step_timeout_s`
    bounds each step, model call and tool call (runtime/deadlines.py): one still running then counts as a failed
    attempt (`StepTimedOut`) and its run is handed back; None means no deadline."""

    name: str
    run: Callable[..., Any]
    version: str = "1"
    budget: Budget = field(default_factory=Budget)
    retry: RetryPolicy | None = None   # None: DEFAULT_RETRY, with its patience for a service not reachable
    check: Callable[..., bool] | None = None
    degrade: Callable[..., Any] | None = None
    script: Callable[..., Any] | None = None  # offline model replies: (messages, max_tokens, call_index) -> str
    plateau: Plateau | None = None
    description: str = ""
    journal_inputs: bool = False  # journal a digest of each step's arguments, so a replay can compare them
    step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S

    @cached_property
    def code_version(self) -> str:
        """A hash of the source of the module that defines `run`, so a run can tell its code changed."""
        try:
            source = inspect.getsource(inspect.getmodule(self.run) or self.run).encode()
        except (OSError, TypeError):
            source = self.run.__code__.co_code
        return hashlib.sha256(source).hexdigest()[:12]
