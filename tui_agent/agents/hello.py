"""hello: a few recorded steps, to see journaling and replay without a model or a key."""

from __future__ import annotations

import time

from ..runtime.agent import Agent, Budget
from ..runtime.context import Context


def _pause(request: dict) -> None:
    time.sleep(float(request.get("delay_s", 0.3)))


def _greet(name: str, request: dict) -> str:
    _pause(request)
    return f"Hello, {name}!"


def _count_letters(text: str, request: dict) -> dict:
    _pause(request)
    letters = [c.lower() for c in text if c.isalpha()]
    return {"letters": len(letters), "distinct": len(set(letters))}


def _shout(text: str, request: dict) -> str:
    _pause(request)
    return text.upper()


def hello(ctx: Context, request: dict) -> dict:
    name = str(request.get("name", "world"))
    ctx.plan(total_steps=3)
    greeting = ctx.step("greet", _greet, name, request)
    counts = ctx.step("count-letters", _count_letters, greeting, request)
    loud = ctx.step("shout", _shout, greeting, request)
    return {"greeting": greeting, "loud": loud, **counts}


AGENT = Agent(
    name="hello",
    version="1",
    run=hello,
    budget=Budget(steps=10),
    check=lambda ctx, result: result["loud"] == result["greeting"].upper() and result["letters"] > 0,
    description="greets someone in three recorded steps (request: name, delay_s)",
)
