"""Small in-process drivers shared by the runtime tests."""

from __future__ import annotations

from tui_agent.operate import start
from tui_agent.runtime.clock import now
from tui_agent.runtime.registry import Registry
from tui_agent.runtime.worker import execute
from tui_agent.store.runs import claim_run


def registry_of(*agents) -> Registry:
    registry = Registry()
    for agent in agents:
        registry.add(agent, "test")
    return registry


def start_and_work(store, registry, agent_name, request, worker="w-test", lease_s=60.0):
    run_id, _ = start(store, registry, agent_name, request)
    return work(store, registry, run_id, worker, lease_s)


def work(store, registry, run_id, worker="w-test", lease_s=60.0):
    claim = claim_run(store, run_id, worker, lease_s, now())
    assert claim is not None, f"{run_id} was not claimable"
    return execute(store, registry, claim)


async def key(pilot, name: str) -> None:
    """Press a key in a Pilot test and let the app settle."""
    await pilot.press(name)
    await pilot.pause()


async def click(pilot, selector: str) -> None:
    await pilot.click(selector)
    await pilot.pause()
