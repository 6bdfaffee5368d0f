"""Operator actions, one function each, shared by the CLI and the TUI so a keystroke and a
command can never disagree."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from .errors import UserError
from .runtime import schedule
from .runtime.agent import BUDGET_DIMENSIONS
from .runtime.clock import now
from .runtime.registry import Registry
from .runtime.worker import worker_name
from .store import Store, data_dir_for
from .store import schedules as schedules_table
from .store.approvals import decide as decide_approval
from .store.approvals import pending as pending_approval
from .store.effects import find_effect, set_state, waiting_on_key
from .store.events import add_event, add_schedule_event
from .store.runs import (
    TERMINAL,
    cancel,
    create_run,
    get_run,
    recorded_positions,
    requeue,
    resolve_run,
)
from .store.runs import fork as fork_run
from .store.runs import park as park_run
from .store.runs import restart as restart_run


def parse_budget(specs: list[str] | tuple[str, ...]) -> dict[str, float]:
    """`cost_usd=0.50`, `steps=100`, `soft=0.8`: ceilings that override the agent's for one run."""
    limits = {}
    for spec in specs:
        name, _, text = spec.partition("=")
        name = name.strip()
        if name not in (*BUDGET_DIMENSIONS, "soft"):
            raise UserError(f"--budget {spec!r}: name one of {', '.join(BUDGET_DIMENSIONS)} or soft, as in cost_usd=0.50")
        try:
            value = float(text)
        except ValueError:
            raise UserError(f"--budget {spec!r}: the value after '=' must be a number, as in {name}=10") from None
        if value <= 0 or (name == "soft" and value >= 1):
            raise UserError(f"--budget {spec!r}: must be above 0" + (" and below 1" if name == "soft" else ""))
        limits[name] = int(value) if value.is_integer() and name not in ("cost_usd", "wall_s", "soft") else value
    return limits


def start(store: Store, registry: Registry, agent_name: str, request: Any, key: str | None = None,
          model: str = "scripted", budget: dict[str, float] | None = None) -> tuple[str, bool]:
    """Queue a run of `agent_name`; with `key`, starting twice gives the same run (created False)."""
    return create_run(store, now=now(), run_key=key, **registry.run_fields(agent_name, request, model, budget))


def _person() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in this environment
        return "someone"


def _deciding(store: Store, run_ref: str, effect_ref: str, allowed: tuple[str, ...]) -> tuple[dict, dict]:
    """The run and effect a person is deciding on, refused unless the decision makes sense now."""
    run = get_run(store, resolve_run(store, run_ref))
    holding = run["status"] == "running" and run["lease_expires_at"] > now()
    if holding or run["status"] in TERMINAL:
        hint = "it has ended" if not holding else f"{run['worker']} holds it; wait until its lease ends"
        raise UserError(f"run {run['id']} is {run['status']}; {hint}")
    effect = find_effect(store, run["id"], run["generation"], effect_ref)
    if effect["state"] not in allowed:
        raise UserError(f"effect {effect['name']} of {run['id']} is {effect['state']}; only an effect that is "
                        f"{' or '.join(allowed)} can be decided")
    return run, effect


def _decided(conn, run_id: str, message: str, who: str, at: float) -> None:
    """Inside a write: a person's decision on the record, and the run handed back to the workers."""
    add_event(conn, run_id, at, "decision", message, who)
    requeue(conn, run_id, "resumed", f"queued: {message}", at)


def _decide(store: Store, run: dict, effect: dict, state: str | None, what: str, note: str | None,
            result: str | None = None) -> None:
    at, who = now(), _person()
    message = _with_note(f"{effect['name']}: {who} {what}", note)
    with store.write() as conn:
        if state is not None:
            fields = {"decided_by": who, "decided_at": at, "note": note}
            if result is not None:
                fields["result"] = result
            set_state(conn, effect["id"], state, at, **fields)
        _decided(conn, run["id"], message, who, at)
        if state is not None:  # runs that held back because this key was in doubt here may go on now
            for other in waiting_on_key(conn, effect["key"], run["id"]):
                requeue(conn, other, "resumed", f"queued: key {effect['key']} was decided in run {run['id']}", at)


