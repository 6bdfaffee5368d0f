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
    """The most a run may use of each dimension, checked before every journaled call it makes.

    A dimension left None gets its default ceiling, unless `unbounded=True`. The defaults are 10,000 steps,
    24 hours of running time, $5 over priced model calls and 2 million input tokens. A run records its ceilings
    when it is created, so they stay fixed for its life. A person can raise them with `resume --budget`.

    Args:
        steps: Journaled calls of any kind.
        model_calls: Calls to the model.
        input_tokens: Input tokens over all model calls. A new call must fit its prompt's estimate under it.
        output_tokens: Output tokens over all model calls. A new call must fit its `max_tokens` under it.
        cost_usd: Dollars over priced model calls. A ceiling set here refuses a model without a price.
        tool_calls: Tool calls in `ctx.agent_loop`.
        effects: Calls to `ctx.effect`.
        wall_s: Seconds of running time. Time spent waiting, with no worker holding the run, does not count.
        soft: The fraction of a ceiling at which the run is warned. Each dimension writes one `budget` event
            when it passes, and the first to pass sets `ctx.budget.soft_exceeded` and calls the agent's
            `degrade` hook.
        on_exhaust: What a call that would pass a ceiling does to the run. `park` waits for `resume`,
            `escalate` waits for a person, `stop` fails the run. A dict gives one action per dimension, and
            `park` for the others.
        unbounded: Opt out of the default ceilings, so only the ceilings set here hold.
    """

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
        """Return the budget as a plain dict of its fields, as a run's budget JSON starts out."""
        return asdict(self)


def run_budget(budget: Budget, overrides: dict | None = None) -> dict:
    """The budget JSON a new run records. It starts from the agent's `budget`, then applies `overrides` (`--budget`;
    `unbounded` True opts the run out), then a default ceiling for each dimension in `DEFAULT_CEILINGS` still unset.

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
    """A run's budget JSON after `resume --budget`.

    Each ceiling given replaces the run's and is no longer a default. `unbounded` removes the default ceilings
    still in place (the ones the run or a person set stay) and records the opt-out. A run made before defaults
    existed gains no `defaults` list."""
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
    """How a run's budget JSON bounds it: "defaults", "unbounded" or "legacy".

    "defaults": made since every run is bounded by default, so unset dimensions have default ceilings.
    "unbounded": opted out. "legacy": made before defaults existed, unbounded wherever it set no ceiling."""
    if limits.get(UNBOUNDED):
        return "unbounded"
    return "defaults" if "defaults" in limits else "legacy"


@dataclass(frozen=True)
class RetryPolicy:
    """How a step that raised a temporary error is tried again, with exponential back-off and full jitter.

    Only temporary errors are retried: `TemporaryError`, `TimeoutError` and `ConnectionError`. Any other
    exception fails the step at once. An agent without a policy of its own gets `DEFAULT_RETRY`, which is this
    class's defaults with `cap_s=300` and six hours of patience.

    Args:
        attempts: How many attempts a temporary error gets, the first included.
        base_s: The back-off ceiling after the first failed attempt. It doubles after each later one.
        cap_s: The most the back-off ceiling grows to. Each wait is drawn uniformly below the ceiling.
        wait_over_s: A back-off longer than this puts the run in `waiting` with reason `retry`, so no worker
            is held while it waits. A shorter one waits in the worker.
        patience_s: How long an error saying the service is not reachable is retried past `attempts`.
            `NotReachable`, `ConnectionError` and `TimeoutError` are such errors. When the step has been failing
            for longer, the run is parked with reason `environment`, never failed, and `resume` tries again
            once the service is back. None means no patience, so `attempts` alone decides.
    """

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
    """An agent's code and the rules its runs keep, registered under a name that runs are started by.

    A module makes its agents known by holding `Agent` objects at its top level, and `--agents MODULE` loads
    it. `tui-agent run NAME` and `ctx.start_run` start a run of one, and any worker that loads the module can
    carry it on.

    Args:
        name: The name runs are started by.
        run: The agent's code, called as `run(ctx, request)` with a `Context` and the run's request. What it
            returns is the run's result, which must be JSON. It is called again from the start on every claim,
            and each journaled call it makes returns its recorded result.
        version: A label of your own, shown by `tui-agent agents` and in the event a changed version writes.
        budget: The run's ceilings. See `Budget`.
        retry: How temporary errors are retried. None means `DEFAULT_RETRY`, which waits out a service that is
            not reachable for six hours.
        check: Called as `check(ctx, result)` after `run` returns. It returns a bool, or a pair of the bool
            and why. The run succeeds only when it passes, and a check that raises fails the run.
        degrade: Called as `degrade(ctx)` once, when the run first passes its budget's soft threshold. It may
            call `ctx.switch_model` to go on with a cheaper model.
        script: Offline model replies, called as `script(messages, max_tokens, call_index)`. It returns the
            reply's text, or a reply dict that may hold tool calls. It answers a run started with `--model scripted`,
            and a run on the default model when the worker has no `ANTHROPIC_API_KEY`.
        plateau: When the run's reports count as no progress. None means `DEFAULT_PLATEAU`.
        description: One line, shown by `tui-agent agents`.
        journal_inputs: Journal a digest of each step's arguments, so `tui-agent replay` can tell when a step is
            called with other arguments.
        step_timeout_s: How long a step, a model call or a tool may run. One still running then counts as a
            failed attempt (`StepTimedOut`, a temporary error) and its run is handed back to be retried.
            None means no deadline.
    """

    name: str
    run: Callable[..., Any]
    version: str = "1"
    budget: Budget = field(default_factory=Budget)
    retry: RetryPolicy | None = None   # None: DEFAULT_RETRY, with its patience for a service not reachable
    check: Callable[..., bool | tuple[bool, str | None]] | None = None
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
