"""The nightly-report job as the simulator's settings shape it, on the real runtime: its steps are
journaled, its email is a `ctx.effect`, and the settings choose only what a real agent's author chooses
(when the summary is saved, which key the email carries, what the runtime is told about the service)."""

from __future__ import annotations

import math
from typing import Any

from ..agents.nightly_report import _prompt
from ..models.tokens import text_of
from ..runtime.agent import Agent
from ..runtime.context import Context
from .settings import DAY_S, SOURCES, Settings
from .world import World

NAME = "nightly-report"
MODEL_REPLY, SUMMARIZE, REPORT, MAKE_KEY, SEND = "model-reply", "summarize", "write-report", "make-key", "send-report"
NO_KEY, AT_SEND = "(no key)", "(made at send time, not saved)"


def meaning_key(request: dict) -> str:
    return f"nightly-report:{request['date']}:{request['team']}"


def build(settings: Settings, world: World) -> Agent:
    def run(ctx: Context, request: dict) -> dict:
        fetched = [ctx.step(f"fetch:{source}", world.fetch, source) for source in SOURCES]
        messages = [{"role": "user", "content": _prompt(request, fetched)}]
        if settings.saving == "journal":   # the reply is journaled the moment it arrives
            reply = ctx.model(MODEL_REPLY, messages=messages, max_tokens=400)
            summary = ctx.step(SUMMARIZE, text_of, reply["content"])
        else:                              # the step asks the model; its answer is saved when the step ends
            summary = ctx.step(SUMMARIZE, lambda: world.answer(messages, 400, 0))
        report = ctx.step(REPORT, world.write_report, summary, fetched)
        key = {"none": NO_KEY, "at-send": AT_SEND, "meaning": meaning_key(request)}.get(settings.key)
        if key is None:
            key = ctx.step(MAKE_KEY, world.new_key)
        sent = ctx.effect(SEND, key=key, do=_sender(settings, world), **_told(settings, world, key))
        return {"report": report["report"], "email": (sent or {}).get("email")}

    return Agent(name=NAME, run=run, script=world.answer,
                 description="the simulator's nightly report: three fetches, a summary, a report, an email")


def _sender(settings: Settings, world: World):
    def send(key: str) -> dict:
        if settings.key == "none":
            return world.send(None)
        return world.send(world.new_key() if settings.key == "at-send" else key)
    return send


def _told(settings: Settings, world: World, key: str) -> dict:
    """What the runtime is told about the email service, which decides what it does about a send in doubt.

    `resend` claims a key protects it forever (the naive policy, no window). `ask-service` gives it the lookup
    when there is a saved key to look up. `ask-person` tells it nothing, so it asks a person."""
    usable = settings.key in ("saved", "meaning")
    told: dict[str, Any] = {"service": "the email service",
            "lookup": None, "dedupe_ttl_s": None, "lookup_ttl_s": DAY_S}
    if settings.after_crash == "resend":
        told["dedupe_ttl_s"] = math.inf
    elif settings.after_crash == "ask-service" and usable:
        told["lookup"] = world.lookup
    return told
