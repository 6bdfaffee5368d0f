"""Does opening one long run cost more because it is long? Builds runs of 1,000, 10,000 and 100,000 steps
through the real runtime (durability normal) and prints, for each, the run screen's time to first paint and the
peak memory of the process that painted it, and `show --json`'s time and peak memory. Each figure is measured in
a fresh process (its own peak RSS from wait4). The goal (issue 20): first paint under 0.3 s, and memory that
does not grow with the run's length.

    python bench/tui_run.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tui_agent import Agent, Budget
from tui_agent.operate import start
from tui_agent.runtime.clock import now
from tui_agent.runtime.registry import Registry
from tui_agent.runtime.worker import execute
from tui_agent.store import open_store
from tui_agent.store.runs import claim_run

SIZES = (1_000, 10_000, 100_000)
PAINT = """
import asyncio, sys, time
started = time.perf_counter()
from tui_agent.app import TuiAgentApp
from tui_agent.screens.run import RunScreen

async def main():
    app = TuiAgentApp(sys.argv[1], poll_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(RunScreen(sys.argv[2]))
        await pilot.pause()
        print(time.perf_counter() - started)

asyncio.run(main())
"""


def _long(ctx, request):
    for i in range(request["steps"]):
        ctx.step(f"s{i}", lambda i=i: i * 2)
    return {"steps": request["steps"]}


def build(folder: Path, steps: int) -> tuple[Path, str]:
    db = folder / f"run-{steps}.db"
    store = open_store(db, durability="normal")
    registry = Registry()
    registry.add(Agent(name="long", run=_long, budget=Budget(steps=steps + 10)), "bench")
    run_id, _ = start(store, registry, "long", {"steps": steps})
    execute(store, registry, claim_run(store, run_id, "w-bench", 3600.0, now()))
    store.close()
    return db, run_id


def measured(command: list[str]) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, stdout) of one fresh process."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command[:4])}... failed")
    return time.perf_counter() - started, usage.ru_maxrss / 1024, out


def main() -> None:
    print("| steps | run screen first paint | its peak memory | show --json | its peak memory |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        for steps in SIZES:
            db, run_id = build(Path(scratch), steps)
            _, paint_mb, painted = measured([sys.executable, "-c", PAINT, str(db), run_id])
            json_s, json_mb, _ = measured([sys.executable, "-m", "tui_agent", "--db", str(db), "show", run_id, "--json"])
            print(f"| {steps:,} | {float(painted):.2f} s | {paint_mb:.0f} MB | {json_s:.2f} s | {json_mb:.0f} MB |",
                  flush=True)


if __name__ == "__main__":
    main()
