"""The database the TUI's snapshot and Pilot tests look at: built by EXECUTING the demo's runs
in-process (with the in-process fault point), with a frozen clock and seeded ids, so every
snapshot is the same on every machine."""

from __future__ import annotations

import os
import shutil
import time
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
    operate.schedule_add(store, load_registry(), name="nightly", agent="nightly-report", cron="0 2 * * *",
                         tz="Europe/Berlin", missed="once", overlap="wait")
    CLOCK.set(FROZEN_AT - 2)
    register(store, "w-61", pid=40211, host="laptop", concurrency=2, lease_s=30.0, now=CLOCK.now())
    store.close()
    CLOCK.freeze(FROZEN_AT)
    return roles


def thaw() -> None:
    CLOCK.freeze(None)
    CLOCK._offset = 0.0
    ids.seed(None)


def build_once(folder: Path) -> tuple[dict[str, str], object]:
    """Build the fixture once in `folder` (for a session), as a test would (TZ=UTC, none of the variables the
    `isolated` fixture clears); returns (its roles, the seeded ids' state right after the build), for `copied`.
    The cwd, TZ, the clock and the ids are put back as they were."""
    import pytest

    cwd = os.getcwd()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TZ", "UTC")
        env.setenv("XDG_DATA_HOME", str(folder / "xdg"))
        for name in ("TUI_AGENT_DB", "TUI_AGENT_CRASH_AT", "TUI_AGENT_NOW", "TUI_AGENT_AGENTS", "TUI_AGENT_DURABILITY",
                     "TUI_AGENT_DATA"):
            env.delenv(name, raising=False)
        for who in ("AUTHOR", "COMMITTER"):   # Patch's commits, whose ids its question shows: the same everywhere
            env.setenv(f"GIT_{who}_NAME", "tui-agent")
            env.setenv(f"GIT_{who}_EMAIL", "tui-agent@localhost")
            env.setenv(f"GIT_{who}_DATE", "2026-11-29T13:00:00+00:00")
        time.tzset()
        try:
            roles = build_fixture(folder)
            state = ids._seeded.getstate()
        finally:
            thaw()
            os.chdir(cwd)
    time.tzset()
    return roles, state


def copied(template: Path, state: object, folder: Path) -> None:
    """The fixture `built_once` made in `template`, copied into `folder` (which becomes the cwd), with the clock
    frozen at FROZEN_AT and the ids where the build left them: as if `build_fixture(folder)` had just run."""
    for entry in template.iterdir():
        if entry.name != "xdg":
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, folder / entry.name)
    os.chdir(folder)
    ids.seed(0)
    ids._seeded.setstate(state)
    CLOCK.freeze(FROZEN_AT)
