"""Prompt caching: breakpoints on what a loop sends again every turn, so each turn reads the previous
prefix from the cache (cache reads cost a tenth of input) instead of paying for it again.

The marks go on copies handed to the provider: what the journal keeps, and compares from one call to
the next, is the request without them."""

from __future__ import annotations

import copy

EPHEMERAL = {"type": "ephemeral"}


def _marked_last(blocks: list[dict]) -> list[dict]:
    blocks = copy.deepcopy(blocks)
    if blocks:
        blocks[-1]["cache_control"] = dict(EPHEMERAL)
    return blocks


def with_cache_marks(system: str | list | None, tools: list[dict] | None,
                     messages: list[dict]) -> tuple[list | None, list[dict] | None, list[dict]]:
    """Three breakpoints of the API's four: the tools, the system prompt, and the newest turn."""
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    marked_messages = list(messages)
    if marked_messages:
        last = marked_messages[-1]
        content = last.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        marked_messages[-1] = {**last, "content": _marked_last(content or [])}
    return (_marked_last(system) if system else system, _marked_last(tools) if tools else tools, marked_messages)
