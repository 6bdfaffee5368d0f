"""Operator actions, one function each, shared by the CLI and the TUI so a keystroke and a
command can never disagree."""

from __future__ import annotations

import json
from typing import Any

from .errors import UserError
from .runtime.clock import now
from .runtime.registry import Registry
from .store import Store
from .store.runs import create_run


def start(store: Store, registry: Registry, agent_name: str, request: Any,
          key: str | None = None) -> tuple[str, bool]:
    """Queue a run of `agent_name`; with `key`, starting twice gives the same run (created False)."""
    agent = registry.get(agent_name)
    if not isinstance(request, dict):
        raise UserError("the input must be a JSON object, such as '{\"name\": \"Ada\"}'")
    return create_run(store, agent=agent.name, agent_version=agent.version, code_version=agent.code_version,
                      request=json.dumps(request, ensure_ascii=False), budget=json.dumps(agent.budget.to_dict()),
                      now=now(), run_key=key)
