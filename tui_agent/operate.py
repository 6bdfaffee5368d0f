"""Operator actions, one function each, shared by the CLI and the TUI so a keystroke and a
command can never disagree."""

from __future__ import annotations

import getpass
import json
import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import filters
from .errors import UserError
from .format import held_by, usd_exact
from .report import with_holders
from .runtime import schedule
from .runtime.agent import BUDGET_DIMENSIONS, UNBOUNDED, raised_budget
from .runtime.clock import clock_time, iso, now
from .runtime.effects import sender_warning
from .runtime.registry import Registry
from .runtime.results import ARTIFACT_THRESHOLD, ResultNotJSON, decode, encode, place
from .runtime.worker import standing, worker_name
from .services import worktrees
from .services.worktrees import Worktree
from .states import (
    DECIDABLE,
    IN_DOUBT,
    TERMINAL,
    EffectState,
    EntryKind,
    EventKind,
    Reason,
    RunStatus,
    budget_dimension,
)
from .store import Store, saved_filters
from .store import prune as prune_runs
from .store import schedules as schedules_table
from .store.approvals import decide as decide_approval
from .store.approvals import pending as pending_approval
from .store.base import Connection, reopening
from .store.effects import find_effect, in_doubt, in_doubt_in_ended_runs, set_state, waiting_on_key
from .store.effects import requeue_released as requeue_held_back
from .store.events import add_event, add_schedule_event
from .store.exports import Carried, import_runs
from .store.imported import imported
from .store.journal import load_usage, record_failed_attempt
from .store.rows import EffectRow, RunRow
from .store.runs import (
    EditedEntry,
    RunNotFound,
    cancel,
    create_run,
    entry_at,
    get_run,
    recorded_positions,
    requeue,
    resolve_run,
    set_budget,
    takeover_why,
)
from .store.runs import fork as fork_run
from .store.runs import park as park_run
from .store.runs import restart as restart_run

FILTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")


def parse_budget(specs: list[str] | tuple[str, ...], source: str = "") -> dict[str, float]:
    """`cost_usd=0.50`, `steps=100`, `soft=0.8`: ceilings that override the agent's for one run. `source`
    names where a spec came from in an error (`--budget` on the command line); without it (the TUI's
    dialog) an error speaks of the spec alone. `unbounded` (no value) opts the run out of the default ceilings
    (runtime/agent.py `run_budget`): {"unbounded": True}."""
    limits: dict[str, float] = {}
    for spec in specs:
        where = f"{source} {spec!r}" if source else spec
        name, equals, text = spec.partition("=")
        name = name.strip()
        if name == UNBOUNDED and not equals:
            limits[UNBOUNDED] = True
            continue
        if name not in (*BUDGET_DIMENSIONS, "soft"):
            raise UserError(f"{where}: name one of {', '.join(BUDGET_DIMENSIONS)} or soft, as in cost_usd=0.50 "
                            f"(or give {UNBOUNDED} alone to opt out of the default ceilings)")
        if not equals:
            raise UserError(f"{where}: give the ceiling after '=', as in {name}={_example(name)}")
        limits[name] = _budget_value(where, name, text)
    return limits


_MEASURED = ("cost_usd", "wall_s", "soft")  # every other dimension counts things


def _example(name: str) -> str:
    return {"soft": "0.8", "cost_usd": "0.50", "wall_s": "1800"}.get(name, "100")


def _budget_value(where: str, name: str, text: str) -> float:
    """One ceiling, refused unless it bounds something: no count reaches NaN or infinity (the ceiling
    would silently be unlimited), and a count has no fractions."""
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{where}: the value must be a number, as in {name}={_example(name)}") from None
    if not math.isfinite(value):
        raise UserError(f"{where}: the value must be a finite number, as in {name}={_example(name)}; "
                        "leave the dimension out to keep the agent's ceiling")
    if value <= 0 or (name == "soft" and value >= 1):
        raise UserError(f"{where}: must be above 0" + (" and below 1" if name == "soft" else ""))
    if name in _MEASURED:
        return value
    if not value.is_integer():
        raise UserError(f"{where}: {name} is a count, so it takes a whole number, as in {name}={math.ceil(value)}")
    return int(value)


def start(store: Store, registry: Registry, *, agent_name: str, request: Any, key: str | None = None,
          model: str = "default", budget: dict[str, float] | None = None) -> tuple[str, bool]:
    """Queue a run of `agent_name`; with `key`, starting twice gives the same run (created False)."""
    return create_run(store, now=now(), run_key=key, **registry.run_fields(agent_name, request, model, budget))


def _person() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in this environment
        return "someone"


def _with_note(message: str, note: str | None) -> str:
    return message + (f" ({note})" if note else "")


# -- Which action applies to a run in which state: one predicate per action, None when it applies.
# Each action asks inside its own write transaction; the TUI asks before it opens a modal or offers a
# command, so the two can never disagree about the rule (only about a moment, which the write settles).


def why_not_park(run: Mapping[str, Any]) -> str | None:
    if run["status"] in TERMINAL:
        return "it has ended; nothing to park"
    return "it is parked already" if run["status"] == RunStatus.PARKED else None


def why_not_cancel(run: Mapping[str, Any]) -> str | None:
    return "it has ended; nothing to cancel" if run["status"] in TERMINAL else None


