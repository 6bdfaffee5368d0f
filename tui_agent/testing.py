"""For an agent's own test suite: a recorded run as a regression test.

    from tui_agent.testing import replay

    def test_the_prompt_change_keeps_last_weeks_run():
        assert replay("runs.db", "r-1a2b3c4d", agents=["my_agents.py"]).reproduced

No journaled call is executed, and the replay's own connection only reads. The agent's code between those calls
runs in the caller's thread on the database itself: a connection of its own can write to it, and code that loops
is not stopped (bound it with the test runner's timeout); `tui-agent replay` runs it on a copy with a time limit
(see tui_agent.replay, tui_agent.replay_copy)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from .replay import Replay, replay_run
from .runtime.agent import Agent
from .runtime.registry import Registry, load_registry
from .store import Store


def replay(db: str | os.PathLike | Store, run_id: str, agents: Iterable[Agent | str] | None = None) -> Replay:
    """Replay `run_id` against the current code. `agents`: Agent objects or modules (a name or a .py file)
    to take the code from; None: the built-in and installed agents."""
    registry = load_registry([]) if agents is None else _registry(agents)
    return replay_run(db.path if isinstance(db, Store) else db, registry, run_id)


def _registry(agents: Iterable[Agent | str]) -> Registry:
    registry = Registry()
    for agent in agents:
        if isinstance(agent, Agent):
            registry.add(agent, "tui_agent.testing.replay")
        else:
            registry.add_module(agent)
    return registry
