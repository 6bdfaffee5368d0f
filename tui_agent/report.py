"""The read shapes of `ls`, `show`, `workers` and `schedule ls` (`--json`): a stable contract for scripts, tests
and the TUI. The CLI prints them; it builds none of its own.

Screens use these shapes, and may call the store's read functions themselves, never its writes, which go through
operate.py (tests/docs/test_layering.py checks both by name)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .errors import Unreadable, UserError
from .filters import Filter
from .format import countdown, in_zone, usd_exact
from .paging import every
from .runtime.agent import BUDGET_DIMENSIONS, UNBOUNDED, bounds_of
from .runtime.clock import clock_time, iso, now, parse_instant
from .runtime.liveness import ahead_by, worker_state
from .runtime.results import decode
from .services.forecast import forecast
from .states import TERMINAL, CallState, Reason, RunStatus, budget_dimension
from .store import Store, artifacts
from .store.approvals import approvals_at, approvals_page, next_asked
from .store.effects import effect_counts, effects_at, effects_page, next_in_doubt
from .store.events import event_count, events_page, last_event_like
from .store.holders import claimable_in, judge
from .store.holders import with_holders as holders_with
from .store.imported import imported
from .store.journal import PAGE, checkpoint_for, journal_page, journal_pages
from .store.model_calls import Held, calls_for, held_by, possibly_billed
from .store.runs import get_run, lease_now, list_runs, recorded_positions
from .store.runs import runs_page as page_of_runs
from .store.saved_filters import listing as saved_filters
from .store.schedules import listing as schedule_listing
from .store.workers import workers_listing
from .strict_json import read_stored

_TIMES = ("asked_at", "created_at", "started_at", "updated_at", "finished_at", "lease_expires_at", "wake_at", "at",
          "first_attempted_at", "attempted_at", "decided_at", "heartbeat_at", "stopped_at", "exported_at",
          "imported_at")


PROVIDERS = {"anthropic": "Claude", "scripted": "scripted"}


def live_line(name: str, provider: str, tokens: int, elapsed_s: float) -> str:
    """A model call in flight, as the TUI's timeline and `tui-agent run`'s progress line show it."""
    return f"{name} · {PROVIDERS.get(provider, provider)} · {tokens:,} tokens · {elapsed_s:.1f} s"


def _call(row: Mapping[str, Any], at: float) -> dict:
    """A model call attempt for the report: seconds so far while in flight, else how long it took."""
    end = at if row["state"] == CallState.IN_FLIGHT else row["updated_at"]
    return {**iso_times(row), "elapsed_s": round(max(0.0, end - row["started_at"]), 3)}


def iso_times(row: Mapping[str, Any]) -> dict:
    return {k: iso(v) if k in _TIMES else v for k, v in row.items()}


def busiest_budget(row: dict) -> tuple[str, float] | None:
    """The budget dimension closest to its ceiling, as (name, fraction), for a one-column gauge."""
    limits = json.loads(row.get("budget") or "{}")
    fractions = [(name, (row.get(f"used_{name}") or 0) / limits[name])
                 for name in BUDGET_DIMENSIONS if limits.get(name)]
    return max(fractions, key=lambda pair: pair[1]) if fractions else None


# What a budget refusal writes (runtime/budget.py BudgetMeter.admit): "budget cost_usd exhausted: $0.0000 used of
# $0.0020, the next call needs $0.0041 (park); ...". The figure is read back from that event: the worst case of
# the call the agent was about to make cannot be recomputed without running the agent, and the event is where
# the runtime records it.
_REFUSED = re.compile(r"^budget (?P<dimension>\w+) exhausted: .*the next call needs \$?(?P<needs>[0-9.]+)")


def budget_stop(store: Store, run_id: str, raise_with: str) -> str | None:
    """For a run its budget stopped, what the next call needed against the ceiling and the way out.

    The way out is `raise_with`, formatted with {run} and {dimension}, and is left out once the run has ended.
    None for any other run, or when the refusal recorded no figure (a model without a price)."""
    run = get_run(store, run_id)
    dimension = budget_dimension(run["reason"])
    if dimension is None:
        return None
    refusal = _REFUSED.match(last_event_like(store.conn, run_id, f"budget {dimension} exhausted: %") or "")
    limits = json.loads(run["budget"] or "{}")
    limit, default = limits.get(dimension), "default " if dimension in (limits.get("defaults") or ()) else ""
    if refusal is None or limit is None:
        return None
    needs, used = float(refusal["needs"]), checkpoint_for(store, run_id).get(f"used_{dimension}") or 0
    if dimension == "cost_usd":
        said = f"the next model call may cost up to ${needs:g} and " + (
            f"{usd_exact(used)} of the {default}${limit:g} ceiling is spent" if used
            else f"the {default}ceiling is ${limit:g}")
    else:
        said = (f"the next call needs {needs:g} {dimension.replace('_', ' ')} and {used:g} of the {default}"
                f"{limit:g} are used")
    if run["status"] in TERMINAL:
        return f"{said}; the run ended"
    return f"{said}: raise it with {raise_with.format(run=run_id, dimension=dimension)}"


def workers_report(store: Store, at: float) -> list[dict]:
    """Every worker with its state, how far its clock runs ahead, and each run it holds.

    Each run comes with its lease left, never negative (0 once it has run out), and `claimable_in_s`
    (store/holders.claimable_in). Times are epoch times: `iso_times` them for JSON."""
    rows = workers_listing(store)
    for row in rows:
        row["state"] = worker_state(row, at)
        ahead = ahead_by(row, at)
        row["clock_ahead_s"] = None if ahead is None else round(ahead, 1)
        if not row["runs"]:
            continue
        lease_at = row.get("judged_at", at)   # a server's leases by its clock
        holder = judge(row, row["name"])   # probed only for a worker that holds runs
        for held in row["runs"]:
            held["lease_left_s"] = round(max(0.0, held["lease_expires_at"] - lease_at), 1)
            held["claimable_in_s"] = claimable_in(holder, held["lease_expires_at"], lease_at)
    return rows


def with_holders(store: Store, runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A copy of each run row with `holder_gone` and `claimable_in_s` (store/holders.with_holders), by the lease
    clock."""
    running = any(run["status"] == RunStatus.RUNNING for run in runs)
    return holders_with(store.conn, [dict(run) for run in runs], lease_now(store.conn, now()) if running else 0.0)