def why_not_resume(run: Mapping[str, Any]) -> str | None:
    """Why a run may not resume now, or None when it may.

    A running run resumes only when a claim could take it now (its lease is over, or its worker is verifiably gone
    from this host): `claimable_in_s`, as report.with_holders adds it; a run without it is judged held."""
    if run["status"] == RunStatus.PARKED or (run["status"] == RunStatus.WAITING and (
            _waits_on_harness(run["reason"]) or run["reason"] == Reason.RETRY)):
        return None
    if run["status"] == RunStatus.RUNNING and run.get("claimable_in_s") == 0:
        return None
    if run["status"] == RunStatus.RUNNING and run.get("holder_gone"):
        return f"it is {held_by(run['worker'], run['claimable_in_s'])} (then a worker takes it over)"
    deciders: dict[str, str] = {Reason.APPROVAL: "tui-agent approve", Reason.RECONCILE: "tui-agent reconcile"}
    waits_for = deciders.get(run["reason"] or "")
    if run["status"] == RunStatus.WAITING and waits_for:
        return f"it is not parked: it waits for a decision, use {waits_for}"
    if run["status"] in TERMINAL:
        return "it has ended; " + _how_to_go_on(run)
    return ("it is not parked (resume continues a parked run, or one stopped by its budget or a plateau, and tries a "
            "run waiting to retry now)")


def _how_to_go_on(run: Mapping[str, Any]) -> str:
    """An ended run goes on only as a fork from one of its steps, or (failed, cancelled) from zero again."""
    fork_it = f"go on from a step with tui-agent fork {run['id']} --from-step N"
    if why_not_restart(run):
        return fork_it
    return f"{fork_it}, or from zero with tui-agent resume {run['id']} --restart"


def why_not_restart(run: Mapping[str, Any]) -> str | None:
    if run["status"] in (RunStatus.PARKED, RunStatus.FAILED, RunStatus.CANCELLED):
        return None
    return "only a parked, failed or cancelled run can be restarted (park it first)"


def why_not_approve(run: Mapping[str, Any], question: Mapping[str, Any] | None) -> str | None:
    if run["status"] == RunStatus.WAITING and run["reason"] == Reason.APPROVAL and question is not None:
        return None
    return "it is not waiting for an approval"


def why_not_decide(run: Mapping[str, Any], effect: Mapping[str, Any] | None = None,
                   allowed: tuple[str, ...] = ()) -> str | None:
    """Why a person cannot reconcile this run now, or None.

    A person decides for a run that waits for it, was parked, or whose worker's lease ran out (the worker died).
    With `effect`, only while that effect is in one of the `allowed` states."""
    if run["status"] == RunStatus.RUNNING and (run["lease_expires_at"] or 0) > now():
        return f"{run['worker']} holds it; wait until its lease ends"
    if run["status"] in TERMINAL:
        return "it has ended; nothing to decide"
    if not (run["status"] in (RunStatus.PARKED, RunStatus.RUNNING)
            or (run["status"], run["reason"]) == (RunStatus.WAITING, Reason.RECONCILE)):
        return "it is not waiting for a decision on an effect"
    if effect is not None and effect["state"] not in allowed:
        return (f"effect {effect['name']} is {effect['state']}; only an effect that is {' or '.join(allowed)} "
                "can be decided")
    return None


def why_not_ceiling(limits: dict[str, float], used: dict[str, float]) -> str | None:
    """A raised ceiling at or below what the run has already used would stop it again at its next call."""
    for name, limit in limits.items():
        if name in used and limit <= used[name]:
            spent = f"spent {usd_exact(used[name])}" if name == "cost_usd" else f"used {used[name]:g} {name}"
            return f"{name}: already {spent}; enter more than that"
    return None


def why_not_fork(recorded: int, from_step: int) -> str | None:
    if 0 <= from_step <= recorded:
        return None
    return f"it has {recorded} recorded positions; --from-step must be 0 to {recorded}"


def _waits_on_harness(reason: str | None) -> bool:
    """Waiting on its budget or a plateau: a person resumes it (perhaps with a higher ceiling)."""
    return budget_dimension(reason) is not None or reason == Reason.PLATEAU


def _refuse(store: Store, run: Mapping[str, Any], why: str) -> UserError:
    """The one-line refusal, saying what the run is now and what last happened to it.

    What last happened is often the other actor's decision that won a race, so the loser learns what happened
    instead."""
    return UserError(f"{run['id']} {standing(store, run)}; {why}; nothing changed")


def why_not_imported(found: Mapping[str, Any] | None) -> str | None:
    """Every action but a fork refuses a run imported from another database (store/imported.py: `found`)."""
    if found is None:
        return None
    return (f"it was imported from {found['source']} (exported {iso(found['exported_at'])}) to be read, diffed, "
            "replayed and forked here, not to be run or decided on: its source may still run it, and both would do "
            "its pending effects; fork it to go on here, or take an ended or parked run over with tui-agent import "
            "FILE --adopt")


