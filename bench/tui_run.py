"""Does opening one long run cost more because it is long? Builds runs of 1,000, 10,000 and 100,000 steps
through the real runtime (durability normal) and prints, for each, the run screen's time to first paint and the
peak memory of the process that painted it, and `show --json`'s time and peak memory. The screen's times run from
pushing it (the app already started) to the first refresh after it mounted (first paint) and to the app going
idle (settled: the footer and the lower panes done), the first opening and the median of five more; and from `g` to a
position in the middle until idle. Each memory figure is a fresh process's own peak RSS (wait4). The goal (issue 20):
opening under 0.3 s, and memory that does not grow with the run's length.

    python bench/tui_run.py
"""

from __future__ import annotations

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
import asyncio, statistics, sys, time
from tui_agent.app import TuiAgentApp
from tui_agent.screens.run import RunScreen

painted = []
opened = RunScreen.on_mount

def on_mount(self):   # the screen's own on_mount, then a note of the first refresh after it
    opened(self)
    self.call_after_refresh(lambda: painted.append(time.perf_counter()))

RunScreen.on_mount = on_mount

async def main():
    app = TuiAgentApp(sys.argv[1], poll_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        paints, settles = [], []
        for _ in range(6):              # the first opening parses the screen's styles; the others do not
            started = time.perf_counter()
            app.push_screen(RunScreen(sys.argv[2]))
            await pilot.pause()
            paints.append(painted[-1] - started)
            settles.append(time.perf_counter() - started)
            app.pop_screen()
            await pilot.pause()
        figures = [paints[0], settles[0], statistics.median(paints[1:]), statistics.median(settles[1:])]
        app.push_screen(RunScreen(sys.argv[2]))
        await pilot.pause()
        started = time.perf_counter()
        await pilot.press("g", *str(int(sys.argv[3]) // 2), "enter")
        await pilot.pause()
        print(*figures, time.perf_counter() - started)

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
    run_id, _ = start(store, registry, agent_name="long", request={"steps": steps})
    execute(store, registry, claim=claim_run(store, run_id, "w-bench", 3600.0, now()))
    store.close()
    return db, run_id


def measured(command: list[str]) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, stdout) of one fresh process, started through peak_rss.py so that its peak is
    its own and not this process's (which has just built a database)."""
    started = time.perf_counter()
    child = subprocess.run([sys.executable, str(Path(__file__).with_name("peak_rss.py")), *command],
                           capture_output=True, text=True)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])}... failed: {child.stderr[-400:]}")
    peak_kb = int(child.stderr.splitlines()[-1].split()[1])
    return time.perf_counter() - started, peak_kb / 1024, child.stdout


def main() -> None:
    print("| steps | run screen first paint (first opening / median of 5 more) | settled | `g` to the middle, settled |"
          " process peak memory | show --json | its peak memory |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        for steps in SIZES:
            db, run_id = build(Path(scratch), steps)
            _, paint_mb, painted = measured([sys.executable, "-c", PAINT, str(db), run_id, str(steps)])
            cold, cold_idle, warm, warm_idle, jumped = (float(n) * 1000 for n in painted.split())
            json_s, json_mb, _ = measured([sys.executable, "-m", "tui_agent", "--db", str(db), "show", run_id,
                                           "--json"])
            print(f"| {steps:,} | {cold:.0f} / {warm:.0f} ms | {cold_idle:.0f} / {warm_idle:.0f} ms | {jumped:.0f} ms |"
                  f" {paint_mb:.0f} MB | {json_s:.2f} s | {json_mb:.0f} MB |", flush=True)


if __name__ == "__main__":
    main()
