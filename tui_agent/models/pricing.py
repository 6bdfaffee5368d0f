"""What a model call cost, from a dated price table, so budgets can count `cost_usd`.

Prices change: the table is dated data with its source, shown to users with its date. A price
that could not be confirmed is None, and a cost that needs it is None ("unknown"), never zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRICES_DATE = "2026-11-29"
PRICES_SOURCE = "the model pages on Anthropic's documentation site"


@dataclass(frozen=True)
class Price:
    """USD per million tokens; `max_prompt_tokens` bounds the prompts these prices hold for."""

    input: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float | None
    output: float
    max_prompt_tokens: int | None = None


# model ids -> (input, cache write 5m, cache write 1h, cache read, output[, max prompt tokens]).
# Haiku 5.5: cache read not confirmed, and prices known only for prompts up to 100k tokens.
_TABLE: dict[tuple[str, ...], tuple] = {
    ("claude-opus-5-5",): (4, 5, 8, 0.20, 20),
    ("claude-opus-5", "claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6", "claude-opus-4-5"):
        (5, 6.25, 10, 0.50, 25),
    ("claude-sonnet-5-5", "claude-sonnet-5"): (2, 2.50, 4, 0.20, 10),
    ("claude-sonnet-4-6", "claude-sonnet-4-5"): (3, 3.75, 6, 0.30, 15),
    ("claude-haiku-5-5",): (0.10, 0.125, 0.20, None, 0.50, 100_000),
    ("claude-haiku-4-5",): (1, 1.25, 2, 0.10, 5),
}

PRICES: dict[str, Price] = {model: Price(*row) for models, row in _TABLE.items() for model in models}

_DATED = re.compile(r"^(?P<base>.+)-\d{8}$")


def price_for(model: str) -> Price | None:
    """The price of a known id, or of a dated snapshot of one (`claude-haiku-4-5-20251001`).

    Only a date suffix is stripped: `claude-sonnet-5-1` is a different model, not `claude-sonnet-5`.
    """
    if model in PRICES:
        return PRICES[model]
    dated = _DATED.match(model)
    return PRICES.get(dated["base"]) if dated else None


def cost_usd(model: str, usage: dict) -> float | None:
    """The cost of one reply from its Messages API `usage`; None when a needed price is unknown."""
    price = price_for(model)
    if price is None:
        return None
    input_tokens = usage.get("input_tokens") or 0
    output_tokens = usage.get("output_tokens") or 0
    cache_read = usage.get("cache_read_input_tokens") or 0
    split = usage.get("cache_creation")
    if split:
        write_5m = split.get("ephemeral_5m_input_tokens") or 0
        write_1h = split.get("ephemeral_1h_input_tokens") or 0
    else:
        write_5m, write_1h = usage.get("cache_creation_input_tokens") or 0, 0
    prompt = input_tokens + write_5m + write_1h + cache_read
    if price.max_prompt_tokens is not None and prompt > price.max_prompt_tokens:
        return None
    if cache_read and price.cache_read is None:
        return None
    per_million = (input_tokens * price.input + write_5m * price.cache_write_5m
                   + write_1h * price.cache_write_1h + cache_read * (price.cache_read or 0)
                   + output_tokens * price.output)
    return per_million / 1_000_000