def _current(store: Store, run_ref: str, why_not: Callable[[dict[str, Any]], str | None] | None = None,
             held: bool = False, forking: bool = False) -> dict[str, Any]:
    """The run as it is now, read inside the action's write, refused unless the action applies to it.

    An imported run takes only `forking`. With `held`, the run comes with what can be told of its holder
    (report.with_holders)."""
    run: dict[str, Any] = dict(get_run(store, resolve_run(store, run_ref)))   # fork and takeover_why take a dict
    if held:
        run = with_holders(store, [run])[0]
    why = "prune is removing it" if run["pruned_at"] is not None else None
    why = why or (None if forking else why_not_imported(imported(store.conn, run["id"])))
    why = why or (why_not(run) if why_not else None)
    if why:
        raise _refuse(store, run, why)
    return run


def _deciding(store: Store, run_ref: str, effect_ref: str,
              allowed: tuple[str, ...]) -> tuple[dict[str, Any], EffectRow]:
    """Inside a reconcile decision's write: the run and its effect as they are now, refused unless the
    decision applies to both."""
    run = _current(store, run_ref, why_not_decide)
    effect = find_effect(store, run["id"], run["generation"], effect_ref)
    why = why_not_decide(run, effect, allowed)
    if why:
        raise _refuse(store, run, why)
    return run, effect


def _decided(conn: Connection, run: Mapping[str, Any], message: str, who: str, at: float) -> None:
    """Inside a write: a person's decision on the record, and the run handed back to the workers."""
    add_event(conn, run["id"], at=at, kind=EventKind.DECISION, message=message, worker=who)
    requeue(conn, run["id"], expected=run["status"], reason=Reason.RESUMED, message=f"queued: {message}", now=at)


def _decide(store: Store, run_ref: str, *, effect_ref: str, allowed: tuple[str, ...], state: str | None, what: str,
            note: str | None, result: str | None = None, needs_lookup: bool = False, at: float | None = None) -> str:
    """Make one reconcile decision in one write.

    The run and the effect are checked as they are now; the effect is moved only from the state that was checked, and
    the run re-queued only from the status that was checked. `at` is the decision's time when it is not the process
    clock's (the simulator's scenario)."""
    at, who = now() if at is None else at, _person()
    with store.write() as conn:
        run, effect = _deciding(store, run_ref, effect_ref, allowed)
        if needs_lookup and not effect["has_lookup"]:
            raise UserError(f"effect {effect['name']} has no lookup, so the service cannot be asked; decide with "
                            "--happened or --not-done")
        message = _with_note(f"{effect['name']}: {who} {what}", note)
        if state is None:
            _decided(conn, run, message, who, at)
            return run["id"]
        fields: dict[str, Any] = {"decided_by": who, "decided_at": at, "note": note}
        if result is not None:
            fields["result"] = result
        set_state(conn, effect["id"], state, at, expected=effect["state"], **fields)
        for ended in in_doubt_in_ended_runs(conn, effect["key"], run["id"]):   # the key's doubt, left by a cancel
            set_state(conn, ended["id"], state, at, expected=ended["state"],
                      **fields | {"note": _with_note(f"decided in run {run['id']}", note)})
            add_event(conn, ended["run_id"], at=at, kind=EventKind.DECISION, worker=who,
                      message=f"{ended['name']}: key {effect['key']} decided in run {run['id']}: {who} {what}")
        _decided(conn, run, message, who, at)
        for other in waiting_on_key(conn, effect["key"], run["id"]):  # runs that held back on this key go on
            requeue(conn, other, expected=RunStatus.WAITING, reason=Reason.RESUMED,
                    message=f"queued: key {effect['key']} was decided in run {run['id']}", now=at)
    return run["id"]


def reconcile_happened(store: Store, run_ref: str, *, effect_ref: str, result: Any = None,
                       note: str | None = None, at: float | None = None) -> str:
    """A person says the effect happened: it is confirmed (with `result`) and the run goes on without redoing it."""
    return _decide(store, run_ref, effect_ref=effect_ref, allowed=DECIDABLE, state=EffectState.CONFIRMED,
                   what="says it happened", note=note, result=json.dumps(result, ensure_ascii=False), at=at)


def reconcile_not_done(store: Store, run_ref: str, *, effect_ref: str, note: str | None = None,
                       warn: Callable[[str], None] | None = None, at: float | None = None) -> str:
    """A person says it did not happen: the next worker does it again with the same key. If the worker that
    attempted it may still send it (its process lives, paused or hung), `warn` hears so; the answer stands."""
    warning = _sender_warning(store, run_ref, effect_ref) if warn is not None else None
    run_id = _decide(store, run_ref, effect_ref=effect_ref, allowed=DECIDABLE, state=EffectState.NOT_DONE,
                     what="says it did not happen", note=note, at=at)
    if warn is not None and warning:
        warn(warning)
    return run_id


def _sender_warning(store: Store, run_ref: str, effect_ref: str) -> str | None:
    """Read before the decision (which moves the effect on); a run or effect that is not there is left for the
    decision to refuse in its own words."""
    try:
        run = get_run(store, resolve_run(store, run_ref))
        return sender_warning(store.conn, dict(find_effect(store, run["id"], run["generation"], effect_ref)))
    except UserError:
        return None


def reconcile_ask(store: Store, run_ref: str, effect_ref: str, note: str | None = None) -> str:
    """Ask the service: the next worker to claim the run looks the key up (the CLI never runs agent code)."""
    return _decide(store, run_ref, effect_ref=effect_ref, allowed=IN_DOUBT, state=None,
                   what="asked the service to look the key up", note=note, needs_lookup=True)


