"""`ctx.agent_loop`: the model asks for tools, the tools answer, until the model ends its turn and the check passes.

Every turn is one journaled model call and every tool result one journaled entry, so a resumed run goes on from
the last one recorded. A tool that fails, or input that does not fit its schema, goes back to the model as an
error result and is reported with `ctx.failure`, so the plateau detector sees it repeat. An effect tool goes
through the effect ledger first, with a key built from what it means."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..models import cost_usd
from ..states import EntryKind
from ..store.journal import Usage
from .faults import crash_point
from .journal import Recorder
from .outcomes import StepFailed
from .tools import Tool


class Calls(Protocol):
    """The journaled calls a loop makes through the run's `Context`, which its tools and check are handed too."""

    def model(self, name: str, *args: Any, **kwargs: Any) -> dict: ...
    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any: ...
    def effect(self, name: str, *args: Any, **kwargs: Any) -> Any: ...
    def progress(self, value: Any) -> None: ...
    def failure(self, error: BaseException | str, fingerprint: str | None = None) -> None: ...


Check = Callable[[Calls, list[dict]], Any]  # -> passed | (passed, why) | (passed, why, measure)
_TOOL = Usage(tool_calls=1)


def agent_loop(ctx: Calls, journal: Recorder, *, name: str, system: str | None, tools: Sequence[Tool],
               messages: list[dict], model: str | None, max_tokens: int, max_turns: int, check: Check | None) -> dict:
    by_name = {t.name: t for t in tools}
    definitions = [t.param() for t in tools] or None
    messages = list(messages)
    summary = {"turns": 0, "tool_calls": 0, "cost_usd": 0.0, "unpriced_turns": 0}
    reply: dict = {}
    for turn in range(1, max_turns + 1):
        reply = ctx.model(f"{name}/turn {turn}", messages=messages, max_tokens=max_tokens, model=model,
                          system=system, tools=definitions, cache=True)
        _count(summary, reply)
        messages.append({"role": "assistant", "content": _echo(reply["content"])})
        uses = [block for block in reply["content"] if block.get("type") == "tool_use"]
        if uses:
            results = [_use(ctx, journal, name, by_name, block) for block in uses]
            messages.append({"role": "user", "content": results})
            summary["tool_calls"] += len(uses)
            continue
        if check is None:
            return _ending(reply, messages, summary, "end_turn")
        verdict = _judge(ctx, f"{name}/check {turn}", check, messages)
        if verdict["measure"] is not None:
            ctx.progress(verdict["measure"])
        if verdict["passed"]:
            return _ending(reply, messages, summary, "check_passed")
        messages.append({"role": "user", "content": f"the check did not pass: {verdict['why'] or 'no reason given'}"})
    return _ending(reply, messages, summary, "max_turns")


def checked_tools(tools: Sequence[Tool]) -> list[Tool]:
    """The loop's tools, refused at once (a usage error in the agent's code) unless each is a distinct `@tool`."""
    tools = list(tools)
    for t in tools:
        if not isinstance(t, Tool):
            raise TypeError(f"agent_loop tools must be @tool functions; {t!r} is not")
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise TypeError(f"agent_loop tools need distinct names; given {names}")
    return tools


def _count(summary: dict, reply: dict) -> None:
    cost = cost_usd(reply.get("model", ""), reply.get("usage") or {})
    summary["turns"] += 1
    summary["cost_usd"] += cost or 0.0
    summary["unpriced_turns"] += cost is None


def _ending(reply: dict, messages: list[dict], summary: dict, stopped: str) -> dict:
    """What the loop returns: the final message, the conversation, and what it took. `stopped` says why it
    ended: `end_turn`, `check_passed`, or `max_turns` (the model never finished)."""
    return {"final": reply, "messages": messages, "stopped": stopped, **summary}


def _echo(content: list[dict]) -> list[dict]:
    """The assistant's blocks as the next request's input: fields the API sent as null are left out."""
    return [{k: v for k, v in block.items() if v is not None} for block in content]


