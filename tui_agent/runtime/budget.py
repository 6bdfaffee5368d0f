"""The run's budget as the runtime keeps it: ceilings checked before each journaled call, and what exhaustion does.

A model call reserves its worst case first; a soft threshold is crossed once per dimension; the dimension's
action on exhaustion is stop, park or escalate. The meter applies no defaults of its own: they are written into
the budget JSON at creation (runtime/agent.py `run_budget`), listed under `defaults`, which the meter only names
when it refuses; a run made before defaults existed stays unbounded where unset."""

from __future__ import annotations

from ..states import budget_reason
from ..store.journal import NO_USAGE, Usage
from .agent import BUDGET_DIMENSIONS
from .outcomes import ACTIONS, Suspend


def _show(dimension: str, value: float) -> str:
    if dimension == "cost_usd":
        return f"${value:.4f}"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"   # 2000000, not 2e+06


_PER_STEP = ("steps", "wall_s")   # what a plain step (no usage) adds to


class BudgetMeter:
    """What the run has used and may still use, as an agent reads it from `ctx.budget`.

    The dimensions are those of `Budget`: `steps`, `model_calls`, `input_tokens`, `output_tokens`, `cost_usd`,
    `tool_calls`, `effects` and `wall_s`.

    Attributes:
        limits: The ceiling of each dimension, None where it has none.
        used: What the run has used of each dimension so far.
        defaults: The dimensions whose ceiling is the default one.
        soft: The fraction of a ceiling at which a dimension counts as past its soft threshold.
        soft_dimensions: Every dimension past its soft threshold so far.
        soft_exceeded: True from the point the first dimension passed its soft threshold, a sign to go easy.
    """

    def __init__(self, limits: dict, used: dict[str, float], soft_dimensions: list[str]) -> None:
        self.limits = {d: limits.get(d) for d in BUDGET_DIMENSIONS}
        self.defaults = frozenset(limits.get("defaults") or ())   # dimensions whose ceiling is the default
        self.soft = float(limits.get("soft") or 0.7)
        self._on_exhaust = limits.get("on_exhaust") or "park"
        self.used = used
        self.soft_dimensions = list(soft_dimensions)   # every dimension past its soft threshold so far
        self.soft_exceeded = False                     # true from the point the first crossing was recorded
        # precomputed for the per-step path: what each step must check
        self._steps_cap, self._wall_cap = self.limits["steps"], self.limits["wall_s"]
        self._soft_at = {d: self.soft * limit for d, limit in self.limits.items() if limit}
        self._watch([d for d in self._soft_at if d not in self.soft_dimensions])

    def _watch(self, dimensions: list[str]) -> None:
        """Keep the dimensions not past soft yet, and of those the ones a plain step moves. Every run has default
        ceilings on steps and running time, so each step checks them: two comparisons, not one per ceiling."""
        self._not_soft_yet = dimensions
        self._per_step = [d for d in dimensions if d in _PER_STEP]

    def action(self, dimension: str) -> str:
        action = self._on_exhaust if isinstance(self._on_exhaust, str) else self._on_exhaust.get(dimension, "park")
        return action if action in ACTIONS else "park"

    def remaining(self, dimension: str) -> float | None:
        """Return what is left of `dimension`'s ceiling, or None when it has none."""
        limit = self.limits[dimension]
        return None if limit is None else limit - self.used[dimension]

    def admit_step(self, wall_s: float) -> None:
        """Every new journaled call: one more step, and the running time so far."""
        if self._steps_cap is not None and self.used["steps"] + 1 > self._steps_cap:
            self.admit(steps=1)
        if self._wall_cap is not None and self.used["wall_s"] + wall_s > self._wall_cap:
            self.admit(wall_s=wall_s)

    def admit(self, **needs: float) -> None:
        """Refuse (with the dimension's action) if any need would cross a hard ceiling."""
        for dimension, need in needs.items():
            limit = self.limits[dimension]
            if limit is not None and self.used[dimension] + need > limit:
                of = "the default " if dimension in self.defaults else ""
                self.refuse(dimension, f"{_show(dimension, self.used[dimension])} used of {of}"
                                       f"{_show(dimension, limit)}, the next call needs {_show(dimension, need)}")

    def refuse(self, dimension: str, why: str) -> None:
        raise self.refusal(dimension, why)

    def refusal(self, dimension: str, why: str) -> Suspend:
        """What `refuse` raises: the run ends its turn with the dimension's action."""
        action = self.action(dimension)
        raise_it = f"raise it with tui-agent resume RUN --budget {dimension}=VALUE"
        if dimension in self.defaults:
            raise_it += f", or set Budget({dimension}=...) on the agent"
        return Suspend(ACTIONS[action], budget_reason(dimension),
                       f"budget {dimension} exhausted: {why} ({action}); {raise_it}")

    def charge(self, usage: Usage, wall_s: float) -> list[str]:
        """Add what an entry used; returns the dimensions that crossed their soft threshold just now."""
        used = self.used
        used["steps"] += 1
        used["wall_s"] += wall_s
        if usage is not NO_USAGE:   # most entries are plain steps
            self.hold(usage)
            used["effects"] += usage.effects
            used["tool_calls"] += usage.tool_calls
        watched = self._per_step if usage is NO_USAGE else self._not_soft_yet
        if not watched:
            return []
        soft_at = self._soft_at
        crossed = [d for d in watched if used[d] >= soft_at[d]]
        if crossed:
            self._watch([d for d in self._not_soft_yet if d not in crossed])
        return crossed

    def hold(self, usage: Usage, sign: int = 1) -> None:
        """Count a model call's usage (or, `sign` -1, give back a reservation nothing was billed for)."""
        used = self.used
        used["model_calls"] += sign * usage.model_calls
        used["input_tokens"] += sign * usage.input_tokens
        used["output_tokens"] += sign * usage.output_tokens
        used["cost_usd"] += sign * usage.cost_usd

    def describe(self, dimension: str) -> str:
        limit = self.limits[dimension]
        assert limit is not None   # only a dimension with a ceiling has a soft threshold to pass
        of = "the default " if dimension in self.defaults else ""
        return (f"budget {dimension} passed its soft threshold: {_show(dimension, self.used[dimension])} of "
                f"{of}{_show(dimension, limit)} ({self.used[dimension] / limit:.0%}, soft {self.soft:.0%})")