def abandon(store: Store, run_ref: str, effect_ref: str, note: str | None = None) -> str:
    """A person gives up on the run, which is cancelled with reason person.

    The effect stays as it was, on record."""
    with store.write() as conn:
        run, effect = _deciding(store, run_ref, effect_ref, (EffectState.UNKNOWN, EffectState.INTENDED,
                                                             EffectState.NOT_DONE, EffectState.ATTEMPTED))
        cancel(conn, run["id"], run["status"],
               _with_note(f"cancelled: {_person()} abandoned the run at {effect['name']}", note), now())
    return run["id"]


def approve(store: Store, run_ref: str, deny: bool = False, note: str | None = None) -> str:
    """Answer the question the run waits on; the agent's `ctx.approval` returns the answer on resume."""
    at, who = now(), _person()
    decision = "denied" if deny else "approved"
    with store.write() as conn:
        run = _current(store, run_ref)
        question = pending_approval(store, run["id"], run["generation"])
        why = why_not_approve(run, question)
        if why:
            raise _refuse(store, run, why)
        assert question is not None   # why_not_approve refuses a run with no question
        decide_approval(conn, question["id"], decision=decision, note=note, who=who, now=at)
        _decided(conn, run, _with_note(f"{question['name']}: {decision} by {who}", note), who, at)
    return run["id"]


def answered(deny: bool) -> str:
    """What an answer does, said the same way by the CLI and the TUI."""
    if deny:
        return "denied; the run is queued again to take the answer (unless its agent asks otherwise, it ends cancelled)"
    return "approved; the run is queued again"


def park(store: Store, run_ref: str, note: str | None = None) -> str:
    """Stop a run resumably; a running run's worker is refused at its next write and stops."""
    with store.write() as conn:
        run = _current(store, run_ref, why_not_park)
        park_run(conn, run["id"], expected=run["status"], message=_with_note(f"parked by {_person()}", note), now=now())
    return run["id"]


def cancel_run(store: Store, run_ref: str, note: str | None = None) -> str:
    """End a run for good; a running run's worker is refused at its next write and stops."""
    with store.write() as conn:
        run = _current(store, run_ref, why_not_cancel)
        cancel(conn, run["id"], run["status"], _with_note(f"cancelled by {_person()}", note), now())
    return run["id"]


# -- Many runs at once: each run decided in its own write by its one-run action above, with that action's rule.

BULK_ACTIONS = ("park", "resume", "cancel", "approve", "deny", "reconcile-ask")
BULK_DONE = {"park": "parked", "resume": "resumed", "cancel": "cancelled", "approve": "approved", "deny": "denied",
             "reconcile-ask": "asked the service about"}


def _asked_about(store: Store, run: Mapping[str, Any]) -> tuple[EffectRow | None, str | None]:
    """The effect a reconcile-ask asks the service about (the run's last one in doubt) and why it cannot be asked."""
    why = why_not_decide(run)
    if why:
        return None, why
    doubtful = in_doubt(store, run["id"], run["generation"])
    if not doubtful:
        return None, "it has no effect in doubt"
    effect = doubtful[-1]
    if not effect["has_lookup"]:
        return effect, f"effect {effect['name']} has no lookup, so the service cannot be asked; decide with " \
            "--happened or --not-done, one run at a time"
    return effect, None


def why_not_bulk(store: Store, action: str, run: Mapping[str, Any]) -> str | None:
    """Whether `action`, one of BULK_ACTIONS, applies to `run` as read now.

    It is the rule its one-run action checks again inside its own write, so a preview (`--dry-run`, the TUI's
    count) and the act can differ only by a moment."""
    if action == "park":
        return why_not_park(run)
    if action == "cancel":
        return why_not_cancel(run)
    if action == "resume":
        return why_not_resume(with_holders(store, [run])[0])
    if action in ("approve", "deny"):
        return why_not_approve(run, pending_approval(store, run["id"], run["generation"]))
    return _asked_about(store, run)[1]


def _act_on(store: Store, action: str, run_id: str, note: str | None) -> None:
    if action == "park":
        park(store, run_id, note)
    elif action == "cancel":
        cancel_run(store, run_id, note)
    elif action == "resume":
        resume(store, run_id)
    elif action in ("approve", "deny"):
        approve(store, run_id, deny=action == "deny", note=note)
    else:
        run = get_run(store, resolve_run(store, run_id))
        effect, why = _asked_about(store, run)
        if why:
            raise _refuse(store, run, why)
        assert effect is not None   # _asked_about gives a reason whenever it has no effect
        reconcile_ask(store, run_id, str(effect["position"]), note)   # which checks the run and effect again


@dataclass(frozen=True)
class Decided:
    """What a bulk action did: the runs it acted on, and one line for each run it refused (what stood in the way)."""

    action: str
    done: tuple[str, ...]
    refused: tuple[str, ...]

    def summary(self) -> str:
        total = len(self.done) + len(self.refused)
        said = f"{BULK_DONE[self.action]} {len(self.done)} of {total} run{'s' * (total != 1)}"
        return said + (f"; {len(self.refused)} refused:" if self.refused else "")


