"""Budget forecasts: a run's burn rate so far and where that rate takes it.

Pure functions, shared by `show`, `show --json` and the run screen's gauges. Rates are per charged step and per
minute of running time; projections count in positions. Why: docs/architecture.md, section 8, "Forecasts".
"""

from __future__ import annotations

from math import ceil, floor, log10

from ..format import count, duration_ms, usd, wall_s

# How a dimension is named in a sentence: "the cost ceiling", "the step ceiling".
NAMES = {"steps": "step", "model_calls": "model-call", "input_tokens": "input-token",
         "output_tokens": "output-token", "cost_usd": "cost", "tool_calls": "tool-call", "effects": "effect",
         "wall_s": "wall-time"}

SPARK = "▁▂▃▄▅▆▇█"
WINDOW = 20          # the runs table's sparkline: the last this many journal entries of a running run


def forecast(budget: dict, *, steps_done: int, position: int, total_steps: int | None, running_s: float,
             ended: bool = False) -> dict | None:
    """The burn rate of each dimension in `budget["dimensions"]` (report.budget_of's shape) that has a ceiling
    or was used, and where it leads; None before the first step (nothing to project from).

    `steps_done`: steps charged to the budget; `position`: where the run stands (the next position);
    `total_steps`: the declared total, if any; `running_s`: running time so far; `ended`: the run is over,
    so only its rates are given (every projection is None).

    Shape::

        {"steps_done": 10, "position": 10, "total_steps": 60,     # total None when none was declared
         "running_s": 2.5, "per_step_s": 0.25,                   # running time per step
         "remaining_steps": 50, "remaining_s": 12.5,             # None without a total, or once ended
                                                                 #   (remaining_s also without running time)
         "dimensions": {"cost_usd": {
             "per_step": 0.0011, "per_minute": 0.264,            # per_minute None while running_s is 0
             "at_finish": 0.066,                                 # used + per_step x remaining_steps, or None
             "at_ceiling": False,                                # used >= limit already: nothing projected
             "ceiling_step": 23},                                # first step (counted like positions, from 1)
             ...},                                               #   whose projected use reaches the limit;
         "first_ceiling": {"dimension": "cost_usd", "step": 23}} #   None past the declared total (a default
                                                                 #   ceiling: past the step ceiling), without
                                                                 #   a limit, at a rate of 0, or once ended
    """
    if steps_done <= 0:
        return None
    remaining = None if total_steps is None or ended else max(0, total_steps - position)
    minutes = running_s / 60
    steps_row = budget["dimensions"].get("steps") or {}
    # where the step ceiling stops the run unless a person raises it: a default ceiling (a safety net the agent
    # did not choose) projected past it is not named; "the wall-time ceiling at step 1,010,466,558" is noise
    last_step = (position + max(0, steps_row["limit"] - (steps_row["used"] or 0))) if steps_row.get("limit") else None
    dimensions: dict[str, dict] = {}
    for name, row in budget["dimensions"].items():
        used, limit = row["used"] or 0, row["limit"]
        if not used and not limit:
            continue
        per_step = used / steps_done
        at_ceiling = bool(limit) and used >= limit
        step = None
        if limit and not at_ceiling and per_step > 0 and not ended:
            # round first: (3.0 - 0.3) / 0.3 is 9.000000000000002, yet the 9th step after this one reaches it
            step = position + ceil(round((limit - used) / per_step, 9))
            if total_steps is not None and step > total_steps:
                step = None                  # the run would end before it got there
            elif row.get("default") and last_step is not None and step > last_step:
                step = None                  # a default ceiling past the step ceiling
        dimensions[name] = {"per_step": per_step, "per_minute": used / minutes if minutes > 0 else None,
                            "at_finish": None if remaining is None else used + per_step * remaining,
                            "at_ceiling": at_ceiling, "ceiling_step": step}
    ahead = [(row["ceiling_step"], name) for name, row in dimensions.items() if row["ceiling_step"] is not None]
    first = min(ahead) if ahead else None
    per_step_s = running_s / steps_done
    return {"steps_done": steps_done, "position": position, "total_steps": total_steps,
            "running_s": running_s, "per_step_s": per_step_s,
            "remaining_steps": remaining,
            "remaining_s": None if remaining is None or running_s <= 0 else per_step_s * remaining,
            "dimensions": dimensions,
            "first_ceiling": {"dimension": first[1], "step": first[0]} if first else None}