def held_by_gone(store: Store, agents: list[str]) -> list[dict]:
    """The running runs of `agents` whose worker is gone from this host but which no claim may take yet, with
    `claimable_in_s`: what `worker --once` says it left."""
    running = [run for run in list_runs(store, RunStatus.RUNNING) if run["agent"] in agents]
    return [run for run in with_holders(store, running) if run["holder_gone"] and run["claimable_in_s"]]


def _zoned_iso(at: float | None, tz: str) -> str | None:
    return None if at is None else in_zone(at, tz).isoformat(timespec="seconds")


def shown_stored(text: str, field: str) -> Any:
    """A stored JSON value as shown; None for one that cannot be read, whose run fails (or schedule is disabled)
    saying why when a worker meets it."""
    try:
        return read_stored(text, field)
    except Unreadable:
        return None


def saved_filters_report(store: Store) -> list[dict]:
    """Each saved filter (`filter ls --json`, the palette): its name, its words, when it was first saved."""
    return [iso_times(row) for row in saved_filters(store)]


def schedules_report(store: Store) -> list[dict]:
    """Each schedule with its fire times in its own zone."""
    return [{"name": r["name"], "agent": r["agent"], "cron": r["cron"], "tz": r["tz"],
             "input": shown_stored(r["input"], "schedules.input"),
             "missed": r["missed"], "overlap": r["overlap"], "grace_s": r["grace_s"], "enabled": bool(r["enabled"]),
             "next_fire": _zoned_iso(r["next_fire_at"], r["tz"]) if r["enabled"] else None,
             "last_fire": _zoned_iso(r["last_fire_at"], r["tz"]), "last_run_id": r["last_run_id"],
             "pending_fire": _zoned_iso(r["pending_fire_at"], r["tz"]),
             "model": r["model"] or "scripted"}  # NULL: added before --model, its runs are scripted
            for r in schedule_listing(store)]