def bulk(store: Store, action: str, run_ids: list[str], note: str | None = None,
         each: Callable[[str, str | None], None] | None = None) -> Decided:
    """Do `action`, one of BULK_ACTIONS, on each of `run_ids` in turn, each in its own write.

    Each goes by the same function and rule as one at a time: a run that changed meanwhile (ended, decided, taken)
    is refused with the one line that says so, never overwritten. `each(run_id, refusal)` hears of every run as
    it is decided (refusal None: done). What the environment stops (busy, read-only, full) stops the whole
    action; the runs done by then stay done."""
    if action not in BULK_ACTIONS:
        raise UserError(f"{action!r} is not an action for many runs; use one of {', '.join(BULK_ACTIONS)}")
    done, refused = [], []
    for run_id in run_ids:
        try:
            _act_on(store, action, run_id, note)
        except UserError as e:
            refused.append(str(e))
            if each:
                each(run_id, str(e))
            continue
        done.append(run_id)
        if each:
            each(run_id, None)
    return Decided(action, tuple(done), tuple(refused))


def bulk_preview(store: Store, run_ids: list[str], actions: tuple[str, ...] = BULK_ACTIONS) -> dict[str, Decided]:
    """What `bulk` would do with each of `actions` to `run_ids` as they are now, written nowhere.

    Each run is read once. For each action it gives the runs it applies to, and for the others the line that says
    why not (`--dry-run`, the question asked before acting, the TUI's confirmation)."""
    done: dict[str, list[str]] = {action: [] for action in actions}
    refused: dict[str, list[str]] = {action: [] for action in actions}
    for run_id in run_ids:
        try:
            run = get_run(store, run_id)
        except RunNotFound as e:   # removed since it was selected (pruned)
            for action in actions:
                refused[action].append(f"{e}: it was removed meanwhile")
            continue
        for action in actions:
            why = why_not_bulk(store, action, run)
            if why:
                refused[action].append(f"{run_id} {standing(store, run)}; {why}")
            else:
                done[action].append(run_id)
    return {action: Decided(action, tuple(done[action]), tuple(refused[action])) for action in actions}


# -- Keeping the database small.

def prune_plan(store: Store, older_than_s: float, statuses: tuple[str, ...] = prune_runs.PRUNABLE,
               keep_last: int | None = None) -> prune_runs.Plan:
    """Which ended runs `prune` would remove, with nothing written.

    These are the runs of `statuses` that ended more than `older_than_s` ago, but not the newest `keep_last` of
    each agent, one a fork still needs, or one with an effect in doubt."""
    return prune_runs.plan(store, statuses, now() - older_than_s, keep_last)


def prune(store: Store, chosen: prune_runs.Plan, progress: Callable[[prune_runs.Pruned], None] | None = None,
          ) -> prune_runs.Pruned:
    """Remove the runs of a `prune_plan`, each checked again as its turn comes.

    They go in batches that let workers' commits through (store/prune.py). Their effects' keys and run keys are
    kept."""
    return prune_runs.remove(store, chosen, now(), progress)


def vacuum(store: Store) -> dict:
    """Give a SQLite file's free pages back, and return its free space before and after.

    With incremental auto-vacuum it goes in prune's batches. Without it, the file is rewritten with it (the
    write lock for the whole rewrite; the disks must hold the file twice more). The free space is
    store/prune.py's free_space."""
    before = prune_runs.free_space(store)
    if before["incremental"]:
        prune_runs.give_back(store)
    else:
        prune_runs.room_to_rewrite(store)
        prune_runs.rewrite(store)
    return {"before": before, "after": prune_runs.free_space(store)}


def _retrying(run: Mapping[str, Any]) -> bool:
    return (run["status"], run["reason"]) == (RunStatus.WAITING, Reason.RETRY)


def resumed(run: Mapping[str, Any], restart: bool = False) -> str:
    """What `resume` does to `run` (as it was before), said the same way by the CLI and the TUI."""
    if restart:
        return "restarted from zero"
    return "tries again now (it was waiting to retry)" if _retrying(run) else "resumed"


def resume(store: Store, run_ref: str, restart: bool = False, budget: dict[str, float] | None = None) -> str:
    """Re-queue a parked run where it stopped, or one waiting on its budget or a plateau.

    `budget` raises its ceilings. With `restart`, it starts from zero in a new journal generation. A parked run's step
    gets a fresh set of attempts (and of patience, for a service that was not reachable). A run waiting to retry is
    queued now: its next attempt is made at once, counted on from the attempts it made."""
    who, at = _person(), now()
    with store.write() as conn:
        run = _current(store, run_ref, why_not_restart if restart else why_not_resume, held=True)
        why = None if restart or not budget else why_not_ceiling(budget, load_usage(store, run["id"])[0])
        if why:
            raise _refuse(store, run, why)
        taken = takeover_why(conn, run, at) if run["status"] == RunStatus.RUNNING and not restart else None
        if run["status"] == RunStatus.RUNNING and not restart and taken is None:
            raise _refuse(store, run, f"{run['worker']}'s process is gone, but what was left of its process group "
                          "survived SIGKILL: its lease decides")
        if budget:
            before = json.loads(run["budget"] or "{}")
            after = raised_budget(before, budget)
            set_budget(conn, run["id"], after)
            raised = ", ".join(f"{k} {before.get(k)} -> {after.get(k)}" if k != UNBOUNDED else
                               "unbounded (no default ceilings)" for k in budget)
            add_event(conn, run["id"], at=at, kind=EventKind.BUDGET, message=f"budget changed by {who}: {raised}",
                      worker=who)
        if restart:
            restart_run(conn, run["id"], run["status"], f"restarted from zero by {who} in generation {{generation}} "
                        f"(generation {run['generation']} stays readable)", at)
        elif _retrying(run):
            requeue(conn, run["id"], expected=run["status"], reason=Reason.RESUMED,
                    message=f"{who} asked for the next attempt now (it was "
                            f"waiting to retry until {clock_time(run['wake_at'])})", now=at)
        else:
            if run["status"] == RunStatus.PARKED:
                record_failed_attempt(conn, run["id"], 0, at)
            requeue(conn, run["id"], expected=run["status"], reason=Reason.RESUMED,
                    message=f"resumed by {who}" + (f": {taken}" if taken else ""), now=at)
    return run["id"]


