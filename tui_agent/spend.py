"""What did I spend: model calls' cost and tokens by day, agent or model, for `tui-agent spend` and the TUI.

Each call counts what its run's budget counted (store/spend.py): its cost when answered, by that day's prices;
`reprice` prices the stored usage by today's table (models/pricing.py; without usage or a price it is
unpriced). What died calls may have been billed is its own figure, never folded into the cost, and unpriced
calls are counted, never added as zero. Days are local time unless `utc`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from .models.pricing import PRICES_DATE, cost_usd
from .runtime.clock import iso
from .states import CallState
from .store import Store
from .store.spend import BUCKET_S, calls_spending, spending

BY = ("day", "agent", "model")
FIGURES = ("cost_usd", "possibly_billed_usd", "unpriced_calls", "calls", "runs", "input_tokens", "output_tokens",
           "cache_read_tokens", "cache_write_tokens")


@dataclass
class Figures:
    """One row of the report: a day's, an agent's or a model's spending (or the total)."""

    cost_usd: float = 0.0
    possibly_billed_usd: float = 0.0
    unpriced_calls: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    run_ids: set[str] = field(default_factory=set)

    def add(self, piece: dict) -> None:
        self.cost_usd += piece["cost_usd"] or 0
        self.possibly_billed_usd += piece["possibly_billed_usd"] or 0
        for name in ("unpriced_calls", "calls", "input_tokens", "output_tokens", "cache_read_tokens",
                     "cache_write_tokens"):
            setattr(self, name, getattr(self, name) + (piece[name] or 0))
        self.run_ids.add(piece["run_id"])

    def shown(self) -> dict:
        """The figures as the report gives them (FIGURES, with `runs`: how many runs made these calls)."""
        return {"cost_usd": round(self.cost_usd, 10), "possibly_billed_usd": round(self.possibly_billed_usd, 10),
                "unpriced_calls": self.unpriced_calls, "calls": self.calls, "runs": len(self.run_ids),
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens, "cache_write_tokens": self.cache_write_tokens}


def day_of(bucket: int, utc: bool) -> date:
    """The day (local, or UTC) of a quarter of an hour store/spend.py added calls up in."""
    instant = datetime.fromtimestamp(bucket * BUCKET_S, UTC)
    return (instant if utc else instant.astimezone()).date()


def _repriced(call: dict) -> dict:
    """A call of calls_spending as a piece of `spending`, priced by today's table."""
    answered = call["state"] == CallState.ANSWERED
    if answered:
        usage = _usage(call["usage"])
        price = None if usage is None else cost_usd(call["model"], usage)
    else:
        price = cost_usd(call["model"], {"input_tokens": call["reserved_input"],
                                         "output_tokens": call["reserved_output"]})
    died = not answered and bool(call["died"])
    return {**call, "calls": int(answered), "cost_usd": price if answered else None,
            "possibly_billed_usd": price if died else None,
            "unpriced_calls": int((answered or died) and price is None)}


def _usage(text: str | None) -> dict | None:
    try:
        usage = json.loads(text) if text else None
    except ValueError:
        return None
    return usage if isinstance(usage, dict) else None


def report(store: Store, at: float, *, by: str = "day", since: float | None = None, utc: bool = False,
           reprice: bool = False) -> dict:
    """The spending of the calls sent from `since` on, a row per day, agent or model.

    Without `since`, every call counts. Days come oldest first, agents and models costliest first. The result
    holds `rows` (each with its `day`, `agent` or `model` and FIGURES), `total`, and `daily`: {day: cost} over
    the same calls, for a chart. `prices` is "charged" (as each budget counted it) or "today" (`reprice`), with
    the table's `prices_date`."""
    read = calls_spending if reprice else spending
    pieces = read(store, since or 0.0, at)
    if reprice:
        pieces = [_repriced(call) for call in pieces]
    keys: dict[str, Callable[[dict], str]] = {
        "day": lambda piece: day_of(piece["bucket"], utc).isoformat(), "agent": lambda piece: piece["agent"],
        "model": lambda piece: piece["model"]}
    groups: dict[str, Figures] = {}
    daily: dict[str, float] = {}
    total = Figures()
    for piece in pieces:
        groups.setdefault(keys[by](piece), Figures()).add(piece)
        day = keys["day"](piece)
        daily[day] = daily.get(day, 0.0) + (piece["cost_usd"] or 0)
        total.add(piece)
    order = sorted(groups) if by == "day" else sorted(groups, key=lambda name: (-groups[name].cost_usd, name))
    return {"by": by, "since": iso(since), "days": "utc" if utc else "local",
            "prices": "today" if reprice else "charged", "prices_date": PRICES_DATE,
            "rows": [{by: name, **groups[name].shown()} for name in order], "total": total.shown(),
            "daily": {day: round(cost, 10) for day, cost in sorted(daily.items())}}


def days_back(today: date, count: int) -> list[str]:
    """The `count` days up to `today`, oldest first, as the report names them: a chart's axis."""
    return [(today - timedelta(days=back)).isoformat() for back in range(count - 1, -1, -1)]