def rate_usd(value: float) -> str:
    """Dollars for a rate, two significant figures below a cent ($0.00011), else as `usd` says them."""
    if value >= 0.01 or value <= 0:
        return usd(value)
    return f"${value:.{1 - floor(log10(value))}f}"


def projection_parts(fc: dict | None) -> list[str]:
    """What lies ahead at this rate, a phrase each: "cost ceiling at step 41 of 60", "step ceiling reached",
    "finish ≈ $0.31 in 4m 12s"; none without a forecast, with no ceiling in reach and no declared total, or
    once the run has ended."""
    if not fc:
        return []
    of = f" of {fc['total_steps']}" if fc["total_steps"] is not None else ""
    dims = fc["dimensions"]
    said = [f"{NAMES.get(name, name)} ceiling reached" for name, row in dims.items() if row["at_ceiling"]]
    said += [f"{NAMES.get(name, name)} ceiling at step {step}{of}" for step, name in
             sorted((row["ceiling_step"], name) for name, row in dims.items() if row["ceiling_step"] is not None)]
    if fc["remaining_steps"]:
        cost = dims.get("cost_usd")
        tokens = sum((dims[n]["at_finish"] or 0) for n in ("input_tokens", "output_tokens") if n in dims)
        figure = (usd(cost["at_finish"]) if cost and cost["per_step"] > 0
                  else f"{count(round(tokens))} tokens" if tokens else "")
        time = f"in {wall_s(fc['remaining_s'])}" if fc["remaining_s"] is not None else ""
        if figure or time:
            said.append(" ".join(filter(None, ("finish ≈", figure, time))))
    return said


def burn_parts(fc: dict | None) -> list[str]:
    """The burn rate, a phrase each: cost (else tokens) per step and per minute of running time, and running
    time per step: "$0.0021/step", "$0.13/min", "1.2s/step"; none without a forecast, and only what is not
    zero."""
    if not fc:
        return []
    dims, said = fc["dimensions"], []
    cost = dims.get("cost_usd")
    tokens = [dims[n] for n in ("input_tokens", "output_tokens") if n in dims]
    if cost and cost["per_step"] > 0:
        said.append(f"{rate_usd(cost['per_step'])}/step")
        if cost["per_minute"] is not None:
            said.append(f"{rate_usd(cost['per_minute'])}/min")
    elif tokens and sum(row["per_step"] for row in tokens) > 0:
        said.append(f"{count(round(sum(row['per_step'] for row in tokens), 1))} tokens/step")
        if all(row["per_minute"] is not None for row in tokens):
            said.append(f"{count(round(sum(row['per_minute'] for row in tokens)))} tokens/min")
    if fc["per_step_s"] > 0:
        said.append(f"{duration_ms(fc['per_step_s'] * 1000)}/step")
    return said


PROJECTION, BURN = "at this rate: ", "burn "


def sentence(fc: dict | None) -> str:
    """The whole forecast in one line, as `show` prints it: "at this rate: cost ceiling at step 41 of 60 ·
    finish ≈ $0.31 in 4m 12s · burn $0.0021/step · $0.13/min · 1.2s/step" ("" without a forecast)."""
    ahead, rate = projection_parts(fc), burn_parts(fc)
    said = [PROJECTION + " · ".join(ahead)] if ahead else []
    return " · ".join(said + ([BURN + " · ".join(rate)] if rate else []))


def sparkline(values: list[float]) -> str:
    """One cell per value, oldest first, scaled to the largest: a step that cost nothing is the low `▁`
    (all zero: a flat low line, the run steps without spending), any cost at least `▂`, the largest `█`;
    "" for no values."""
    top = max(values, default=0)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[0] if v <= 0 else SPARK[max(1, min(7, round(7 * v / top)))] for v in values)
