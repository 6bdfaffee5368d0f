"""Does the runs screen stay instant on a big database? Fills a database with 100,000 runs and
prints the runs screen's first-paint time (goal: under 0.5 s; the screen reads keyset-paged pages,
never the whole table), the cost of one refresh tick when nothing changed (one pragma), and the first page of
each kind of filter (goal: no slower than the unfiltered first page; each reads through an index).

    python bench/tui_runs.py
"""

from __future__ import annotations

import asyncio
import datetime
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tui_agent.app import TuiAgentApp
from tui_agent.filters import parse
from tui_agent.report import runs_page
from tui_agent.store import open_store
from tui_agent.store.schema import CHECKPOINT_SCHEMA

RUNS = 100_000
STATUSES = [("succeeded", "check_passed"), ("failed", "error"), ("queued", "new"), ("waiting", "sleep"),
            ("parked", "budget:cost_usd"), ("waiting", "approval"), ("cancelled", "person")]
AGENTS = ["nightly-report", "patch", "refactor-imports", "hello"]
# The filters timed on the runs screen: enter in its `/` box to the first page on screen. The rare ones are the
# worst case of their kind: a run in 1,000 waits to reconcile, `cost>:` and text are checked on the rows an index
# gives.
FILTERS = ["status:failed", "status:waiting", "agent:patch", "since:1d", "agent:hello since:2d until:1d",
           "cost>:0.0045 since:1d", "status:failed r-0001", "reconcile"]


def fill(path: Path) -> None:
    """Rows as the runtime writes them (a run and its checkpoint), in one transaction: the setup, not the figure."""
    open_store(path).close()
    conn = sqlite3.connect(path)
    start = time.time() - RUNS
    budget = json.dumps({"steps": 50, "cost_usd": 0.5, "soft": 0.7, "on_exhaust": "park"})
    runs, checkpoints = [], []
    for i in range(RUNS):
        status, reason = STATUSES[i % len(STATUSES)] if i % 1000 else ("waiting", "reconcile")
        run_id = f"r-{i:08x}"
        runs.append((run_id, AGENTS[i % len(AGENTS)], "1", "bench", "{}", budget, "scripted", status, reason, 1, 1, 1,
                     f"artifacts/{run_id}", start + i, start + i))
        checkpoints.append((run_id, 1, CHECKPOINT_SCHEMA, i % 7, 7, i % 7, (i % 50) / 10000, start + i))
    with conn:
        conn.executemany("INSERT INTO runs (id, agent, agent_version, code_version, request, budget, model, status,"
                         " reason, attempt, fence, generation, artifact_dir, created_at, updated_at)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", runs)
        conn.executemany("INSERT INTO checkpoints (run_id, generation, schema_version, current_step, total_steps,"
                         " used_steps, used_cost_usd, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", checkpoints)
    conn.close()


def pages(path: Path) -> dict[str, float]:
    """Each filter's first page of 200 as the store reads it (runs_page, with what each run spent), median of 5."""
    store = open_store(path)
    try:
        took = {}
        for words in ["", *FILTERS]:
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                runs_page(store, limit=200, where=parse(words))
                times.append(time.perf_counter() - t0)
            took[words] = statistics.median(times)
        return took
    finally:
        store.close()


async def first_paint(path: Path) -> tuple[float, int, float, dict[str, tuple[float, int]]]:
    started = time.perf_counter()
    app = TuiAgentApp(path, poll_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        painted = time.perf_counter() - started
        rows = app.screen.query_one("DataTable").row_count
        ticks = []
        app.poll()                                   # the first poll notes the version
        for _ in range(200):
            t0 = time.perf_counter()
            app.poll()                               # nothing changed: one pragma
            ticks.append(time.perf_counter() - t0)
        screen, filtered = app.screen, {}
        for words in ["", *FILTERS]:     # "": the unfiltered first page again, read the same way
            t0 = time.perf_counter()
            screen.apply_filter(words)
            await pilot.pause()
            filtered[words] = (time.perf_counter() - t0, screen.query_one("DataTable").row_count)
    return painted, rows, statistics.median(ticks), filtered


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tui-agent-bench-"))
    try:
        path = tmp / "runs.db"
        t0 = time.perf_counter()
        fill(path)
        filled = time.perf_counter() - t0
        read = pages(path)
        results = [asyncio.run(first_paint(path)) for _ in range(3)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    painted = sorted(r[0] for r in results)
    print(f"# runs screen, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}; {RUNS:,} runs "
          f"(filled in {filled:.1f} s); 3 app starts\n")
    print("| what | measured | goal |")
    print("|---|---:|---:|")
    print(f"| first paint of the runs screen (app start to rows on screen, median) | {painted[1] * 1000:,.0f} ms "
          f"| < 500 ms |")
    print(f"| rows loaded for the first page | {results[0][1]} | |")
    print(f"| one refresh tick when nothing changed (median) | {results[0][2] * 1e6:,.1f} us | |")
    print("\n| filter | its first page read (runs_page, 200 rows, median of 5) | on screen (`/` then enter to "
          "its rows shown, both sections; median of 3) | rows shown |")
    print("|---|---:|---:|---:|")
    for words in ["", *FILTERS]:
        shown = statistics.median(r[3][words][0] for r in results)
        print(f"| {f'`{words}`' if words else 'none'} | {read[words] * 1000:,.1f} ms | {shown * 1000:,.0f} ms | "
              f"{results[0][3][words][1]} |")


if __name__ == "__main__":
    main()
