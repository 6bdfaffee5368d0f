"""How soon does a run move again after `kill -9` of its worker, when another worker on the same host idles, with
the default lease (60 s)?

Worker A is a real `tui-agent worker` that leads its own process group, as one started from a shell, by systemd,
cron or the TUI does; its run's step starts a child process and waits for it (as a test run or a coding agent
would be started). Worker B idles on the same database (it looks for due runs every 0.5 s). A gets SIGKILL at one
of several moments after B registered (so the kill falls at several phases of B's poll); then B's `takeover` event
(its claim, made once it has killed the child A left) and B's step running again (its own child started: seen by
polling every 2 ms) are timed from the kill. The lease A last wrote, read back once A is dead, is how long the run
would have waited before (and still waits for a worker on another host). Goal: kill -9 to B working the run, under
1 s.

    python bench/takeover.py                   # SQLite
    python bench/takeover.py --postgres        # a throwaway PostgreSQL server (tests/pg_cluster.py)
    python bench/takeover.py --postgres URL    # the server at URL; a database is made and dropped per try
"""

from __future__ import annotations

import datetime
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from workers import Databases, Workers, main, read_only, registered, summary, until

from tui_agent.operate import start
from tui_agent.runtime.registry import Registry
from tui_agent.runtime.worker import DEFAULT_LEASE_S
from tui_agent.store import open_store
from tui_agent.store.host import process_alive, process_start

KILL_AFTER_S = (0.3, 0.55, 0.8, 1.05, 1.3)   # after B registered (several phases of its 0.5 s poll): one try each
GOAL_S = 1.0
MODULE = "tui_agent_bench_takeover_agents"
AGENTS_SOURCE = '''
"""The agent of bench/takeover.py (written into a temp dir by it)."""
import subprocess
import sys
from pathlib import Path

from tui_agent.runtime.agent import Agent, Budget


def _child(pidfile):
    """A child that sleeps a minute on the first attempt (A's), a moment on the next (B's)."""
    path = Path(pidfile)
    seconds = 0.05 if path.exists() else 60
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    with path.open("a") as f:
        f.write(f"{child.pid}\\n")
    child.wait()
    return child.pid


def with_child(ctx, request):
    ctx.step("child", _child, request["pidfile"])
    return ctx.step("after", lambda: "done")


WITH_CHILD = Agent(name="bench-with-child", run=with_child, budget=Budget(unbounded=True))
'''


def one_try(tmp: Path, dbs: Databases, registry: Registry, attempt: int) -> dict:
    db = dbs.new(f"takeover-{attempt}")
    store = open_store(db)
    ro = read_only(db)
    workers = Workers(tmp, db)
    a, b = f"t{attempt}-a", f"t{attempt}-b"
    pidfile = tmp / f"children-{attempt}"
    try:
        workers.spawn(a, DEFAULT_LEASE_S, MODULE, own_group=True)
        until("A to register", lambda: registered(ro, 1), 30, workers)
        run_id, _ = start(store, registry, agent_name="bench-with-child", request={"pidfile": str(pidfile)})
        until("A's step to start its child", lambda: pidfile.exists() and pidfile.read_text().strip(), 30, workers,
              0.005)
        child = int(pidfile.read_text().split()[0])
        child_started = process_start(child)
        workers.spawn(b, DEFAULT_LEASE_S, MODULE)
        until("B to register", lambda: registered(ro, 2), 30, workers)
        time.sleep(KILL_AFTER_S[attempt % len(KILL_AFTER_S)])
        killed = time.time()
        workers.kill9(a)
        expiry = ro.execute("SELECT lease_expires_at FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
        event = until("B's takeover", lambda: ro.execute("SELECT at, worker FROM events WHERE run_id = ? AND"
                                                         " kind = 'takeover'", (run_id,)).fetchone(), 30, workers,
                      0.002)
        child_gone = not process_alive(child, child_started)
        until("B's step to start its own child", lambda: len(pidfile.read_text().split()) > 1, 30, workers, 0.002)
        again = time.time()
        until("B to finish the run", lambda: ro.execute("SELECT 1 FROM runs WHERE id = ? AND status = 'succeeded'",
                                                        (run_id,)).fetchone(), 30, workers)
    finally:
        ro.close()
        workers.stop()
        store.close()
    took_at, taker = event
    trouble = ([] if taker == b else [(taker, "took the run instead of B")]) + workers.trouble()
    return {"left": expiry - killed, "takeover": took_at - killed, "again": again - killed,
            "child_gone": child_gone, "trouble": trouble}


def measure(postgres: str | None) -> None:
    on = f"PostgreSQL at {postgres}" if postgres else f"SQLite {sqlite3.sqlite_version}"
    print(f"# takeover, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(f"Python {sys.version.split()[0]}, {on}; {os.cpu_count()} CPUs; `tui-agent worker` subprocesses with the "
          f"default lease ({DEFAULT_LEASE_S:g} s)\n")
    tmp = Path(tempfile.mkdtemp(prefix="tui-agent-bench-takeover-"))
    dbs = Databases(tmp, postgres)
    sys.path.insert(0, str(tmp))
    try:
        (tmp / f"{MODULE}.py").write_text(AGENTS_SOURCE)
        module = __import__(MODULE)
        registry = Registry()
        registry.add(module.WITH_CHILD, MODULE)
        tries = [one_try(tmp, dbs, registry, i) for i in range(len(KILL_AFTER_S))]
    finally:
        sys.path.remove(str(tmp))
        dbs.drop()
        shutil.rmtree(tmp, ignore_errors=True)

    print("| try | A killed after B registered (s) | lease left at kill (s) | kill -> takeover (s) "
          "| kill -> B's step running again (s) | A's child killed first | goal | trouble |")
    print("|---:|---:|---:|---:|---:|---|---|---|")
    for i, r in enumerate(tries):
        print(f"| {i + 1} | {KILL_AFTER_S[i]:g} | {r['left']:.1f} | {r['takeover']:.3f} | {r['again']:.3f} "
              f"| {'yes' if r['child_gone'] else 'NO'} | {'ok' if r['again'] < GOAL_S else 'OVER'} "
              f"| {summary(r['trouble'])} |")
    worst = max(r["again"] for r in tries)
    print(f"| max | | {min(r['left'] for r in tries):.1f} (least) | {max(r['takeover'] for r in tries):.3f} "
          f"| {worst:.3f} | | {'ok' if worst < GOAL_S else 'OVER'} | |")


if __name__ == "__main__":
    main(measure, __doc__)
