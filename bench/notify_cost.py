"""What telling listeners costs the writers on PostgreSQL: a plain step's statement with its NOTIFY and without.

Two ways for a reader (the TUI) to learn of a change: every writer's transaction that changed something sends a
notification as it commits, and the reader LISTENs (a poll costs it no round trip); or the reader polls a
counter, the server's own snapshot (`pg_current_snapshot()` moves with every commit; a round trip per poll), and
the writers send nothing. PostgreSQL serialises the commits of notifying transactions (one lock, held through
each commit), which can cost writers that commit side by side. The store polls (PostgresStore.data_version);
this measures what the other way would cost the writers: a plain step's statement with the notice, and as the
store sends it, without.

P writer processes (1, 2 and 4), each with its own connection and its own claimed run, commit --steps plain steps
through the store's own statement (journal's, one round trip), started together; steps per second over all of
them, at synchronous_commit on and off, in a fresh database per cell on a throwaway server (tests/pg_cluster.py).
Interleaved reps (order reversed every other rep); the median with the range. The rate is noisy on a shared
machine, so each cell also counts the server's WAL syncs per commit (pg_stat_wal, reset before the cell; read
once every writer's session has ended and reported): at `on` each commit waits for one unless another's sync
covered it too (group commit), which the lock that serialises notifying commits rules out.

    python bench/notify_cost.py [--reps 5] [--steps 1000]
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

import psycopg
from step_overhead import AGENT, REGISTRY

from tui_agent.operate import start
from tui_agent.store import open_store
from tui_agent.store.journal import _STEP
from tui_agent.store.postgres import SYNCHRONOUS, translate
from tui_agent.store.runs import claim_run

TESTS = Path(__file__).resolve().parent.parent / "tests"   # the throwaway server (tests/pg_cluster.py)

WITHOUT = translate(_STEP[True])
# The same step telling LISTENing readers as it commits, as the store's step did before it stopped notifying
WITH_NOTIFY = f"WITH step AS ({WITHOUT} RETURNING 1) SELECT pg_notify('tui_agent', '') FROM step"
STATEMENTS = {"with NOTIFY": WITH_NOTIFY, "without": WITHOUT}
PROCESSES = (1, 2, 4)


def writer(url: str, run_id: str, fence: int, sql: str, steps: int, go, done) -> None:
    conn = psycopg.connect(url, autocommit=True)
    go.wait()
    for position in range(steps):
        cur = conn.execute(sql, (run_id, 1, position, f"s{position}", "step", '{"ok": true, "n": 42}', None, 1,
                                 time.time(), 0.0, fence, None, None, 0.0, run_id, fence))
        assert cur.rowcount == 1
    done.put(time.perf_counter())
    conn.close()


def cell(server: str, name: str, setting: str, sql: str, processes: int, steps: int) -> tuple[float, float]:
    """(steps per second, WAL syncs per step) of `processes` writers started together, in a fresh database."""
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        admin.execute(f"ALTER DATABASE {name} SET synchronous_commit = {SYNCHRONOUS[setting]}")
    url = f"{server}/{name}"
    try:
        store = open_store(url, setting)
        claims = [claim_run(store, start(store, REGISTRY, agent_name=AGENT.name, request={"n": steps})[0], "w", 600.0,
                            time.time())
                  for _ in range(processes)]
        store.close()
        go, done = multiprocessing.Event(), multiprocessing.Queue()
        procs = [multiprocessing.Process(target=writer, args=(url, c.run_id, c.fence, sql, steps, go, done))
                 for c in claims]
        for proc in procs:
            proc.start()
        time.sleep(0.5)   # every writer connected
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute("SELECT pg_stat_reset_shared('wal')")
            began = time.perf_counter()
            go.set()
            ended = max(done.get(timeout=600) for _ in procs)
            for proc in procs:
                proc.join()
            time.sleep(0.5)   # the writers' sessions have ended, and reported their counts
            syncs = admin.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()[0]
        return processes * steps / (ended - began), syncs / (processes * steps)
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1_000, help="per writer process")
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    import pg_cluster

    bin_dir = pg_cluster.find_bin_dir()
    if bin_dir is None:
        raise SystemExit(pg_cluster.SKIP_REASON)
    server = pg_cluster.PgServer(bin_dir)
    server.start()
    rates: dict = {}
    cells = [(setting, p, label) for setting in SYNCHRONOUS for p in PROCESSES for label in STATEMENTS]
    try:
        for rep in range(args.reps):
            for i, (setting, p, label) in enumerate(cells if rep % 2 == 0 else cells[::-1]):
                rate = cell(server.url, f"notify_{rep}_{i}", setting, STATEMENTS[label], p, args.steps)
                rates.setdefault((setting, p, label), []).append(rate)
    finally:
        server.stop()
    print(f"# notify cost, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(f"{args.reps} interleaved reps of {args.steps:,} plain steps per writer process; steps/s over all "
          "writers, median (min – max)\n")
    print("| synchronous_commit | writer processes | steps/s with NOTIFY | without | without / with "
          "| WAL syncs per step, with | without |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for setting in SYNCHRONOUS:
        for p in PROCESSES:
            found = [[rate for rate, _ in rates[(setting, p, label)]] for label in STATEMENTS]
            syncs = [statistics.median(s for _, s in rates[(setting, p, label)]) for label in STATEMENTS]
            shown = [f"{statistics.median(r):,.0f} ({min(r):,.0f} – {max(r):,.0f})" for r in found]
            ratio = statistics.median(found[1]) / statistics.median(found[0])
            print(f"| {SYNCHRONOUS[setting]} | {p} | {shown[0]} | {shown[1]} | {ratio:.2f}x | {syncs[0]:.2f} "
                  f"| {syncs[1]:.2f} |")


if __name__ == "__main__":
    main()
