"""One or two sentences on where a run stands and which key acts on it: the strip under the runs
table, computed from the run's own rows, never a canned text per status."""

from __future__ import annotations

import json
from collections.abc import Callable

from ..format import held_by, minutes_ago
from ..report import budget_stop, retry_said, retry_wait, with_holders
from ..runtime.clock import iso, now
from ..runtime.liveness import worker_state
from ..states import Reason, RunStatus, WorkerState, budget_dimension
from ..store import Store
from ..store.approvals import pending as pending_approval
from ..store.effects import in_doubt
from ..store.events import last_event_like
from ..store.journal import checkpoint_for
from ..store.runs import get_run
from ..store.workers import knows, workers_listing

NO_WORKER = "no worker is running: press w then + to start one, or run `tui-agent worker`"


def _alive(store: Store) -> list[dict]:
    """The workers alive now, by the rule `tui-agent workers` uses (runtime/liveness.py)."""
    at = now()
    return [w for w in workers_listing(store) if worker_state(w, at) == WorkerState.ALIVE]


def workers_alive(store: Store) -> int:
    return len(_alive(store))


def who_claims(store: Store, agent: str) -> str:
    """What the strip says of who will claim a due run of `agent`.

    That is a live worker that knows the agent, else why none will. A row an older worker wrote knows every
    agent."""
    alive = _alive(store)
    if not alive:
        return f"\n{NO_WORKER}"
    if not any(knows(w, agent) for w in alive):
        return f"\nno running worker knows agent {agent!r}: start one with --agents MODULE, the module that defines it"
    return "; a worker will claim it"


def situation(store: Store, run_id: str) -> str:
    return situation_over_time(store, run_id)(now())


def situation_over_time(store: Store, run_id: str) -> Callable[[float], str]:
    """The strip read once: call it with an instant to say it then, so its relative times ("3 min ago")
    advance on a timer without reading the database again."""
    said = _said(store, run_id)
    return said if callable(said) else lambda at: said


def _held(store: Store, head: str, step: str, run: dict) -> Callable[[float], str]:
    """A running run nobody works: its worker's process is gone from this host, or its lease ran out; when a
    claim may take it, counting down."""
    until, alive = now() + run["claimable_in_s"], workers_alive(store)

    def said(at: float) -> str:
        left = until - at
        held = held_by(run["worker"], left) if run["holder_gone"] else \
            f"held by {run['worker']}, whose lease ran out; claimable now"
        then = "a worker takes it over then" if left > 0 else "a worker takes it over at its next look" if alive \
            else NO_WORKER
        return f"{head} · {held} · {step}\n{then}; p parks it, x cancels it"
    return said


def _said(store: Store, run_id: str) -> str | Callable[[float], str]:
    run = get_run(store, run_id)
    status, reason = run["status"], run["reason"]
    head = f"{run_id} · {run['agent']}"
    dimension = budget_dimension(reason)
    if status == RunStatus.WAITING and reason == Reason.RECONCILE:
        doubtful = in_doubt(store, run_id, run["generation"])
        if doubtful:
            e = doubtful[-1]
            window = e["dedupe_ttl_s"]
            left = window - (now() - e["attempted_at"]) if window and e["attempted_at"] else None
            memory = f"the service remembers it {left / 3600:.0f}h more" if left and left > 0 else \
                "the service does not deduplicate it now"
            return (f"{head} · {e['name']!r} may or may not have happened\n"
                    f"key {e['key']} · attempted {iso(e['attempted_at'])} by {e['attempted_by']} · {memory} · "
                    "c reconciles")
        return f"{head} · waits for a decision on an effect · c reconciles"
    if status == RunStatus.WAITING and reason == Reason.APPROVAL:
        question = pending_approval(store, run_id, run["generation"])
        return f"{head} · asks (a approves or denies): {question['question'] if question else '?'}"
    if dimension:
        stop = budget_stop(store, run_id, raise_with="b")
        if stop:
            return f"{head} · stopped by its {dimension} budget\n{stop}"
        limit = json.loads(run["budget"] or "{}").get(dimension)
        used = checkpoint_for(store, run_id).get(f"used_{dimension}")
        return (f"{head} · stopped by its {dimension} budget ({used:g} of {limit})\n"
                + ("b raises the ceiling and resumes it" if status != RunStatus.FAILED else "the run ended"))
    if reason == Reason.PLATEAU:
        last = last_event_like(store.conn, run_id, "%plateau%") or ""
        return f"{head} · made no progress: {last}\nr resumes with a fresh streak, x cancels"
    if status == RunStatus.WAITING and reason == Reason.RETRY:
        wait = retry_wait(run, checkpoint_for(store, run_id).get("step_attempts"))
        assert wait is not None      # retry_wait answers for every run waiting to retry
        last = f"\nthe last: {wait['last_error']}" if wait["last_error"] else ""
        return lambda at: f"{head} · waiting to retry: {retry_said(wait, at)}; a worker tries then, r tries now{last}"
    if status == RunStatus.WAITING and reason == Reason.SLEEP:
        return f"{head} · sleeping until {iso(run['wake_at'])}; a worker wakes it then"
    if status == RunStatus.PARKED:
        return f"{head} · parked ({reason}){': ' + run['error'] if run['error'] else ''}\nr resumes it"
    if status == RunStatus.RUNNING:
        cp = checkpoint_for(store, run_id)
        total = f"/{cp['total_steps']}" if cp.get("total_steps") else ""
        step = f"step {cp.get('current_step', 0)}{total} · attempt {run['attempt']}"
        held = with_holders(store, [dict(run)])[0]     # a plain dict: it gains the holder's keys
        if held["holder_gone"] or held["claimable_in_s"] == 0:
            return _held(store, head, step, held)
        return f"{head} · worked by {held['worker']} · {step}\np parks it, x cancels it (its worker stops at its " \
               "next write)"
    if status == RunStatus.QUEUED:
        claims = who_claims(store, run["agent"])
        return lambda at: f"{head} · queued ({reason}) {minutes_ago(run['created_at'], at)}{claims}"
    if status == RunStatus.FAILED:
        return f"{head} · failed ({reason}): {run['error'] or ''}"
    ended = f"{head} · {status}" + (f" ({reason})" if reason else "")
    finished = run["finished_at"]
    return (lambda at: f"{ended} {minutes_ago(finished, at)}") if finished else ended
