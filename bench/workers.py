"""How many runs can worker processes push through one database, and how soon does a dead worker's run move?

Claims, steps and settles all take SQLite's one write lock (and fsync inside it), so more
processes can only help with the work done between transactions; this measures real
`tui-agent worker` processes, not threads, so the figure includes whatever they cost each other.
For 1, 2 and 4 processes: they start on an empty queue and are timed only once each has registered
in `workers` (start-up excluded); then 1,000 trivial runs (one step each) are queued in ONE
transaction of real `operate.start` calls, and the time runs from that commit to the last run's
`finished_at`. A run is a claim, a step and a settle, so runs/s is also claims/s. Idle workers poll
every 0.5 s, so up to 0.5 s of noticing the queue is inside that figure; it is also shown alone,
and the rate from the first claim leaves it out. Median of 3 interleaved reps (fresh files each).

Then takeover after kill -9, with `--lease 2`: worker A works a slow run (10 steps of 0.5 s),
worker B idles, A gets SIGKILL. The lease A last wrote is read back from `runs` once A is dead
(the expiry the store honours); B's `takeover` event time is compared with it and with the
kill. Goal: takeover within lease + one heartbeat (lease/3) of the kill. B then finishes the run.
A shares the bench's process group, so B cannot verify that nothing A started is left and waits for
the lease, as a worker on another host does; bench/takeover.py measures a worker that led its group.

    python bench/workers.py                      # SQLite
    python bench/workers.py --postgres           # a throwaway PostgreSQL server (tests/pg_cluster.py)
    python bench/workers.py --postgres URL       # the server at URL (postgresql://user@host:port); the bench
                                                 # creates and drops a database per measurement on it
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlsplit

from link import Link

from tui_agent.operate import start
from tui_agent.runtime.registry import Registry
from tui_agent.store import open_store

TESTS = Path(__file__).resolve().parent.parent / "tests"

RUNS, PROCESSES, LEASE_S, REPS = 1_000, (1, 2, 4), 30.0, 3
TAKEOVER_LEASE_S, TAKEOVER_TRIES, SLOW = 2.0, 3, {"steps": 10, "nap_s": 0.5}
KILL_AFTER_S = (1.0, 1.22, 1.44)  # after the claim: past A's first heartbeat, at three phases of lease/3
POLL_S = 0.05
MODULE = "tui_agent_bench_worker_agents"
AGENTS_SOURCE = '''
"""Agents for bench/workers.py (written into a temp dir by it)."""
import time

from tui_agent.runtime.agent import Agent, Budget


def _small(i):
    return {"ok": True, "i": i}


def _nap(seconds):
    time.sleep(seconds)
    return seconds


def trivial(ctx, request):
    return ctx.step("one", _small, request["i"])


def slow(ctx, request):
    for i in range(request["steps"]):
        ctx.step(f"nap{i}", _nap, request["nap_s"])
    return request["steps"]


# Unbounded, so the figures measure the same per-step path as before default ceilings existed.
TRIVIAL = Agent(name="bench-trivial", run=trivial, budget=Budget(unbounded=True))
SLOW = Agent(name="bench-slow", run=slow, budget=Budget(unbounded=True))
'''


class OneTransaction:
    """What `start` needs of a store, with `write()` joining a transaction already open, so
    1,000 calls of the real `start` commit once."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def write(self):
        return contextlib.nullcontext(self.conn)