def reconcile_happened(store: Store, run_ref: str, effect_ref: str, result: Any = None,
                       note: str | None = None) -> str:
    """A person says the effect happened: it is confirmed (with `result`) and the run goes on without redoing it."""
    run, effect = _deciding(store, run_ref, effect_ref, ("unknown", "attempted", "intended"))
    _decide(store, run, effect, "confirmed", "says it happened", note,
            json.dumps(result, ensure_ascii=False))
    return run["id"]


def reconcile_not_done(store: Store, run_ref: str, effect_ref: str, note: str | None = None) -> str:
    """A person says it did not happen: the next worker does it again with the same key."""
    run, effect = _deciding(store, run_ref, effect_ref, ("unknown", "attempted", "intended"))
    _decide(store, run, effect, "not_done", "says it did not happen", note)
    return run["id"]


def reconcile_ask(store: Store, run_ref: str, effect_ref: str, note: str | None = None) -> str:
    """Ask the service: the next worker to claim the run looks the key up (the CLI never runs agent code)."""
    run, effect = _deciding(store, run_ref, effect_ref, ("unknown", "attempted"))
    if not effect["has_lookup"]:
        raise UserError(f"effect {effect['name']} has no lookup, so the service cannot be asked; decide with "
                        "--happened or --not-done")
    _decide(store, run, effect, None, "asked the service to look the key up", note)
    return run["id"]


def abandon(store: Store, run_ref: str, effect_ref: str, note: str | None = None) -> str:
    """A person gives up on the run: cancelled (reason person); the effect stays as it was, on record."""
    run, effect = _deciding(store, run_ref, effect_ref, ("unknown", "intended", "not_done", "attempted"))
    with store.write() as conn:
        cancel(conn, run["id"], _with_note(f"cancelled: {_person()} abandoned the run at {effect['name']}", note),
               now())
    return run["id"]


def _run(store: Store, run_ref: str) -> dict:
    return get_run(store, resolve_run(store, run_ref))


def _with_note(message: str, note: str | None) -> str:
    return message + (f" ({note})" if note else "")


def approve(store: Store, run_ref: str, deny: bool = False, note: str | None = None) -> str:
    """Answer the question the run waits on; the agent's `ctx.approval` returns the answer on resume."""
    run = _run(store, run_ref)
    question = pending_approval(store, run["id"], run["generation"])
    if run["status"] != "waiting" or run["reason"] != "approval" or question is None:
        raise UserError(f"run {run['id']} is not waiting for an approval (it is {run['status']}"
                        + (f": {run['reason']})" if run["reason"] else ")"))
    at, who = now(), _person()
    decision = "denied" if deny else "approved"
    message = _with_note(f"{question['name']}: {decision} by {who}", note)
    with store.write() as conn:
        decide_approval(conn, question["id"], decision, note, who, at)
        _decided(conn, run["id"], message, who, at)
    return run["id"]


def park(store: Store, run_ref: str, note: str | None = None) -> str:
    """Stop a run resumably; a running run's worker is refused at its next write and stops."""
    run = _run(store, run_ref)
    if run["status"] in (*TERMINAL, "parked"):
        raise UserError(f"run {run['id']} is {run['status']} already; nothing to park")
    with store.write() as conn:
        park_run(conn, run["id"], _with_note(f"parked by {_person()}", note), now())
    return run["id"]


def cancel_run(store: Store, run_ref: str, note: str | None = None) -> str:
    """End a run for good; a running run's worker is refused at its next write and stops."""
    run = _run(store, run_ref)
    if run["status"] in TERMINAL:
        raise UserError(f"run {run['id']} has ended ({run['status']}); nothing to cancel")
    with store.write() as conn:
        cancel(conn, run["id"], _with_note(f"cancelled by {_person()}", note), now())
    return run["id"]