def retry_wait(run: Mapping[str, Any], step_attempts: int | None) -> dict | None:
    """The next try of a run waiting to retry a step, as `ls --json` gives it in `retry`; None for any other run.

    It holds the attempt it makes next (the step's failed attempts, `step_attempts` of its checkpoint, plus one),
    when it is made (`next_try_at`, ISO), and how the last one failed (`last_error`). `run` may hold its
    `wake_at` as epoch seconds or ISO."""
    if (run["status"], run["reason"]) != (RunStatus.WAITING, Reason.RETRY):
        return None
    due = run["wake_at"]
    return {"attempt": (step_attempts or 0) + 1, "next_try_at": iso(due) if isinstance(due, float) else due,
            "last_error": run["error"]}


def retry_said(wait: dict, at: float | None = None) -> str:
    """A run's next try (`retry_wait`) as every screen says it.

    It reads `attempt 4 at 10:24:31 (in 2m 05s)`. Without `at`, for a line that is not redrawn as time passes,
    there is no countdown."""
    due = parse_instant(wait["next_try_at"])
    said = f"attempt {wait['attempt']} at {clock_time(due)}"
    if at is None:
        return said
    return f"{said} ({f'in {countdown(due - at)}' if due > at else 'due now'})"


def spent_of(run: dict, held: Held | None) -> dict:
    """What a run spent, as `ls --json` and the runs list say it (a runs_page row, and what its calls in flight
    hold: model_calls.held_by). `cost_usd`: its answered model calls' cost as its budget counted it, priced when
    each was answered; `possibly_billed_usd`: the worst case of its calls in flight when a worker died, which the
    API may have billed (the budget counts it too); `unpriced_calls`: answered or died calls whose model has no
    price (a cost beside them is a lower bound, never a silent zero); the answered calls' tokens: `input_tokens`
    (every input token, the cached ones included), `output_tokens`, and of the input `cache_read_tokens` and
    `cache_write_tokens`."""
    held = held or Held()
    return {"cost_usd": round((run["used_cost_usd"] or 0) - held.usd, 10) + 0.0,   # + 0.0: never -0.0
            "possibly_billed_usd": round(held.died_usd, 10),
            "unpriced_calls": (run["unpriced_calls"] or 0) + held.died_unpriced,
            "input_tokens": (run["used_input_tokens"] or 0) - held.input_tokens,
            "output_tokens": (run["used_output_tokens"] or 0) - held.output_tokens,
            "cache_read_tokens": run["used_cache_read_tokens"] or 0,
            "cache_write_tokens": run["used_cache_write_tokens"] or 0}


def runs_page(store: Store, **query: Any) -> list[dict]:
    """A page of runs as store/runs.py's runs_page reads it, each row with what it spent (`spent_of`).

    `where` is a tui_agent.filters.Filter, its ages counted back from now; `limit`, `needs_person` and `before`
    are passed on."""
    at = now()
    rows = page_of_runs(store, at=at, **query)
    held = held_by(store, rows, at)
    return [{**row, **spent_of(row, held.get(row["id"]))} for row in rows]


# What `ls --json` gives of each run (a stable contract), besides `tasks`, `retry`, `holder_gone` and
# `claimable_in_s`.
LISTED = ("id", "agent", "agent_version", "status", "reason", "attempt", "worker", "lease_expires_at", "created_at",
          "updated_at", "finished_at", "wake_at", "error", "current_step", "total_steps", "cost_usd",
          "possibly_billed_usd", "unpriced_calls", "input_tokens", "output_tokens", "cache_read_tokens",
          "cache_write_tokens")


def tasks_of(next_input: str | None) -> list[int] | None:
    """[done, total] for a run whose checkpoint's next input counts tasks, else None.

    The harness agent keeps them as `{"tasks": [done, total], ...}`. When this is None, the run's step counts
    instead."""
    if not next_input or '"tasks"' not in next_input:   # most runs: no JSON read at all
        return None
    said = json.loads(next_input)
    tasks = said.get("tasks") if isinstance(said, dict) else None
    if not (isinstance(tasks, list) and len(tasks) == 2 and all(isinstance(n, int) for n in tasks)):
        return None
    return tasks


