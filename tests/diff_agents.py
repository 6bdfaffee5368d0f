"""The agents the diff tests compare runs of (tests/engine/test_diff.py, tests/tui/test_tui_diff.py)."""

from __future__ import annotations

from tui_agent import Agent


def _asker(ctx, request):
    ctx.step("settings", lambda: {"team": request["team"]})
    ctx.step("fetch", lambda: [1, 2, 3])
    reply = ctx.model("summarize", messages=[{"role": "user", "content": f"summarize for {request['team']}"}],
                      max_tokens=200)
    text = reply["content"][0]["text"]
    ctx.step("write", lambda: f"report: {text}")
    return {"report": text}


def asker(reply: str) -> Agent:
    """The same agent each time, with a scripted model reply of the test's choosing."""
    return Agent(name="asker", run=_asker, script=lambda messages, max_tokens, call_index: reply)


def _counting(ctx, request):
    for i in range(request["steps"]):
        ctx.step(f"s{i}", lambda i=i: -1 if i == request.get("odd_at") else i * 2)
    return {"steps": request["steps"]}


COUNTING = Agent(name="counting", run=_counting)
