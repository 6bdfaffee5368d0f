"""An agent loop with two tools, one of them an effect: it reads the team's notes and emails a stand-up
summary, at most once per day however often it crashes or is run again.

    tui-agent --agents examples/standup.py run standup --model scripted:examples/standup-script.json \
        --input '{"notes": "examples/notes.md", "day": "2026-11-30"}'
"""

from pathlib import Path

from tui_agent import Agent, tool
from tui_agent.agents.outbox import Outbox


@tool
def read_file(path: str) -> str:
    """Read a text file, such as the team's notes."""
    return Path(path).read_text(encoding="utf-8")[:20_000]


@tool(effect=True, key=lambda args: f"standup:{args['day']}", dedupe_ttl_s=24 * 3600, service="outbox")
def email_team(ctx, day: str, summary: str, key: str) -> dict:
    """Email the stand-up summary for one day to the team."""
    return Outbox(ctx.data_dir / "outbox").send(key, to="team@example.com", subject=f"Stand-up {day}", body=summary)


def standup(ctx, request):
    done = ctx.agent_loop(
        "standup", system="You write a five-line stand-up summary and email it to the team.",
        tools=[read_file, email_team], max_tokens=1024, max_turns=8,
        messages=[{"role": "user", "content": f"Summarize {request['notes']} for {request['day']} and email it."}])
    return {"said": done["final"]["content"][0]["text"], "turns": done["turns"], "cost_usd": done["cost_usd"]}


STANDUP = Agent(name="standup", run=standup, description="summarizes the team's notes and emails them once a day")