def runs_listing(store: Store, where: Filter = Filter(), limit: int | None = None) -> list[dict]:
    """`ls --json`'s rows, newest first.

    These are the runs `where` selects (`limit` at most), each with its checkpoint's step counts, `tasks` ([done, total]
    for a harness run: `tasks_of`, else null), what it spent (`spent_of`), `retry` (`retry_wait`), and for a running run
    whether its holder is gone and when it is claimable (`with_holders`). Read a page at a time through runs_page's
    indexes."""
    rows = every(lambda after, size, _: runs_page(store, where=where, limit=size, before=after),
                 lambda row: (row["created_at"], row["id"]), page=min(500, limit or 500))
    listed = []
    for row in with_holders(store, list(itertools.islice(rows, limit))):
        wait = retry_wait(row, row["step_attempts"])
        listed.append({**iso_times({key: row[key] for key in LISTED}), "tasks": tasks_of(row["next_input"]),
                       "retry": wait, "holder_gone": row["holder_gone"], "claimable_in_s": row["claimable_in_s"]})
    return listed


def budget_of(run: dict, checkpoint: dict) -> dict:
    """A run's budget, as the TUI's gauges show it, with a forecast of where it leads.

    Per dimension: used, limit, percent and whether its soft threshold was crossed. `forecast`: the burn rates and where
    they lead (forecast.forecast documents its shape; None before the first step; its projections None once the run has
    ended). `default` per dimension: its ceiling is the default one (runtime/agent.py `run_budget`); `bounds`:
    "defaults", "unbounded" (opted out) or "legacy" (made before default ceilings: unbounded where unset); `defaults`:
    the dimensions with a default ceiling."""
    limits = json.loads(run["budget"] or "{}")
    crossed = json.loads(checkpoint.get("soft_dimensions") or "[]")
    defaults = limits.get("defaults") or []
    dimensions = {}
    for name in BUDGET_DIMENSIONS:
        used = checkpoint.get(f"used_{name}") or 0
        limit = limits.get(name)
        dimensions[name] = {"used": used, "limit": limit, "fraction": (used / limit) if limit else None,
                            "percent": round(100 * used / limit, 1) if limit else None,
                            "soft_crossed": name in crossed, "default": name in defaults}
    budget = {"soft": limits.get("soft"), "on_exhaust": limits.get("on_exhaust"), "dimensions": dimensions,
              "bounds": bounds_of(limits), "unbounded": bool(limits.get(UNBOUNDED)), "defaults": defaults,
              "unpriced_model_calls": checkpoint.get("unpriced_calls") or 0,
              "cache_read_tokens": checkpoint.get("used_cache_read_tokens") or 0,     # both part of input_tokens
              "cache_write_tokens": checkpoint.get("used_cache_write_tokens") or 0}
    budget["forecast"] = forecast(budget, steps_done=checkpoint.get("used_steps") or 0,
                                  position=checkpoint.get("current_step") or 0,
                                  total_steps=checkpoint.get("total_steps"),
                                  running_s=checkpoint.get("used_wall_s") or 0.0, ended=run["status"] in TERMINAL)
    return budget


def effect_shown(row: dict) -> dict:
    """A ledger row as `show --json` lists it."""
    shown = {k: v for k, v in row.items() if k not in ("id", "run_id")}
    shown["has_lookup"] = bool(row["has_lookup"])
    shown["result"] = None if row["result"] is None else json.loads(row["result"])
    return iso_times(shown)


# `imported`: where the run was imported from (tui-agent import), or null for a run of this database's own
REPORT_KEYS = ("run", "checkpoint", "steps", "journal", "effects", "events", "budget", "approvals", "model_calls",
               "imported")


def run_view(store: Store, run_id: str) -> dict:
    """What the run screen reads of a run, whatever its length.

    That is the run, its checkpoint, its budget, and how many entries, events and effects it has. Its lists are
    read a page at a time: `timeline_page`, `events_page`, `effects_page`."""
    run = with_holders(store, [get_run(store, run_id)])[0]
    checkpoint = checkpoint_for(store, run_id)
    shown_run = {k: v for k, v in run.items() if k not in ("result_artifact", "run_key")}
    shown_run.update(request=shown_stored(run["request"], "runs.request"), budget=json.loads(run["budget"] or "{}"),
                     result=decode(store, run["result"], run["result_artifact"]), key=run["run_key"],
                     artifact_dir=artifacts.where(store, run["artifact_dir"]),
                     traceback=json.loads(run["traceback"]) if run["traceback"] else None,
                     script=shown_stored(run["script"], "runs.script") if run["script"] else None)
    budget = budget_of(run, checkpoint)
    budget["possibly_billed_usd"] = possibly_billed(store, run, now())
    shown_checkpoint = {k: v for k, v in checkpoint.items() if not k.startswith("used_") and k != "run_id"}
    if shown_checkpoint.get("next_input") is not None:
        shown_checkpoint["next_input"] = json.loads(shown_checkpoint["next_input"])
    effects, doubtful = effect_counts(store, run_id, run["generation"])
    found = imported(store.conn, run_id)
    return {"run": iso_times(shown_run), "checkpoint": iso_times(shown_checkpoint), "budget": budget,
            "counts": {"entries": recorded_positions(store.conn, run_id, run["generation"]),
                       "events": event_count(store, run_id), "effects": effects, "in_doubt": doubtful},
            "imported": found and iso_times(found)}


