"""Operator actions, one function each, shared by the CLI and the TUI so a keystroke and a
command can never disagree."""

from __future__ import annotations

import getpass
import json
from typing import Any

from .errors import UserError
from .models import provider_for
from .runtime.clock import now
from .runtime.registry import Registry
from .store import Store
from .store.effects import find_effect, set_state
from .store.events import add_event
from .store.runs import TERMINAL, cancel, create_run, get_run, requeue, resolve_run


def start(store: Store, registry: Registry, agent_name: str, request: Any, key: str | None = None,
          model: str = "scripted") -> tuple[str, bool]:
    """Queue a run of `agent_name`; with `key`, starting twice gives the same run (created False)."""
    agent = registry.get(agent_name)
    if not isinstance(request, dict):
        raise UserError("the input must be a JSON object, such as '{\"name\": \"Ada\"}'")
    provider_for(model, agent.script)  # a bad --model is a usage error now, not a failed run later
    return create_run(store, agent=agent.name, agent_version=agent.version, code_version=agent.code_version,
                      request=json.dumps(request, ensure_ascii=False), budget=json.dumps(agent.budget.to_dict()),
                      model=model, now=now(), run_key=key)


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


def _decide(store: Store, run: dict, effect: dict, state: str | None, what: str, note: str | None,
            result: str | None = None) -> None:
    at, who = now(), _person()
    message = f"{effect['name']}: {who} {what}" + (f" ({note})" if note else "")
    with store.write() as conn:
        if state is not None:
            fields = {"decided_by": who, "decided_at": at, "note": note}
            if result is not None:
                fields["result"] = result
            set_state(conn, effect["id"], state, at, **fields)
        add_event(conn, run["id"], at, "decision", message, who)
        requeue(conn, run["id"], "resumed", f"queued: {message}", at)


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
    at, who = now(), _person()
    with store.write() as conn:
        cancel(conn, run["id"], f"cancelled: {who} abandoned the run at {effect['name']}"
               + (f" ({note})" if note else ""), at)
    return run["id"]
