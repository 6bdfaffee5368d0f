"""For an agent's own test suite: a recorded run as a regression test.

    from tui_agent.testing import replay

    def test_the_prompt_change_keeps_last_weeks_run():
        assert replay("runs.db", "r-1a2b3c4d", agents=["my_agents.py"]).reproduced"""

from __future__ import annotations

import os
from collections.abc import Iterable

from .runtime.agent import Agent
from .runtime.registry import Registry, load_registry
from .services.replay import Replay, replay_run
from .store import Store


def replay(db: str | os.PathLike | Store, run_id: str, agents: Iterable[Agent | str] | None = None) -> Replay:
    """Replay a recorded run against the agent's current code, answering every journaled call from its journal.

    Nothing journaled is executed, and the replay's own connection only reads. The first call the journal
    cannot answer ends the replay with a divergence. So does a call by another name, a model request that
    differs from the recorded one, or an ending other than the recorded run's. The agent's code between those
    calls runs in the caller's thread, on the database itself: a connection of its own can write to it, and
    code that loops is not stopped (bound it with the test runner's timeout); `tui-agent replay` runs it on a
    copy with a time limit (see tui_agent.services.replay, tui_agent.services.replay_copy).

    Args:
        db: The database, as a path or an open `Store`.
        run_id: The run to replay, its id or a prefix of it.
        agents: `Agent` objects, or modules named or given as a .py file, to take the code from. None means
            the built-in and installed agents.

    Returns:
        What the replay found. `reproduced` is True when the code makes the same calls and ends the same way.

    Raises:
        UserError: The database, the run or its agent cannot be found. Its message is one line that says why.
    """
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
