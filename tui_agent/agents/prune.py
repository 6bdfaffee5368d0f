"""prune: `tui-agent prune` as a run, so a schedule keeps the database small (`schedule add tidy --agent prune
--cron '30 3 * * *' --input '{"older_than": "30d", "keep_last": 20}'`). Its own run is never among those it removes
(it has not ended)."""

from __future__ import annotations

from ..filters import parse_span
from ..runtime.agent import Agent, Budget
from ..runtime.context import Context
from ..store.prune import PRUNABLE, chosen_statuses


def prune(ctx: Context, request: dict) -> dict:
    """One step that prunes the ended runs older than `older_than`, but the newest `keep_last` of each agent.

    `older_than` is a span such as 30d; `status` is comma-separated, by default every ended one."""
    older_than_s = parse_span(str(request.get("older_than", "30d")), "older_than")
    statuses = list(chosen_statuses(str(request.get("status", ",".join(PRUNABLE))), "status"))
    keep_last = request.get("keep_last")
    return ctx.step("prune", ctx.prune, older_than_s, statuses, None if keep_last is None else int(keep_last))


AGENT = Agent(
    name="prune",
    version="1",
    run=prune,
    budget=Budget(steps=3),
    step_timeout_s=None,   # a large database takes as long as it takes; its batches let every worker through
    description="removes old ended runs as tui-agent prune does (request: older_than, status, keep_last)",
)
