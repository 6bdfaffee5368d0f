"""Token estimates without a tokenizer: deterministic, close enough for the offline model's usage
and for reserving a model call's worst case against a budget before it is made."""

from __future__ import annotations

import json
import math


def text_of(value) -> str:
    """The text a person would count as tokens: strings, block text, tool inputs and results."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(text_of(item) for item in value)
    if isinstance(value, dict):
        if "text" in value:
            return text_of(value["text"])
        if "content" in value:
            return text_of(value["content"])
        if "input" in value:
            return json.dumps(value["input"], sort_keys=True)
    return ""


def estimate_tokens(text: str) -> int:
    """About one token per four characters, at least one: deterministic, not a real tokenizer."""
    return max(1, math.ceil(len(text) / 4))


def estimate_prompt_tokens(system: str | list | None, messages: list[dict], tools: list[dict] | None = None) -> int:
    """The prompt's estimate; tool definitions count as their JSON."""
    tools_text = json.dumps(tools, sort_keys=True) if tools else ""
    return estimate_tokens(text_of(system or "") + text_of(messages) + tools_text)