def fork(store: Store, run_ref: str, from_step: int) -> str:
    """A new run that keeps the parent's journal before `from_step` and runs the rest anew."""
    with store.write() as conn:
        parent = _current(store, run_ref, forking=True)
        why = why_not_fork(recorded_positions(conn, parent["id"], parent["generation"]), from_step)
        if why:
            raise _refuse(store, parent, why)
        return fork_run(conn, parent, from_step, now())


EDITABLE = ("step", "model")
_NOT_EDITABLE = {
    "effect": "an effect's result is the world's, decided through reconcile, not edited",
    "tool": "a tool's result is what the tool returned; edit the model reply before it instead",
    "sleep": "a sleep records when to wake, not a result",
    "approval": "an approval is a person's decision, not a result",
    "progress": "a progress entry is a measure the plateau detector reads, not a result",
    "failure": "a failure entry records an error, not a result",
}


def why_not_edit(kind: str) -> str | None:
    """Only a step's result or a model's reply may be edited before a fork."""
    if kind in EDITABLE:
        return None
    return _NOT_EDITABLE.get(kind, f"it is a {kind!r} entry") + "; only a step's result or a model reply can be edited"


def why_not_edited(kind: str, recorded: Any, edited: Any) -> str | None:
    """What is wrong with `edited` in place of `recorded`, or None.

    A model reply must stay a reply: an object with `role` "assistant" and `content` a list of blocks. An edit
    that changes nothing forks nothing."""
    if kind == EntryKind.MODEL:
        if not isinstance(edited, dict):
            return f"an edited model reply must be a JSON object (a Messages API reply), not a {_json_type(edited)}"
        if edited.get("role") != "assistant":
            return f"an edited model reply must keep \"role\": \"assistant\" (it has {json.dumps(edited.get('role'))})"
        content = edited.get("content")
        if not isinstance(content, list):
            return f"an edited model reply's \"content\" must be a list of blocks (it is a {_json_type(content)})"
        if not all(isinstance(block, dict) and isinstance(block.get("type"), str) for block in content):
            return "each block of an edited model reply's \"content\" must be an object with a \"type\""
    if _canonical(edited) == _canonical(recorded):
        return "the edited result is the same as the recorded one: nothing to fork"
    return None