def step_of(row: dict) -> dict:
    """A journal row as `show` lists a step of the current generation."""
    return {"position": row["position"], "name": row["name"], "kind": row["kind"], "attempts": row["attempts"],
            "duration_ms": round(row["duration_s"] * 1000, 3), "cost_usd": row["cost_usd"],
            "started_at": iso(row["started_at"])}


def entry_of(store: Store, row: dict, read: bool = True) -> dict:
    """A journal row as `show --json` lists an entry, with its result decoded.

    The result is read from its artifact when it has one. When `read` is false it is None until `with_artifact`
    reads it."""
    artifact = row["artifact"] if read else None
    return {"generation": row["generation"], "position": row["position"], "name": row["name"], "kind": row["kind"],
            "result": None if row["artifact"] and not read else decode(store, row["result"], artifact),
            "artifact": artifacts.where(store, row["artifact"]) if row["artifact"] else None,
            "fence": row["fence"], "started_at": iso(row["started_at"])}


def _by_position(row: dict) -> tuple[int, int]:
    return row["generation"], row["position"]


def effects_of(store: Store, run_id: str) -> Iterator[dict]:
    """Every generation's ledger rows as `show --json` lists them, a page at a time."""
    rows = every(lambda after, limit, _: effects_page(store, run_id, after, limit), _by_position)
    return (effect_shown(row) for row in rows)


def events_of(store: Store, run_id: str) -> Iterator[dict]:
    rows = every(lambda after, limit, _: events_page(store, run_id, after, limit), lambda e: e["id"])
    return (iso_times({k: v for k, v in e.items() if k != "id"}) for e in rows)


def approvals_of(store: Store, run_id: str) -> Iterator[dict]:
    """The run's questions as `show --json` lists them: without the database's own row number (as events and
    effects), which an import draws anew."""
    rows = every(lambda after, limit, _: approvals_page(store, run_id, after, limit), _by_position)
    return (iso_times({k: v for k, v in row.items() if k != "id"}) for row in rows)


def calls_of(store: Store, run_id: str) -> Iterator[dict]:
    """The current generation's model calls, read a stretch of PAGE positions at a time."""
    run, at = get_run(store, run_id), now()
    for first in range(0, (checkpoint_for(store, run_id).get("current_step") or 0) + 1, PAGE):
        yield from (_call(row, at) for row in calls_for(store, run, at, first, first + PAGE - 1))


def report_lists(store: Store, run: dict) -> dict[str, Iterator[dict]]:
    """The lists of `show --json` (besides run_view's run, checkpoint and budget), each read a page at a time."""
    return {"steps": steps_of(store, run), "journal": entries_of(store, run), "effects": effects_of(store, run["id"]),
            "events": events_of(store, run["id"]), "approvals": approvals_of(store, run["id"]),
            "model_calls": calls_of(store, run["id"])}


def steps_of(store: Store, run: dict) -> Iterator[dict]:
    """The current generation's steps, a page at a time."""
    return (step_of(row) for row in journal_pages(store, run["id"], run["generation"]))


def entries_of(store: Store, run: dict) -> Iterator[dict]:
    """Every generation's journal entries with their results decoded, a page at a time."""
    return (entry_of(store, row) for row in journal_pages(store, run["id"]))


def step_ends(store: Store, run: dict, each: int = 20) -> tuple[list[dict], int, list[dict]]:
    """The first and the last `each` steps of the current generation and how many there are in all: what
    `show` prints of a run of any length, read in two short pages."""
    first = journal_page(store, run["id"], generation=run["generation"], limit=each)
    total = recorded_positions(store.conn, run["id"], run["generation"])
    last = journal_page(store, run["id"], generation=run["generation"], limit=min(each, total - each),
                        newest_first=True) if total > each else []
    return [step_of(r) for r in first], total, [step_of(r) for r in reversed(last)]