class Workers:
    """`tui-agent worker` subprocesses on one database; output goes to files for a look afterwards."""

    def __init__(self, tmp: Path, db: Path | str) -> None:
        self.tmp, self.db = tmp, db
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp), os.environ.get("PYTHONPATH")]))}
        self.procs: dict[str, subprocess.Popen] = {}
        self.codes: dict[str, int] = {}

    def spawn(self, name: str, lease_s: float, module: str = MODULE, own_group: bool = False) -> subprocess.Popen:
        """`own_group`: the worker leads a process group of its own, as one started from a shell does (else it
        shares the bench's, so a killed one's runs wait for their lease: store/holders.py)."""
        out, err = (open(self.tmp / f"{name}.{kind}", "wb") for kind in ("out", "err"))
        with out, err:
            proc = subprocess.Popen([sys.executable, "-m", "tui_agent", "--db", str(self.db), "--agents", module,
                                     "worker", "--lease", f"{lease_s:g}", "--name", name],
                                    env=self.env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    start_new_session=own_group)
        self.procs[name] = proc
        return proc

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if name not in self.codes and proc.poll() is not None:
                raise RuntimeError(f"worker {name} exited {proc.returncode}: {self.stderr(name)[-2000:]}")

    def kill9(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.codes[name] = self.procs[name].wait()

    def stop(self) -> None:
        """SIGTERM every live worker at once, then collect exit codes (SIGKILL after 15 s)."""
        live = {n: p for n, p in self.procs.items() if n not in self.codes and p.poll() is None}
        for proc in live.values():
            proc.send_signal(signal.SIGTERM)
        for name, proc in self.procs.items():
            if name in self.codes:
                continue
            try:
                self.codes[name] = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                self.codes[name] = f"hung, killed ({proc.wait()})"

    def stderr(self, name: str) -> str:
        path = self.tmp / f"{name}.err"
        return path.read_text(errors="replace") if path.exists() else ""

    def trouble(self) -> list[tuple[str, str]]:
        """(worker, what) for anything unexpected: a non-zero exit (bar the kill -9 we sent), a busy
        database, a traceback (naming the thread it killed)."""
        found = []
        for name in self.procs:
            code, err = self.codes.get(name), self.stderr(name)
            if code not in (0, -signal.SIGKILL):
                found.append((name, f"exited {code}"))
            for needle in ("database is locked", "is busy"):   # SQLite's, or either store's stop
                found += [(name, repr(needle))] * err.count(needle)
            found += [(name, f"{where.replace(name, 'NAME')} died: {error.split(':')[0]}")
                      for where, error in tracebacks(err)]
        return found

    def errors(self) -> set[str]:
        """Each distinct exception line, thread ids blanked."""
        return {re.sub(r"\d{6,}", "N", error) for name in self.procs for _, error in tracebacks(self.stderr(name))}


def tracebacks(err: str) -> list[tuple[str, str]]:
    """(where, exception line) of each traceback on a worker's stderr."""
    lines, found = err.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            where = lines[i - 1] if i and lines[i - 1].startswith("Exception in thread ") else "main thread"
            where = where.replace("Exception in thread ", "thread ").rstrip(":")
            found.append((where, next((x for x in lines[i + 1:] if x and not x[0].isspace()), "?")))
    return found


def summary(trouble: list[tuple[str, str]], names: bool = True) -> str:
    """Trouble grouped by what happened, with the workers it happened to (or how many)."""
    grouped: dict[str, list[str]] = {}
    for name, what in trouble:
        grouped.setdefault(what, []).append(name)
    return "; ".join(f"{what} ({', '.join(who) if names else f'{len(who)}x'})" for what, who in grouped.items()) \
        or "none"


def read_only(db: Path | str):
    """A second connection that only reads (`?` placeholders on both stores)."""
    if isinstance(db, str):
        store = open_store(db, create=False)
        store.read_only()
        return store.conn
    return sqlite3.connect(f"file:{quote(str(db.resolve()))}?mode=ro", uri=True, isolation_level=None)


class Databases:
    """A fresh database per measurement: a file in the temp folder, or a database on a PostgreSQL server
    (`server`: its URL without a database; dropped at the end)."""

    def __init__(self, tmp: Path, server: str | None) -> None:
        self.tmp, self.server, self.made = tmp, server, []

    def new(self, name: str) -> Path | str:
        if self.server is None:
            return self.tmp / f"{name}.db"
        import psycopg
        with psycopg.connect(f"{self.server}/postgres", autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name.replace('-', '_')}")
        self.made.append(name.replace("-", "_"))
        return f"{self.server}/{self.made[-1]}"

    def drop(self) -> None:
        if self.server is None:
            return
        import psycopg
        with psycopg.connect(f"{self.server}/postgres", autocommit=True) as admin:
            for name in self.made:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def until(what: str, test, timeout_s: float, workers: Workers, every_s: float = POLL_S):
    deadline = time.monotonic() + timeout_s
    while True:
        value = test()
        if value:
            return value
        workers.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:g}s waiting for {what}")
        time.sleep(every_s)


