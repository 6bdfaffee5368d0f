"""Which agents this process can run: the built-ins, the `tui_agent.agents` entry points,
and every `Agent` at the top level of each `--agents` module."""

from __future__ import annotations

import importlib
import json
from importlib.metadata import entry_points
from typing import Any

from ..errors import UserError
from ..models import provider_for
from .agent import Agent


class Registry:
    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}

    def add(self, agent: Agent, origin: str) -> None:
        known = self._agents.get(agent.name)
        if known is not None and known is not agent:
            raise UserError(f"two agents are named {agent.name!r} (the second from {origin}); rename one")
        self._agents[agent.name] = agent

    def add_module(self, module_name: str) -> int:
        """Register every Agent instance at the module's top level; returns how many."""
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise UserError(f"--agents {module_name}: cannot import it ({e}); check the name and PYTHONPATH") from None
        found = [value for value in vars(module).values() if isinstance(value, Agent)]
        if not found:
            raise UserError(f"--agents {module_name}: the module defines no Agent at its top level")
        for agent in found:
            self.add(agent, module_name)
        return len(found)

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise UserError(f"no agent named {name!r} (known: {known}); see tui-agent agents") from None

    def run_fields(self, agent_name: str, request: Any, model: str = "scripted",
                   budget: dict[str, float] | None = None) -> dict[str, str]:
        """The columns of a new run of `agent_name`, checked now so a mistake is a usage error, not a failed run."""
        agent = self.get(agent_name)
        if not isinstance(request, dict):
            raise UserError("the input must be a JSON object, such as '{\"name\": \"Ada\"}'")
        provider_for(model, agent.script)
        return {"agent": agent.name, "agent_version": agent.version, "code_version": agent.code_version,
                "request": json.dumps(request, ensure_ascii=False),
                "budget": json.dumps({**agent.budget.to_dict(), **(budget or {})}), "model": model}

    def __iter__(self):
        return iter(sorted(self._agents.values(), key=lambda a: a.name))

    def names(self) -> list[str]:
        return sorted(self._agents)


def load_registry(modules: list[str] = ()) -> Registry:
    from ..agents import BUILTIN

    registry = Registry()
    for agent in BUILTIN:
        registry.add(agent, "tui_agent.agents")
    for point in entry_points(group="tui_agent.agents"):
        loaded = point.load()
        for agent in loaded if isinstance(loaded, (list, tuple)) else [loaded]:
            registry.add(agent, f"entry point {point.name}")
    for module_name in modules:
        registry.add_module(module_name)
    return registry