def _json_type(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _canonical(value: Any) -> str:
    """One text per JSON value: key order and layout do not count, types do (1, 1.0 and true differ)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def recorded_entry(store: Store, run_ref: str, position: int) -> dict:
    """Entry `position` of RUN's current generation, as an edit starts from.

    It holds run_id, generation, position, name, kind and its result (read from its artifact when it has one);
    refused unless it is a step or a model reply."""
    run = get_run(store, resolve_run(store, run_ref))
    row = entry_at(store.conn, run["id"], run["generation"], position)
    if row is None:
        recorded = recorded_positions(store.conn, run["id"], run["generation"])
        raise UserError(f"{run['id']} has no entry #{position}; its entries are #0 to #{recorded - 1}"
                        if recorded else f"{run['id']} has no entries yet; nothing to edit")
    why = why_not_edit(row["kind"])
    if why:
        raise UserError(f"{run['id']} #{position} {row['name']} ({row['kind']}): {why}")
    return {"run_id": run["id"], "generation": run["generation"], "position": position, "name": row["name"],
            "kind": row["kind"], "result": decode(store, row["result"], row["artifact"])}


def fork_edited(store: Store, run_ref: str, *, position: int, result: Any, name: str | None = None,
                generation: int | None = None) -> str:
    """Fork RUN into a new run that holds a person's edit at `position` and runs everything after it anew.

    The new run keeps RUN's entries before `position`. At `position` it holds `result`, the person's edit of the
    step result or model reply recorded there, marked edited. `name` and
    `generation`, when given, are the entry the person edited: the fork is refused if RUN no longer holds it
    there (restarted meanwhile). Checked and forked in one write; the parent is not changed."""
    try:
        encoded = encode(result, "the edited result")
    except ResultNotJSON as e:
        raise UserError(str(e)) from None
    with store.write() as conn:
        parent = _current(store, run_ref, forking=True)
        row = entry_at(conn, parent["id"], parent["generation"], position)
        if row is None:
            raise _refuse(store, parent, f"it has no entry #{position} to edit")
        if name is not None and row["name"] != name or generation is not None and parent["generation"] != generation:
            raise _refuse(store, parent, f"#{position} is no longer the {name} of generation {generation} that "
                          "was edited")
        why = why_not_edit(row["kind"]) or why_not_edited(
            row["kind"], decode(store, row["result"], row["artifact"]), result)
        if why:
            raise UserError(f"{parent['id']} #{position} {row['name']}: {why}; nothing changed")
        large = len(encoded) > ARTIFACT_THRESHOLD
        edit = EditedEntry(encoded, (lambda *where: place(store, *where)) if large else None, _person())
        return fork_run(conn, parent, position, now(), edited=edit)


def import_export(store: Store, source: Store, meta: dict, file: str, adopt: bool = False) -> Carried:
    """Load the export `source` into `store`.

    `source` is read from `file`, its `meta` checked by exports.open_export. With `adopt`, take the runs it was
    made of over (exports.py)."""
    return import_runs(source, meta, target=store, file=file, adopt=adopt, who=_person())


def remove_worktree(store: Store, run_ref: str) -> Worktree:
    """Remove the worktree RUN names, once every run that goes on in it has ended; its branch stays
    (worktrees.py). Refused, with nothing removed, while a run may still need it or it holds uncommitted changes."""
    run = get_run(store, resolve_run(store, run_ref))
    tree = worktrees.of_run(store, run["id"])
    if tree is None:
        raise _refuse(store, run, "it names no worktree that git knows (git worktree list)")
    try:
        return worktrees.remove(store, tree, _person(), now())
    except ValueError as e:
        raise _refuse(store, run, f"its worktree {tree.path} stays: {e}") from None


def clean_worktrees(store: Store, trees: list[Worktree]) -> list[tuple[Worktree, str | None]]:
    """Remove each worktree whose runs, read again, have all ended, as `tui-agent worktrees --clean` does.

    The worktrees come from worktrees.listing. Each is returned with None when it was removed, else with why it
    stays."""
    done: list[tuple[Worktree, str | None]] = []
    for tree in trees:
        try:
            done.append((worktrees.remove(store, tree, _person(), now()), None))
        except ValueError as e:
            done.append((tree, str(e)))
    return done


def schedule_add(store: Store, registry: Registry, *, name: str, agent: str, cron: str, tz: str = "UTC",
                 request: Any = None, missed: str = "once", overlap: str = "skip",
                 grace_s: float = schedule.GRACE_S, model: str = "default") -> dict:
    """A new schedule; fires before now never count."""
    schedule.check_name(name)
    # the agent, input and model are usable; a scripted:FILE's replies are kept, for a fire in any folder
    script = registry.run_fields(agent, request if request is not None else {}, model)["script"]
    schedule.check_cron(cron)
    schedule.zone(tz)
    at = now()
    row = {"name": name, "agent": agent, "cron": cron, "tz": tz, "input": json.dumps(request or {}),
           "missed": missed, "overlap": overlap, "grace_s": grace_s, "enabled": 1, "counts_from": at,
           "next_fire_at": schedule.next_fire(cron, tz, at), "created_at": at, "model": model,
           "script": script}
    schedules_table.add(store, row)
    return row


def schedule_enable(store: Store, name: str, enabled: bool) -> None:
    """Disable, or enable again: fires while it was disabled never count."""
    with store.write() as conn:
        row = schedules_table.get(conn, name)
        at = now()
        fields: dict[str, float] = {"enabled": int(enabled)}
        if enabled and not row["enabled"]:
            fields.update(counts_from=at, next_fire_at=schedule.next_fire(row["cron"], row["tz"], at))
        schedules_table.update(conn, name, **fields)
        add_schedule_event(conn, name, at=at, kind="schedule",
                           message=f"{'enabled' if enabled else 'disabled'} by {_person()}")


def schedule_remove(store: Store, name: str) -> None:
    schedules_table.remove(store, name)


def schedule_fire(store: Store, registry: Registry, name: str) -> schedule.Fired:
    """Fire a schedule now: the runs started, or the run whose overlap policy held the fire back."""
    return schedule.fire_now(store, registry, name)


def schedule_tick(store: Store, registry: Registry) -> list[str]:
    """Fire what is due of the schedules whose agent this process knows, as a worker's pass does; the runs started."""
    return schedule.tick(store, registry)


def requeue_released(store: Store) -> list[str]:
    """Queue again the runs that waited only because a worker might still send an effect, that worker having let
    go (store.effects.requeue_released); their ids."""
    return requeue_held_back(store, now())


def save_filter(store: Store, name: str, words: str) -> str:
    """Keep the filter `words` under `name`, replacing what that name held, and say what happened in a line.

    The words (tui_agent/filters.py) are refused unless they parse and select something; the name follows the
    rule of schedule names."""
    if not FILTER_NAME.fullmatch(name):
        raise UserError(f"filter name {name!r}: use 1 to 40 letters, digits and - _ . starting with a letter or "
                        "digit, such as failed-nightly")
    where = filters.parse(words)
    if not where:
        raise UserError("an empty filter selects every run; give the words to keep, such as status:failed")
    replaced = saved_filters.save(store, name, str(where), now())
    return f"filter {name} {'now selects' if replaced else 'selects'}: {where}"


def forget_filter(store: Store, name: str) -> str:
    if not saved_filters.forget(store, name):
        raise UserError(f"no filter named {name!r}; see tui-agent filter ls")
    return f"filter {name} forgotten"


def start_worker(store: Store, durability: str = "full", agent_modules: Sequence[str] = (),
                 name: str | None = None, log_dir: Path | None = None) -> subprocess.Popen:
    """Start a worker in its own process, since the TUI never runs agent code itself.

    It logs to `log_dir/NAME.log` (the data folder's logs/ unless given) as `worker --log` does, so its row says
    where; whatever it prints before it reads that option (an --agents module that fails) lands there too. The
    database is named in its environment, not its command line, which any user's `ps` shows (a URL's password)."""
    name = name or worker_name()
    command = [sys.executable, "-m", "tui_agent", "--durability", durability]
    for module in agent_modules:
        command += ["--agents", module]
    log_dir = (log_dir or store.data_dir / "logs").absolute()
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"{name}.log"
    with open(path, "ab", opener=lambda file, flags: os.open(file, flags, 0o600)) as log:   # it may quote a secret
        return subprocess.Popen([*command, "worker", "--log", str(path), "--name", name], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "TUI_AGENT_DB": reopening(store.path)})