def timeline_page(store: Store, run: dict, after: int | None = None, limit: int = PAGE,
                  newest_first: bool = False) -> list[dict]:
    """A page of the current generation's timeline by its position: each entry with its step. A result kept in an
    artifact (over 32 KB) is not read: a page of them would be megabytes, read again at every refresh; the viewer
    reads the one selected (`with_artifact`)."""
    return [{"position": row["position"], "entry": entry_of(store, row, read=False), "step": step_of(row)}
            for row in journal_page(store, run["id"], generation=run["generation"], after=after, limit=limit,
                                    newest_first=newest_first)]


def with_artifact(store: Store, entry: dict) -> dict:
    """The entry with its result read from its artifact (the entry itself when it has none)."""
    if not entry.get("artifact"):
        return entry
    return {**entry, "result": json.loads(artifacts.read(store, entry["artifact"]))}


def worker_log(store: Store, outcome: dict) -> tuple[str, str]:
    """A harness iteration's coding-agent log, as the artifact's name and its text.

    The log is named in agents/harness.py's outcome (`agent.log`, `agent.errors`). The text is the standard
    output, then the standard error when there is any. An outcome that
    names no log (found on the branch by its trailers, the built-in model worker's) raises UserError saying so, as
    does an artifact that cannot be read."""
    agent = outcome.get("agent") or {}
    if not agent.get("log"):
        how = "found on the branch by its trailers" if outcome.get("found_by") == "lookup" else \
            "worked by the built-in model worker, whose turns are the timeline's entries"
        raise UserError(f"iteration {outcome.get('iteration')} has no coding agent's log: it was {how}")
    try:
        text = artifacts.read(store, agent["log"]).decode("utf-8", errors="backslashreplace")
        errors = artifacts.read(store, agent["errors"]).decode("utf-8", errors="backslashreplace") \
            if agent.get("errors") else ""
    except OSError as e:
        raise UserError(f"cannot read the coding agent's log {agent['log']} ({e.strerror})") from None
    return agent["log"], text + (f"\n--- standard error ---\n{errors}" if errors else "")


def beside(store: Store, run: Mapping[str, Any], first: int, last: int | None) -> dict:
    """What the timeline shows beside its entries at positions first..last, by position.

    These are the ledger rows (epoch times), the questions and the model calls. When `last` is None the stretch
    goes to the run's end, where the run stands."""
    at, run = now(), get_run(store, run["id"])     # the live lease is read from the stored row
    calls: dict[int, list[dict]] = {}
    for call in calls_for(store, run, at, first, last):
        calls.setdefault(call["position"], []).append(_call(call, at))
    return {"effects": {e["position"]: e for e in effects_at(store, run["id"], run["generation"], first, last)},
            "approvals": {a["position"]: iso_times(a)
                          for a in approvals_at(store, run["id"], run["generation"], first, last)},
            "calls": calls}


def next_for_person(store: Store, view: dict, after: int) -> int | None:
    """The first position after `after` where a person is needed or was asked, or None when there is none.

    Such a position holds an effect in doubt, a question, the step where a soft budget threshold was crossed, or
    the step a budget stopped the run at. Past the last one, the search starts again from the start."""
    run, checkpoint = view["run"], view["checkpoint"]
    budget = [checkpoint.get("soft_position")]
    if budget_dimension(run["reason"]) and run["status"] not in TERMINAL:
        budget.append(checkpoint.get("current_step") or 0)
    for start in (after, -1):
        found = [p for p in (next_in_doubt(store, run["id"], run["generation"], start),
                             next_asked(store, run["id"], run["generation"], start), *budget)
                 if p is not None and p > start]
        if found:
            return min(found)
    return None


def run_report(store: Store, run_id: str) -> dict:
    """The whole report in memory, for a script's or a test's small run; `show --json` streams it."""
    view = run_view(store, run_id)
    parts = {**view, **{name: list(items) for name, items in report_lists(store, view["run"]).items()}}
    return {key: parts[key] for key in REPORT_KEYS}