def registered(ro: sqlite3.Connection, n: int):
    return ro.execute("SELECT count(*) FROM workers WHERE stopped_at IS NULL").fetchone()[0] >= n


def throughput(tmp: Path, dbs: Databases, registry: Registry, n: int, rep: int, between: Link | None = None) -> dict:
    """`between`: the workers reach the server through this link (the bench's own connections do not), and the
    round trips they asked for from the commit to the last finish are counted."""
    db = dbs.new(f"claims-{n}-{rep}")
    store = open_store(db)
    ro = read_only(db)
    workers = Workers(tmp, db if between is None else between.url(db))
    try:
        for i in range(n):
            workers.spawn(f"c{n}.{rep}-w{i}", LEASE_S)
        until(f"{n} workers to register", lambda: registered(ro, n), 30, workers)
        began = time.time()
        with store.write() as conn:
            batch = OneTransaction(conn)
            for i in range(RUNS):
                start(batch, registry, agent_name="bench-trivial", request={"i": i})
        committed = time.time()
        trips = between.round_trips() if between else 0
        done = lambda: ro.execute("SELECT count(*) FROM runs WHERE status = 'succeeded'").fetchone()[0] == RUNS
        until(f"{RUNS} runs to succeed", done, 120, workers)
        trips = between.round_trips() - trips if between else None
        first, last, again = ro.execute("SELECT min(started_at), max(finished_at),"
                                        " sum(CASE WHEN attempt > 1 THEN 1 ELSE 0 END) FROM runs").fetchone()
        split = [c for (c,) in ro.execute("SELECT count(*) FROM events WHERE kind = 'claimed' GROUP BY worker"
                                          " ORDER BY 1 DESC")]
    finally:
        ro.close()
        workers.stop()
        store.close()
    return {"seconds": last - committed, "busy": last - first, "queue_ms": (committed - began) * 1e3,
            "first_ms": (first - committed) * 1e3,
            "split": split, "again": again, "trouble": workers.trouble(), "errors": workers.errors(), "trips": trips}


