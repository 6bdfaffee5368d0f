"""How much does journaling a step cost beyond the SQLite commit it cannot avoid?

Every step is one durable transaction, so raw sqlite3 doing one ~200-byte INSERT +
COMMIT per step (same file system, same pragmas) is the floor; this prints our
per-step time through the real runtime as a multiple of it, at synchronous FULL and
NORMAL, and the same for loading and replaying a 10,000-step run against a raw
SELECT + json.loads of those rows. A third figure, the fenced floor, is a step's own two
statements with no runtime around them (the journal row with its fence check, committed on its own; every
FOLD_EVERY steps the checkpoint row folded up, journal.fold_step): the distance from ours to it is Python around
the call. Interleaved repetitions: for writes, each rep's own ratio (ours and raw timed back to back, so a slow
spell of the disk slows both) and the median of those with their range, as fsync time varies from file to file
and minute to minute; for the replay, the best (pure CPU). The timed runs' journal rows land among an older
run's, as a new run's do in a database with history; the last line counts the WAL pages a commit writes there,
after the other runs' rows, and for raw.

    python bench/step_overhead.py
    python bench/step_overhead.py --postgres [URL]   # the same on PostgreSQL, against raw psycopg

With --postgres: on the server at URL (a role that may create databases), or without URL on a throwaway server
(tests/pg_cluster.py), a fresh database per rep and store, synchronous_commit on (FULL's like) and off (NORMAL's):
raw psycopg's INSERT commits itself in autocommit, one round trip, as our plain step does; no WAL frames.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from tui_agent.models import provider_for
from tui_agent.operate import start
from tui_agent.runtime.agent import Agent, Budget
from tui_agent.runtime.context import Context
from tui_agent.runtime.registry import Registry
from tui_agent.runtime.worker import execute
from tui_agent.store import open_store
from tui_agent.store.db import BUSY_TIMEOUT_MS, DURABILITY
from tui_agent.store.journal import (
    FOLD_EVERY,
    Entry,
    add_step,
    fold_step,
    load_checkpoint,
    load_entries,
)
from tui_agent.store.runs import claim_run, get_run

STEPS, REPLAY_STEPS, REPS = 2_000, 10_000, 9
# Untimed steps before a measurement, so the WAL has wrapped (an auto-checkpoint at 1,000 pages) and the steps
# timed rewrite it as in steady use: appending to a growing WAL costs more per fsync. A plain step of ours and a
# raw insert each commit about one page.
WARMUP = 1_100
GOALS = {"full": 1.2, "normal": 2.0, "replay": 1.5}
PG_GOALS = {"full": 1.3, "normal": 2.0, "replay": 1.5}   # issue 43's, against raw psycopg
PAYLOAD = "x" * 200
calls = 0


def tiny() -> dict:
    global calls
    calls += 1
    return {"ok": True, "n": 42}


def bench_agent(ctx: Context, request: dict) -> int:
    for i in range(request["n"]):
        ctx.step(f"s{i}", tiny)
    return request["n"]


# Unbounded: the replay run is REPLAY_STEPS (10,000, the default step ceiling, or more through peers.py
# --replay-steps) long, and the per-step figures measure the same path as before default ceilings existed.
AGENT = Agent(name="bench", run=bench_agent, budget=Budget(unbounded=True))
REGISTRY = Registry()
REGISTRY.add(AGENT, "bench")


# bench/peers.py through bench/link.py: how to read the link's count of round trips, and what the last timed call
# took, read around it (outside its time)
count_trips = None
trips = 0


def timed(fn) -> float:
    global trips
    gc.collect()
    before = count_trips() if count_trips else 0
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    if count_trips:
        trips = count_trips() - before
    return seconds


def ours(store, n: int, claim=None):
    """Work a run of n steps (`claim`: one claimed already, else a new one); returns (claim, seconds spent in
    execute)."""
    if claim is None:
        run_id, _ = start(store, REGISTRY, agent_name=AGENT.name, request={"n": n})
        claim = claim_run(store, run_id, "w-bench", 600.0, time.time())
    outcome = []
    seconds = timed(lambda: outcome.append(execute(store, REGISTRY, claim=claim)))
    assert outcome[0].status == "succeeded", outcome[0]
    return claim, seconds


def raw_conn(path: Path, durability: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def pg_conn(url: str):
    """A raw psycopg connection in autocommit (bench/peers.py's PostgreSQL floor): a statement commits itself."""
    import psycopg
    return psycopg.connect(url, autocommit=True)


def pg_database(server: str, name: str, setting: str) -> str:
    """The URL of database `name` on the server, created if absent with synchronous_commit set for every connection
    to it (so for DBOS's engine too, in peers.py)."""
    from tui_agent.store.postgres import SYNCHRONOUS

    with pg_conn(server) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchall():
            admin.execute(f"CREATE DATABASE {name}")
            admin.execute(f"ALTER DATABASE {name} SET synchronous_commit = {SYNCHRONOUS[setting]}")
    return urlsplit(server)._replace(path=f"/{name}").geturl()


def drop_database(server: str, name: str) -> None:
    with pg_conn(server) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def raw_inserts(conn, n: int, mark: str = "?") -> float:
    """n ~200-byte INSERTs, each committed; mark: the driver's placeholder (psycopg's is %s)."""
    sql = f"INSERT INTO t (payload) VALUES ({mark})"

    def loop():
        for _ in range(n):
            conn.execute(sql, (PAYLOAD,))
            conn.commit()
    return timed(loop)


def fenced_steps(store, n: int, claim=None) -> float:
    """The fenced floor: the store's own calls for n plain steps, with no runtime around them: `add_step` (the
    journal row with its fence check, one statement that commits itself) and, every FOLD_EVERY steps,
    `fold_step` (the checkpoint row folded up: on a server one statement too, on SQLite a transaction). What ours
    adds above it is the runtime's Python.
    `claim`: a run already claimed (else a new one)."""
    if claim is None:
        run_id, _ = start(store, REGISTRY, agent_name=AGENT.name, request={"n": n})
        claim = claim_run(store, run_id, "w-floor", 600.0, time.time())
    run_id = claim.run_id
    checkpoint = load_checkpoint(store, run_id)
    result = json.dumps(tiny())

    def loop():
        for i in range(n):
            at = time.time()
            if (i + 1) % FOLD_EVERY:
                add_step(store, claim, Entry(position=i, name=f"s{i}", kind="step", result=result, started_at=at,
                                             duration_s=0.0))
            else:
                fold_step(store, claim, Entry(position=i, name=f"s{i}", kind="step", result=result, started_at=at,
                                              duration_s=0.0), checkpoint, at)
    return timed(loop)


def write_rows(tmp: Path, durability: str, server: str | None = None) -> dict:
    """Median seconds per step, and each rep's ratios ours/raw and ours/fenced; fresh files each rep, as fsync
    time differs from file to file (on a `server`, fresh databases)."""
    times = {"ours": [], "fenced": [], "raw": []}
    for rep in range(REPS):
        store, raw, mark = fresh(tmp, server, durability, rep)
        ours(store, WARMUP), raw_inserts(raw, WARMUP, mark)
        # Both timed runs' rows land among an older run's, as a new run's do in a database with history (random
        # ids): where they land changes the pages a commit writes (frames_per_commit), so it is the same for both.
        jobs = [("ours", lambda: ours(store, STEPS, placed_run(store, STEPS))[1]),
                ("fenced", lambda: fenced_steps(store, STEPS, placed_run(store, STEPS))),
                ("raw", lambda: raw_inserts(raw, STEPS, mark))]
        for key, fn in jobs if rep % 2 == 0 else jobs[::-1]:  # alternate which goes first
            times[key].append(fn() / STEPS)
        store.close(), raw.close()
        if server is not None:
            drop_database(server, f"raw_{durability}_{rep}"), drop_database(server, f"ours_{durability}_{rep}")
    row = {key: statistics.median(values) for key, values in times.items()}
    row["ratios"] = {under: [o / u for o, u in zip(times["ours"], times[under])] for under in ("raw", "fenced")}
    return row


def fresh(tmp: Path, server: str | None, durability: str, rep: int) -> tuple:
    """(our store, raw connection with table t, its placeholder) for one rep: new files, or new databases."""
    if server is None:
        raw = raw_conn(tmp / f"raw-{durability}-{rep}.db", durability)
        raw.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
        raw.commit()
        return open_store(tmp / f"ours-{durability}-{rep}.db", durability), raw, "?"
    raw = pg_conn(pg_database(server, f"raw_{durability}_{rep}", durability))
    raw.execute("CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload text)")
    return open_store(pg_database(server, f"ours_{durability}_{rep}", durability), durability), raw, "%s"


def replay_row(where: Path | str) -> dict:
    """where: a folder for a fresh SQLite file, or an empty PostgreSQL database's URL (bench/peers.py), whose floor
    reads through pg_conn."""
    global calls
    on_server = isinstance(where, str)
    store = open_store(where if on_server else where / "replay.db", "normal")
    claim, _ = ours(store, REPLAY_STEPS)
    raw = pg_conn(where) if on_server else raw_conn(store.path, "normal")
    sql = ("SELECT position, name, result, artifact FROM journal WHERE run_id = ? AND generation = ?"
           " ORDER BY position")
    if on_server:
        sql = sql.replace("?", "%s")
    request = json.loads(get_run(store, claim.run_id)["request"])
    before = calls

    def replay():
        checkpoint = load_checkpoint(store, claim.run_id)
        entries = load_entries(store, claim.run_id, claim.generation)
        ctx = Context(store, claim, request=request, artifact_dir=f"artifacts/{claim.run_id}", checkpoint=checkpoint,
                      entries=entries, provider=provider_for("scripted"))
        assert AGENT.run(ctx, request) == REPLAY_STEPS and len(entries) == REPLAY_STEPS

    def read():
        rows = raw.execute(sql, (claim.run_id, claim.generation)).fetchall()
        assert len([json.loads(r[2]) for r in rows]) == REPLAY_STEPS

    replay(), read()  # warm up
    times = {"ours": [], "raw": []}
    for rep in range(REPS):
        for key, fn in [("ours", replay), ("raw", read)][:: 1 if rep % 2 == 0 else -1]:
            times[key].append(timed(fn))
    assert calls == before, "a replayed step ran its function"
    store.close(), raw.close()
    return {key: min(values) for key, values in times.items()}  # CPU only: noise only ever adds


def frames_per_commit(tmp: Path) -> dict[str, float]:
    """WAL frames (pages) a commit writes, counted from the WAL's size with checkpoints held off: the disk work
    behind the fenced floor's distance from raw. A rowid table's append (raw's) adds a page alone now and then.
    Our plain steps append to journal_tail, a table of a few pages (the tails of runs in progress); the folds
    move them into journal_rows, keyed by run id first, where a run's rows land among an older run's when its
    random id sorts before another's (the usual case in a database with history). Appended there one commit at
    a time, as before journal_tail, SQLite rebalanced a leaf with its neighbours several times per new page:
    1.46-1.62 pages per commit among the older rows, 1.34 after them."""
    store = open_store(tmp / "frames.db", "normal")
    ours(store, WARMUP)   # a run already there, as in any database in use
    raw = raw_conn(tmp / "frames-raw.db", "normal")
    raw.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
    raw.commit()
    raw_inserts(raw, WARMUP)
    jobs = {"fenced, after the other runs' rows": (
                store, lambda: fenced_steps(store, STEPS, placed_run(store, STEPS, last=True))),
            "fenced, among them": (store, lambda: fenced_steps(store, STEPS, placed_run(store, STEPS))),
            "raw": (raw, lambda: raw_inserts(raw, STEPS))}
    frames = {}
    for key, (where, job) in jobs.items():
        conn, path = (store.conn, store.path) if where is store else (raw, tmp / "frames-raw.db")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        job()
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        frames[key] = (Path(f"{path}-wal").stat().st_size - 32) / (page + 24) / STEPS
        conn.execute("PRAGMA wal_autocheckpoint=1000")
    store.close(), raw.close()
    return frames


def placed_run(store, n: int, last: bool = False):
    """A claimed new run of n steps whose id sorts after every other run's (`last`), or before one of them: where
    its journal rows land among the others'."""
    while True:
        run_id, _ = start(store, REGISTRY, agent_name=AGENT.name, request={"n": n})
        highest = store.conn.execute("SELECT max(id) FROM runs WHERE id != ?", (run_id,)).fetchone()[0]
        if (run_id > highest) == last:
            return claim_run(store, run_id, "w-frames", 600.0, time.time())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", nargs="?", const="", metavar="URL",
                        help="on PostgreSQL: the server at URL, or a throwaway one without it")
    args = parser.parse_args()
    server = args.postgres
    print(f"# step overhead, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
    print(f"Python {sys.version.split()[0]}, " + ("PostgreSQL" if server is not None else
                                                  f"SQLite {sqlite3.sqlite_version}") +
          f"; {STEPS} steps per write run, {REPLAY_STEPS}-step replay; {REPS} interleaved reps, "
          "for writes the median of each rep's own ratio [its range], for replay the best\n")
    tmp = Path(tempfile.mkdtemp(prefix="tui-agent-bench-"))
    throwaway = None
    try:
        if server == "":
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
            import pg_cluster

            throwaway = pg_cluster.PgServer(pg_cluster.find_bin_dir())
            throwaway.start()
            server = throwaway.url
        names = ("synchronous_commit=on", "synchronous_commit=off") if server else ("synchronous=FULL",
                                                                                   "synchronous=NORMAL")
        rows = [(f"write, {names[0]} (per step)", "full", write_rows(tmp, "full", server)),
                (f"write, {names[1]} (per step)", "normal", write_rows(tmp, "normal", server)),
                (f"load + replay {REPLAY_STEPS} steps (total)", "replay",
                 replay_row(pg_database(server, "replay", "normal") if server else tmp))]
        if server:
            drop_database(server, "replay")
        frames = None if server else frames_per_commit(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if throwaway is not None:
            throwaway.stop()
    floor = "raw psycopg" if server else "raw sqlite3"
    print(f"| what | ours (us) | fenced floor (us) | {floor} (us) | ours / raw | ours / fenced | goal | |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for label, goal_key, r in rows:
        goal = (PG_GOALS if server else GOALS)[goal_key]
        if "ratios" in r:
            ratio, shown = paired(r["ratios"]["raw"])
            fenced, over = f"{r['fenced'] * 1e6:,.1f}", paired(r["ratios"]["fenced"])[1]
        else:
            ratio = r["ours"] / r["raw"]
            shown, fenced, over = f"{ratio:.2f}x", "–", "–"
        print(f"| {label} | {r['ours'] * 1e6:,.1f} | {fenced} | {r['raw'] * 1e6:,.1f} | {shown} | {over} |"
              f" <= {goal}x | {'ok' if ratio <= goal else 'OVER'} |")
    if frames:
        print("\nWAL frames (pages) per commit, checkpoints held off: " + ", ".join(
            f"{key} {value:.2f}" for key, value in frames.items()))


def paired(ratios: list[float]) -> tuple[float, str]:
    """The median of per-rep ratios, and it shown with their range."""
    median = statistics.median(ratios)
    return median, f"{median:.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"


if __name__ == "__main__":
    main()
