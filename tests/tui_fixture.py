"""The database the TUI's snapshot and Pilot tests look at: built by EXECUTING the demo's runs
in-process (with the in-process fault point), with a frozen clock and seeded ids, so every
snapshot is the same on every machine."""

from __future__ import annotations

import os
from pathlib import Path

from tui_agent import operate
from tui_agent.demo import build
from tui_agent.runtime.clock import CLOCK, parse_instant
from tui_agent.runtime.registry import load_registry
from tui_agent.store import ids, open_store
from tui_agent.store.workers import register

FROZEN_AT = parse_instant("2026-11-29T14:00:00Z")


def build_fixture(folder: Path) -> dict[str, str]:
    """Build `runs.db` in `folder` (the cwd becomes `folder`, so paths shown on screen are relative and stable).
    The clock stays frozen at FROZEN_AT for the caller; `thaw()` undoes it."""
    os.chdir(folder)
    CLOCK.freeze(FROZEN_AT - 3600)
    ids.seed(7)
    roles = build(Path("runs.db"), load_registry(), wait=CLOCK.advance)
    store = open_store(Path("runs.db"))
    operate.schedule_add(store, load_registry(), "nightly", "nightly-report", "0 2 * * *", tz="Europe/Berlin",
                         missed="once", overlap="wait")
    CLOCK.set(FROZEN_AT - 2)
    register(store, "w-61", 40211, "laptop", 2, 30.0, CLOCK.now())
    store.close()
    CLOCK.freeze(FROZEN_AT)
    return roles


def thaw() -> None:
    CLOCK.freeze(None)
    CLOCK._offset = 0.0
    ids.seed(None)