def _judge(ctx: Calls, entry: str, check: Check, messages: list[dict]) -> dict:
    """The check's verdict, journaled like a step, so a replay does not run the check again."""
    def verdict() -> dict:
        said = check(ctx, messages)
        passed, why, measure = (tuple(said) + (None, None))[:3] if isinstance(said, tuple) else (said, None, None)
        return {"passed": bool(passed), "why": None if why is None else str(why), "measure": measure}

    return ctx.step(entry, verdict)


def _use(ctx: Calls, journal: Recorder, loop: str, tools: dict[str, Tool], block: dict) -> dict:
    """One tool call: its result block, journaled by the tool_use id (an effect tool's ledger entry first)."""
    tool, args = tools.get(block["name"]), block.get("input")
    entry = f"{loop}/{block['name']}"
    problem: str | None
    if tool is None:
        problem = f"no tool named {block['name']!r}; the tools are: {', '.join(sorted(tools)) or 'none'}"
    else:
        problem = "; ".join(f"invalid input: {p}" for p in tool.validate(args)) or None
    done: tuple[str, Any] | None = None  # an effect tool's outcome, from the ledger
    if tool is not None and tool.effect and problem is None:
        position = journal.position
        key = tool.key
        # an effect tool has a key (Tool.__post_init__), and input that passed `validate` is an object
        assert key is not None and isinstance(args, dict)
        try:
            done = ("value", ctx.effect(entry, key=key(args), do=_sender(ctx, tool, args), lookup=tool.lookup,
                                        dedupe_ttl_s=tool.dedupe_ttl_s, lookup_ttl_s=tool.lookup_ttl_s,
                                        service=tool.service))
        except StepFailed as e:  # the service refused it to the last attempt: nothing was done, and the position
            # is filled, so the journal has no gap
            journal.record(position, entry, kind=EntryKind.EFFECT, value=None, started_at=journal.clock.now(),
                           duration_s=0.0)
            done = ("error", e.error)
    position, recorded, result = journal.next(entry, tool_calls=1)
    if not recorded:
        result = _run(ctx, journal, position=position, entry=entry, block=block, tool=tool, args=args,
                      problem=problem, done=done)
        crash_point("after-tool-commit", entry)
    if result.get("is_error"):
        ctx.failure(f"{block['name']}: {result['content']}")
    return result


def _run(ctx: Calls, journal: Recorder, *, position: int, entry: str, block: dict, tool: Tool | None, args: Any,
         problem: str | None, done: tuple[str, Any] | None) -> dict:
    started_at, duration, attempts = journal.clock.now(), 0.0, 1
    if problem is not None:
        result = _result(block, problem, error=True)
    elif done is not None:
        kind, value = done
        result = _result(block, _failed(value) if kind == "error" else value, error=kind == "error")
    else:
        try:
            value, attempts, started_at, duration = journal.attempt(position, entry, call=_call, args=(ctx, tool, args))
            result = _result(block, value)
        except StepFailed as e:  # permanent, or temporary past the retry policy: the model hears about it
            result, attempts = _result(block, _failed(e.error), error=True), e.attempts
    return journal.record(position, entry, kind=EntryKind.TOOL, value=result, started_at=started_at,
                          duration_s=duration, usage=_TOOL, attempts=attempts)


def _failed(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _result(block: dict, value: Any, error: bool = False) -> dict:
    content = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return {"type": "tool_result", "tool_use_id": block["id"], "content": content,
            **({"is_error": True} if error else {})}


def _supplied(ctx: Calls, tool: Tool, **given: Any) -> dict:
    return {name: value for name, value in {"ctx": ctx, **given}.items() if name in tool.supplied}


def _call(ctx: Calls, tool: Tool, args: dict) -> Any:
    return tool.fn(**args, **_supplied(ctx, tool))


def _sender(ctx: Calls, tool: Tool, args: dict) -> Callable:
    """The effect's `do`: the tool with its idempotency key (and attempt token) when it takes them."""
    def do(key: str, token) -> Any:
        return tool.fn(**args, **_supplied(ctx, tool, key=key, token=token))

    return do