def resume(store: Store, run_ref: str, restart: bool = False, budget: dict[str, float] | None = None) -> str:
    """Re-queue a parked run (or one waiting on its budget or a plateau) where it stopped, raising
    ceilings with `budget`; with `restart`, from zero in a new journal generation."""
    run = _run(store, run_ref)
    if restart:
        if run["status"] not in ("parked", "failed", "cancelled"):
            raise UserError(f"run {run['id']} is {run['status']}; only a parked, failed or cancelled run can be "
                            "restarted (park it first)")
    elif not (run["status"] == "parked" or (run["status"] == "waiting" and _waits_on_harness(run["reason"]))):
        waits_for = {"approval": "tui-agent approve", "reconcile": "tui-agent reconcile"}.get(run["reason"])
        hint = f"; it waits for a decision: use {waits_for}" if waits_for else ""
        raise UserError(f"run {run['id']} is {run['status']}" + (f": {run['reason']}" if run["reason"] else "")
                        + f", not parked{hint}")
    who, at = _person(), now()
    with store.write() as conn:
        if budget:
            limits = {**json.loads(run["budget"] or "{}"), **budget}
            conn.execute("UPDATE runs SET budget = ? WHERE id = ?", (json.dumps(limits), run["id"]))
            raised = ", ".join(f"{k} {json.loads(run['budget'] or '{}').get(k)} -> {v}" for k, v in budget.items())
            add_event(conn, run["id"], at, "budget", f"budget changed by {who}: {raised}", who)
        if restart:
            restart_run(conn, run["id"], f"restarted from zero by {who} in generation {{generation}} "
                        f"(generation {run['generation']} stays readable)", at)
        else:
            requeue(conn, run["id"], "resumed", f"resumed by {who}", at)
    return run["id"]


def _waits_on_harness(reason: str | None) -> bool:
    """Waiting on its budget or a plateau: a person resumes it (perhaps with a higher ceiling)."""
    return bool(reason) and (reason.startswith("budget:") or reason == "plateau")


def fork(store: Store, run_ref: str, from_step: int) -> str:
    """A new run that keeps the parent's journal before `from_step` and runs the rest anew."""
    parent = _run(store, run_ref)
    recorded = recorded_positions(store, parent["id"], parent["generation"])
    if not 0 <= from_step <= recorded:
        raise UserError(f"run {parent['id']} has {recorded} recorded positions; --from-step must be 0 to {recorded}")
    return fork_run(store, parent, from_step, now())


def schedule_add(store: Store, registry: Registry, name: str, agent: str, cron: str, tz: str = "UTC",
                 request: Any = None, missed: str = "once", overlap: str = "skip",
                 grace_s: float = schedule.GRACE_S) -> dict:
    """A new schedule; fires before now never count."""
    registry.run_fields(agent, request if request is not None else {})   # the agent and input are usable
    schedule.check_cron(cron)
    schedule.zone(tz)
    at = now()
    row = {"name": name, "agent": agent, "cron": cron, "tz": tz, "input": json.dumps(request or {}),
           "missed": missed, "overlap": overlap, "grace_s": grace_s, "enabled": 1, "counts_from": at,
           "next_fire_at": schedule.next_fire(cron, tz, at), "created_at": at}
    schedules_table.add(store, row)
    return row


def schedule_enable(store: Store, name: str, enabled: bool) -> None:
    """Disable, or enable again: fires while it was disabled never count."""
    with store.write() as conn:
        row = schedules_table.get(conn, name)
        at = now()
        fields = {"enabled": int(enabled)}
        if enabled and not row["enabled"]:
            fields.update(counts_from=at, next_fire_at=schedule.next_fire(row["cron"], row["tz"], at))
        schedules_table.update(conn, name, **fields)
        add_schedule_event(conn, name, at, "schedule", f"{'enabled' if enabled else 'disabled'} by {_person()}")


def schedule_remove(store: Store, name: str) -> None:
    schedules_table.remove(store, name)


def schedule_fire(store: Store, registry: Registry, name: str) -> list[str]:
    return schedule.fire_now(store, registry, name)


def start_worker(db_path: Path, durability: str = "full", agent_modules: list[str] = (),
                 name: str | None = None, log_dir: Path | None = None) -> subprocess.Popen:
    """A worker in its own process (the TUI never runs agent code itself); its output goes to a log file."""
    name = name or worker_name()
    command = [sys.executable, "-m", "tui_agent", "--db", str(db_path), "--durability", durability]
    for module in agent_modules:
        command += ["--agents", module]
    log_dir = log_dir or data_dir_for(Path(db_path)) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{name}.log", "ab") as log:
        return subprocess.Popen([*command, "worker", "--name", name], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)


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