def stop_worker(pid: int, kill: bool = False) -> None:
    """SIGTERM (finish the current step, hand the runs back) or SIGKILL (as a crash would)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists() and b"tui_agent" not in cmdline.read_bytes() and b"tui-agent" not in cmdline.read_bytes():
        raise UserError(f"process {pid} is not a tui-agent worker any more (its pid was reused); nothing sent")
    try:
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    except ProcessLookupError:
        raise UserError(f"no process {pid}: the worker has already stopped") from None
    except PermissionError:
        raise UserError(f"process {pid} belongs to another user; stop it from there") from None


# -- the harness agent's person in the loop (agents/harness.py, agents/harness_person.py) ---------------------------

def why_not_harness(run: Mapping[str, Any]) -> str | None:
    """Why a person cannot change this run's workspace now, or None.

    The reason may be a rule or a ceiling. Only a harness run that waits or is parked can be changed; its
    worktree is the run's while it is queued or running."""
    if run["agent"] != "harness":
        return f"it is a run of {run['agent']}, not of the harness"
    if run["status"] in TERMINAL:
        return "it has ended"
    if run["status"] not in (RunStatus.PARKED, RunStatus.WAITING):
        return ("its worktree is the run's while it is queued or running: do this when it waits for you, or park "
                f"it first (tui-agent park {run['id']})")
    return None


def _harness_run(store: Store, run_ref: str) -> tuple[RunRow, Any, Any]:
    """A harness run that waits for a person or is parked, with its settings and worktree as it recorded them.

    It is refused for another agent's run, a run a worker holds, and one that ended."""
    run = get_run(store, resolve_run(store, run_ref))
    why = why_not_harness(run)
    if why:
        raise _refuse(store, run, why)
    rows = (entry_at(store.conn, run["id"], run["generation"], position) for position in (0, 1))
    recorded = [row for row in rows if row is not None]
    if [row["name"] for row in recorded] != ["settings", "worktree"]:
        raise _refuse(store, run, "it has no worktree yet")
    settings, place = (decode(store, row["result"], row["artifact"]) for row in recorded)
    return run, settings, place


def _resumed_if_waiting(store: Store, run: Mapping[str, Any]) -> str:
    if why_not_resume(run) is not None:
        return "it stays as it is"
    resume(store, run["id"])
    return "resumed"


def harness_rule(store: Store, run_ref: str, text: str) -> str:
    """Add a rule to a harness run's rulebook (committed in its worktree), then resume the run when it waits for a
    person (a plateau, a blocked task, a park). Returns what happened, in one line."""
    from .agents.harness_person import add_rule

    run, settings, place = _harness_run(store, run_ref)
    commit = add_rule(place, run["id"], settings["rules"], text)
    with store.write() as conn:
        add_event(conn, run["id"], at=now(), kind=EventKind.RULE,
                  message=f"{_person()} added a rule to {settings['rules']} ({commit[:12]}): "
                  f"{' '.join(text.split())}", worker=_person())
    return f"{run['id']}: rule committed in {place['worktree']} ({commit[:12]}); {_resumed_if_waiting(store, run)}"


def harness_limit(store: Store, run_ref: str, limits: dict[str, int]) -> str:
    """Raise a harness run's own ceilings (`max_iterations`, `max_files_changed`), kept among its artifacts, then
    resume it when it waits for a person. Returns what happened, in one line."""
    from .agents.harness import LIMITS
    from .store import artifacts

    run, settings, _ = _harness_run(store, run_ref)
    where = f"{run['artifact_dir']}/{LIMITS}"
    try:
        before = json.loads(artifacts.load(store, where))
    except FileNotFoundError:
        before = {}
    after = {**before, **limits}
    artifacts.save(store, where, json.dumps(after).encode())
    said = ", ".join(f"{name} {before.get(name, settings[name])} -> {value}" for name, value in limits.items())
    with store.write() as conn:
        add_event(conn, run["id"], at=now(), kind=EventKind.LIMIT,
                  message=f"{_person()} raised the harness's ceilings: {said}", worker=_person())
    return f"{run['id']}: {said}; {_resumed_if_waiting(store, run)}"