def takeover(tmp: Path, dbs: Databases, registry: Registry, attempt: int) -> dict:
    db = dbs.new(f"takeover-{attempt}")
    store = open_store(db)
    ro = read_only(db)
    workers = Workers(tmp, db)
    a, b = f"t{attempt}-a", f"t{attempt}-b"
    row_sql = "SELECT status, worker, lease_expires_at, fence, started_at FROM runs WHERE id = ?"
    try:
        workers.spawn(a, TAKEOVER_LEASE_S)
        until("A to register", lambda: registered(ro, 1), 30, workers)
        run_id, _ = start(store, registry, agent_name="bench-slow", request=SLOW)
        until("A to claim the slow run", lambda: ro.execute(row_sql, (run_id,)).fetchone()[:2] == ("running", a),
              10, workers, 0.01)
        workers.spawn(b, TAKEOVER_LEASE_S)
        until("B to register", lambda: registered(ro, 2), 30, workers)
        claimed_at = ro.execute(row_sql, (run_id,)).fetchone()[4]
        time.sleep(max(0.0, claimed_at + KILL_AFTER_S[attempt % len(KILL_AFTER_S)] - time.time()))
        killed = time.time()
        workers.kill9(a)
        status, holder, expiry, a_fence, _ = ro.execute(row_sql, (run_id,)).fetchone()  # A is dead: final
        assert (status, holder) == ("running", a), f"the run moved before A's lease ended: {status}, {holder}"
        beat_at = ro.execute("SELECT heartbeat_at FROM workers WHERE name = ?", (a,)).fetchone()[0]
        event = until("B's takeover", lambda: ro.execute("SELECT at, worker FROM events WHERE run_id = ? AND"
                                                         " kind = 'takeover'", (run_id,)).fetchone(),
                      TAKEOVER_LEASE_S + 10, workers, 0.01)
        final = until("B to finish the run", lambda: ro.execute("SELECT status FROM runs WHERE id = ? AND status"
                                                                " NOT IN ('running', 'queued')", (run_id,)).fetchone(),
                      30, workers)
        by_a = ro.execute("SELECT count(*) FROM journal WHERE run_id = ? AND fence = ?",
                          (run_id, a_fence)).fetchone()[0]
    finally:
        ro.close()
        workers.stop()
        store.close()
    took_at, taker = event
    return {"left": expiry - killed, "beat": killed - beat_at, "after_expiry": took_at - expiry,
            "after_kill": took_at - killed, "taker": taker, "b": b, "final": final[0], "by_a": by_a,
            "trouble": workers.trouble(), "errors": workers.errors()}


def main(measure: Callable[[str | None], None], doc: str) -> None:
    """A bench's command line: `measure(None)` on SQLite, or `measure(URL)` with `--postgres [URL]` (a throwaway
    server without one)."""
    parser = argparse.ArgumentParser(description=doc.partition("\n")[0])
    parser.add_argument("--postgres", nargs="?", const="", metavar="URL",
                        help="measure on PostgreSQL: the server at URL, or a throwaway one without it")
    args = parser.parse_args()
    server = None
    if args.postgres == "":
        sys.path.insert(0, str(TESTS))
        from pg_cluster import PgServer, find_bin_dir
        server = PgServer(find_bin_dir())
        server.start()
    with contextlib.ExitStack() as cleanup:
        if server is not None:
            cleanup.callback(server.stop)
        measure(args.postgres or (server and server.url))


