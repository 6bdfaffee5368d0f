"""How long do navigation keys take to answer on a far PostgreSQL server? A throwaway server (tests/pg_cluster.py)
behind the shared latency link (bench/link.py) adding 200 ms to every round trip, a worker writing steps through
it all along (runs started every half second, so the App's poll sees a commit at nearly every look), and the TUI
in a process of its own: on the runs screen and then on a run's screen, `j` and `k` pressed in turn, each timed
from the press to the cursor having moved. Prints the median and the slowest. The goal (issue 42): within 100 ms.

    python bench/tui_latency.py                    # this checkout
    PYTHONPATH=/tmp/old bench/tui_latency.py       # another (git archive main | tar -x -C /tmp/old)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from link import Link  # noqa: E402
from pg_cluster import PgServer, create_database, find_bin_dir  # noqa: E402

DELAY_S = 0.1     # each way: 200 ms a round trip
PRESSES = 20
MEASURE = """
import asyncio, statistics, sys, time
from tui_agent.app import TuiAgentApp
from tui_agent.screens.run import RunScreen
from tui_agent.widgets.timeline import Timeline

async def timed(pilot, where) -> list[float]:
    took = []
    for i in range(int(sys.argv[2])):
        before = where()
        started = time.perf_counter()
        await pilot.press("j" if i % 2 == 0 else "k")
        while where() == before:
            await asyncio.sleep(0.001)
        took.append(time.perf_counter() - started)
        await asyncio.sleep(0.15)            # a person's pace: the poll and its re-reads go on meanwhile
    return took

def said(name, took):
    return f"{name}: median {statistics.median(took) * 1000:.0f} ms, slowest {max(took) * 1000:.0f} ms"

async def main():
    app = TuiAgentApp(sys.argv[1])            # the change poll on, every 0.5 s
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(2)
        runs = app.screen
        print(said("runs screen", await timed(pilot, lambda: runs.query_one("DataTable").cursor_row)), flush=True)
        app.push_screen(RunScreen(sys.argv[3]))  # a run the worker finished: its timeline has entries to move on
        await pilot.pause(2)
        await pilot.press("home")
        await pilot.pause(1)
        timeline = app.screen.query_one(Timeline)
        print(said("run screen", await timed(pilot, lambda: timeline.highlighted)), flush=True)
        app.exit()

asyncio.run(main())
"""


def main() -> None:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("no PostgreSQL binaries: .ci/run installs them")
    server = PgServer(bin_dir)
    server.start()
    stop = threading.Event()
    try:
        url = f"{server.url}/{create_database(server.url)}"
        from tui_agent.operate import start
        from tui_agent.runtime.registry import load_registry
        from tui_agent.store import open_store

        store, registry = open_store(url), load_registry()
        seeds = [start(store, registry, agent_name="hello", request={"name": f"seed {i}"})[0] for i in range(30)]
        worker = subprocess.Popen([sys.executable, "-m", "tui_agent", "--db", url, "worker"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def writing() -> None:
            while not stop.wait(0.5):
                start(store, registry, agent_name="hello", request={"name": "more"})

        threading.Thread(target=writing, daemon=True).start()
        from tui_agent.store.runs import get_run
        while get_run(store, seeds[0])["status"] != "succeeded":
            time.sleep(0.1)
        with Link("127.0.0.1", server.port, delay_s=DELAY_S) as link:
            print(f"PostgreSQL through a link adding {DELAY_S * 2000:.0f} ms a round trip; a worker writing; "
                  f"{PRESSES} presses per screen ({os.environ.get('PYTHONPATH') or 'this checkout'})", flush=True)
            subprocess.run([sys.executable, "-c", MEASURE, link.url(url), str(PRESSES), seeds[0]], check=True,
                           timeout=600)
        stop.set()
        worker.terminate()
        worker.wait(30)
    finally:
        stop.set()
        server.stop()


if __name__ == "__main__":
    main()
