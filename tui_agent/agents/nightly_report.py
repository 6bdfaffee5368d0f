"""nightly-report: fetch three sources, summarize them with the model, write a Markdown report
and email it to the team through the local outbox, at most once per date and team."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import PermanentError
from ..runtime.agent import Agent, Budget
from ..runtime.clock import now
from ..runtime.context import Context
from ..runtime.effects import AttemptToken
from .outbox import Outbox

DAY_S = 24 * 3600
SOURCES: dict[str, list[tuple[Any, ...]]] = {
    "sales": [("region", "orders", "revenue"), ("north", 41, 12890), ("south", 37, 10440), ("west", 12, 3310)],
    "incidents": [("id", "severity", "status"), ("INC-311", "high", "resolved"), ("INC-312", "low", "open")],
    "deploys": [("service", "version", "outcome"), ("api", "2.14.1", "ok"), ("web", "8.3.0", "ok"),
                ("billing", "1.9.2", "rolled back")],
}


def _settings(request: dict) -> dict:
    """The request with its defaults filled in, once: `date` is today when the run starts, not when it resumes."""
    settings = {
        "date": datetime.fromtimestamp(now()).date().isoformat(),
        "team": "team",
        "sources": list(SOURCES),
        "service": "dedupe",
        "lookup": True,
        "approve": False,
        "send_at": None,
        "delay_s": 0,
        **request,
    }
    if settings["service"] not in ("dedupe", "every"):
        raise PermanentError(f"service must be 'dedupe' or 'every', not {settings['service']!r}")
    return settings


def _pause(settings: dict) -> None:
    if settings["delay_s"]:
        time.sleep(float(settings["delay_s"]))


def sources_dir(data_dir: Path) -> Path:
    """The agent's own sample data, created on first use in the database's data folder (each machine's own, for
    a server: every machine serves the same sample)."""
    folder = data_dir / "nightly-report" / "sources"
    if not folder.exists():
        folder.mkdir(parents=True)
        for name, rows in SOURCES.items():
            with open(folder / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
                csv.writer(f).writerows(rows)
    return folder


def fetch_log(data_dir: Path) -> Path:
    """One line per fetch the sources served: what the world saw, for the simulator and tests."""
    return data_dir / "nightly-report" / "fetches.log"


def fetch(data_dir: str, source: str, settings: dict) -> dict:
    _pause(settings)
    path = sources_dir(Path(data_dir)) / f"{source}.csv"
    if source not in SOURCES or not path.exists():
        raise PermanentError(f"there is no source {source!r}; known sources: {', '.join(SOURCES)}")
    with open(fetch_log(Path(data_dir)), "a", encoding="utf-8") as log:
        log.write(source + "\n")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {"source": source, "rows": rows}


def _prompt(settings: dict, fetched: list[dict]) -> str:
    lines = [f"Summarize the nightly figures for {settings['team']} on {settings['date']} in a few bullets."]
    for item in fetched:
        lines.append(f"## {item['source']} ({len(item['rows'])} rows)")
        lines += [", ".join(f"{k}={v}" for k, v in row.items()) for row in item["rows"]]
    return "\n".join(lines)


def script(messages: list[dict], max_tokens: int, call_index: int) -> str:
    """The offline model's reply: a summary computed from the prompt, so it changes with the data."""
    prompt = messages[-1]["content"]
    bullets = [f"- {line[3:]}: " + ("nothing reported" if line.endswith("(0 rows)") else "figures in, see below")
               for line in prompt.splitlines() if line.startswith("## ")]
    flagged = [line for line in prompt.splitlines() if "rolled back" in line or "status=open" in line]
    bullets += [f"- needs attention: {line}" for line in flagged]
    return "Nightly summary\n" + "\n".join(bullets)


def write_report(save: Callable[[str, str], str], settings: dict, summary: str, fetched: list[dict]) -> str:
    """The report, kept with the run's artifacts by `save` (Context.save_artifact), so the operator and a worker
    on another machine can read it; returns where it is."""
    _pause(settings)
    parts = [f"# Nightly report, {settings['team']}, {settings['date']}", "", summary, ""]
    for item in fetched:
        parts += [f"## {item['source']}", ""]
        if item["rows"]:
            header = list(item["rows"][0])
            parts += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            parts += ["| " + " | ".join(str(row[h]) for h in header) + " |" for row in item["rows"]]
        parts.append("")
    return save(f"report-{settings['date']}-{settings['team']}.md", "\n".join(parts))


def outbox_for(data_dir: Path, settings: dict) -> Outbox:
    """The local mail service, in the data folder: each machine's own, for a server store."""
    return Outbox(data_dir / "outbox", mode=settings["service"], window_s=DAY_S)


def nightly_report(ctx: Context, request: dict) -> dict:
    settings = ctx.step("settings", _settings, request)
    ctx.plan(total_steps=len(settings["sources"]) + 4 + bool(settings["approve"]) + bool(settings["send_at"]))
    fetched = [ctx.step(f"fetch:{s}", fetch, str(ctx.data_dir), s, settings) for s in settings["sources"]]
    reply = ctx.model("summarize", messages=[{"role": "user", "content": _prompt(settings, fetched)}],
                      max_tokens=800)
    summary = "".join(block.get("text", "") for block in reply["content"])
    report = ctx.step("write-report", write_report, ctx.save_artifact, settings, summary, fetched)
    team = settings["team"]
    if settings["approve"]:   # a denial ends the run cancelled: denied, with the person's note
        ctx.approval("approve", f"Send the nightly report for {team} on {settings['date']}? ({report})")
    if settings["send_at"]:
        ctx.sleep_until("send-at", settings["send_at"])
    outbox = outbox_for(ctx.data_dir, settings)

    def send(key: str, token: AttemptToken) -> dict:  # the token lets the outbox refuse a paused worker's late send
        _pause(settings)
        return outbox.send(key, token=token, to=f"{team} <{team}@localhost>",
                           subject=f"Nightly report {settings['date']} ({team})",
                           body=ctx.read_artifact(report))

    sent = ctx.effect("send-report", key=f"nightly-report:{settings['date']}:{team}", do=send,
                      lookup=outbox.lookup if settings["lookup"] else None,
                      dedupe_ttl_s=DAY_S if settings["service"] == "dedupe" else None,
                      lookup_ttl_s=DAY_S, service="outbox")
    return {"report": report, "email": (sent or {}).get("path")}


def _report_kept(ctx: Context, result: dict) -> bool:
    try:
        ctx.read_artifact(result["report"])
    except FileNotFoundError:
        return False
    return True


AGENT = Agent(
    name="nightly-report",
    version="1",
    run=nightly_report,
    budget=Budget(cost_usd=0.50, steps=50),
    check=_report_kept,
    script=script,
    description="fetches three sources, summarizes them, writes a report and emails it once per date and team",
)