def measure(postgres: str | None) -> None:
    on = f"PostgreSQL at {postgres}" if postgres else f"SQLite {sqlite3.sqlite_version}"
    print(f"# workers, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(f"Python {sys.version.split()[0]}, {on}; {os.cpu_count()} CPUs; "
          "durability full (the default); `tui-agent worker` subprocesses, concurrency 1 each\n")
    tmp = Path(tempfile.mkdtemp(prefix="tui-agent-bench-workers-"))
    dbs = Databases(tmp, postgres)
    added = str(tmp)
    sys.path.insert(0, added)
    try:
        (tmp / f"{MODULE}.py").write_text(AGENTS_SOURCE)
        module = importlib.import_module(MODULE)
        registry = Registry()
        for agent in (module.TRIVIAL, module.SLOW):
            registry.add(agent, MODULE)
        claims = {n: [] for n in PROCESSES}
        for rep in range(REPS):  # interleaved, alternating the order, as the machine's state drifts
            for n in PROCESSES if rep % 2 == 0 else PROCESSES[::-1]:
                claims[n].append(throughput(tmp, dbs, registry, n, rep))
        takeovers = [takeover(tmp, dbs, registry, i) for i in range(TAKEOVER_TRIES)]
        if postgres:
            server = urlsplit(postgres)
            with Link(server.hostname, server.port or 5432, 0.0) as between:
                counted = throughput(tmp, dbs, registry, 1, "trips", between)
    finally:
        sys.path.remove(added)
        sys.modules.pop(MODULE, None)
        dbs.drop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{RUNS:,} trivial runs (one step each) queued in one transaction onto idle workers that had all "
          f"registered (`--lease {LEASE_S:g}`), so start-up is excluded; timed from that commit to the last "
          f"run's `finished_at`. Median of {REPS} interleaved reps (range in brackets); the split and the first "
          "claim are the median rep's\n")
    print("| worker processes | seconds | runs/s | vs 1 process | first claim after commit (ms) "
          "| runs/s from first claim | runs per worker | runs claimed twice | trouble |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---|")
    base = None
    for n, reps in claims.items():
        reps = sorted(reps, key=lambda r: r["seconds"])
        mid = reps[len(reps) // 2]
        rate, base = RUNS / mid["seconds"], base or RUNS / mid["seconds"]
        print(f"| {n} | {mid['seconds']:.2f} | {rate:,.0f} ({RUNS / reps[-1]['seconds']:,.0f}-"
              f"{RUNS / reps[0]['seconds']:,.0f}) | {rate / base:.2f}x | {mid['first_ms']:,.0f} "
              f"| {RUNS / mid['busy']:,.0f} | {' / '.join(map(str, mid['split']))} | {sum(r['again'] for r in reps)} "
              f"| {summary([t for r in reps for t in r['trouble']], names=False)} |")
    queue_ms = statistics.median(r["queue_ms"] for reps in claims.values() for r in reps)
    print(f"\nQueueing the {RUNS:,} runs (one transaction of `operate.start` calls) took {queue_ms:,.0f} ms (median). "
          "An idle worker looks for due runs every 0.5 s, which is the first-claim delay; the runs/s from the "
          "first claim (to the last finish) leaves it out.")

    if postgres:
        print(f"\nRound trips per run: {counted['trips'] / RUNS:.2f} ({counted['trips']:,} for {RUNS:,} runs), counted "
              "by bench/link.py (adding no delay) between one worker process and the server, from the commit to the "
              "last finish: every claim, step and settle, and whatever heartbeats and idle polls fell in that time.")

    goal = TAKEOVER_LEASE_S + TAKEOVER_LEASE_S / 3
    print(f"\nTakeover after kill -9 (`--lease {TAKEOVER_LEASE_S:g}`: heartbeat every {TAKEOVER_LEASE_S / 3:.2f} s, "
          f"idle poll every {min(0.5, TAKEOVER_LEASE_S / 3):g} s; a slow run of {SLOW['steps']} steps of "
          f"{SLOW['nap_s']:g} s; A killed {KILL_AFTER_S[0]:g}-{KILL_AFTER_S[-1]:g} s after its claim). Expiry is "
          f"the `lease_expires_at` A last committed, read once A was dead. Goal: takeover within lease + "
          f"lease/3 = {goal:.2f} s of the kill\n")
    print("| try | A's last heartbeat before kill (s) | lease left at kill (s) | expiry -> takeover (s) "
          "| kill -> takeover (s) | steps A journaled | run then | goal | trouble |")
    print("|---:|---:|---:|---:|---:|---:|---|---|---|")
    for i, r in enumerate(takeovers, 1):
        trouble = ([] if r["taker"] == r["b"] else [(r["taker"], "took the run instead of B")]) + r["trouble"]
        print(f"| {i} | {r['beat']:.2f} | {r['left']:.2f} | {r['after_expiry']:.2f} | {r['after_kill']:.2f} "
              f"| {r['by_a']} | {r['final']} (by B) | {'ok' if r['after_kill'] <= goal else 'OVER'} "
              f"| {summary(trouble)} |")
    worst = max(r["after_kill"] for r in takeovers)
    print(f"| max | {max(r['beat'] for r in takeovers):.2f} | | {max(r['after_expiry'] for r in takeovers):.2f} "
          f"| {worst:.2f} | | | {'ok' if worst <= goal else 'OVER'} | |")
    errors = sorted({e for r in [*takeovers, *(r for reps in claims.values() for r in reps)] for e in r["errors"]})
    if errors:
        print("\nErrors on the workers' stderr:\n")
        for error in errors:
            print(f"- `{error}`")


if __name__ == "__main__":
    main(measure, __doc__)
