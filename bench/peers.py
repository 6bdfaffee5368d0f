"""The same workload on tui-agent and its peers, side by side, in one run.

Two workloads: a run of --steps trivial recorded steps (us per step), then resuming a finished
--replay-steps run (ms in total). Each is measured on

- raw sqlite3, the floor: one ~200-byte INSERT + COMMIT per step (`raw_inserts` from step_overhead.py);
  for the resume, the SELECT + json.loads of the finished run's journal rows;
- tui-agent in-process: `execute` of a claimed run (`ours` from step_overhead.py), so no progress line,
  no heartbeat thread, no process start-up; the resume loads and replays the finished run's journal;
- LangGraph with SqliteSaver and durability="sync": a StateGraph whose one node runs one step and loops
  back to itself, so every step is one superstep saved before the next begins (its writes, then its
  checkpoint). Not the functional API: its @task results pile up as pending writes on one checkpoint,
  which made a 10,000-step run quadratic here (89 s to write, minutes to resume). Resuming the finished
  thread is `invoke(None)`: it loads the latest checkpoint, a snapshot of the state, and finds nothing to
  run; LangGraph never replays past steps, so that is all a resume costs it;
- DBOS with its SQLite system database: a @DBOS.step() per step called from a @DBOS.workflow(). Resuming:
  the finished workflow's status is set back to PENDING (as after a crash before it was marked done) and
  DBOS.resume_workflow re-runs it, every step answered from the system database; the time is the workflow
  body's, as dispatch goes through a polled queue.

Durability: WAL with synchronous=FULL, WAL with synchronous=NORMAL (each peer's connections get the
pragmas: DBOS through a SQLAlchemy connect hook, LangGraph on the connection it is given), and each one's
own default: raw sqlite3 and DBOS keep sqlite3's rollback journal with FULL; tui-agent opens with "full";
LangGraph's SqliteSaver turns WAL on, leaves FULL, and its default durability is "async".

Every (peer, setting) runs in a fresh process so DBOS, a process-wide singleton, starts clean; only the
workload is timed, after an untimed warm-up in the same file (step_overhead.WARMUP steps or inserts, as in
step_overhead.py) so every WAL has wrapped. Rounds are interleaved (order reversed every other round);
each cell shows the median over rounds with min and max. Within a round the resume is the best of
step_overhead.replay_row's REPS (9) repetitions for tui-agent and raw, of 7 for LangGraph, one for DBOS (seconds
each).

With --postgres [URL], PostgreSQL rows too, in a block of their own: on the server at URL (a role that may create
databases), or without URL on a throwaway server started as the tests start theirs (tests/pg_cluster.py: initdb,
127.0.0.1, fsync on, shared_buffers=32MB) and stopped at the end; without its binaries those rows are skipped, said
in one line. Each cell gets a fresh database (CREATE DATABASE, dropped after) with synchronous_commit set on it, so
for every connection: on (the server's default, FULL's like) and off (NORMAL's like: a server crash may lose the
last commits, never corrupt). The same two workloads on

- raw psycopg, the floor: one ~200-byte INSERT per step in autocommit, so it commits itself in one round trip; for
  the resume, the SELECT + json.loads of the finished run's journal rows;
- tui-agent on PostgreSQL: open_store with the database's URL, driven as above;
- DBOS with its PostgreSQL system database, its native one, as above; its finished run is built once, in a database
  kept across rounds.

LangGraph is not measured there: its PostgresSaver (langgraph-checkpoint-postgres) is not in the bench extra.

And the write workload once more at synchronous_commit=on, through a link that adds --link-ms (1 ms) each way
(bench/link.py, a proxy on 127.0.0.1 in a process of its own): what a step costs when the workers are on another
machine than the server. --link-steps (200) steps after a warm-up of LINK_WARMUP (100), as every round trip now
costs milliseconds. The link counts the round trips the timed steps asked for, which the table shows per step (the
same path as without the link: the figure holds for the other PostgreSQL rows too).

    pip install -e '.[bench,postgres]'
    python bench/peers.py            # 7 rounds, about 8 minutes on 2 cores (--rounds 11: 12 minutes)
    python bench/peers.py --quick    # a try-out
    python bench/peers.py --postgres [URL]   # PostgreSQL rows too
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import importlib.util
import json
import os
import secrets
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import link
import step_overhead
from step_overhead import (
    WARMUP,
    drop_database,
    ours,
    pg_database,
    placed_run,
    raw_conn,
    raw_inserts,
    replay_row,
    timed,
    tiny,
)

from tui_agent.store import open_store
from tui_agent.store.db import DURABILITY

PEERS = ["raw sqlite3", "tui-agent", "LangGraph", "DBOS"]
MODULES = {"LangGraph": "langgraph", "DBOS": "dbos"}
SETTINGS = {"full": "WAL + synchronous=FULL", "normal": "WAL + synchronous=NORMAL", "default": "its own default"}
PG_PEERS = ["raw psycopg", "tui-agent", "DBOS"]
PG_SETTINGS = {"pg full": "synchronous_commit=on", "pg normal": "synchronous_commit=off",
               "pg link": "synchronous_commit=on, through a link adding {link_ms:g} ms each way"}
LINK_WARMUP = 100
# a block of the table each: (floor, peers, write settings, the resume's setting)
BLOCKS = {"sqlite": ("raw sqlite3", PEERS, SETTINGS, "replay"),
          "postgres": ("raw psycopg", PG_PEERS, PG_SETTINGS, "pg replay")}
PG_DBOS_REPLAY = "peers_dbos_replay"  # the database of DBOS's finished run, built by the first round
DEFAULTS = {"raw sqlite3": "rollback journal, FULL", "tui-agent": "WAL, FULL",
            "LangGraph": "WAL, FULL, durability=async", "DBOS": "rollback journal, FULL"}
LANGGRAPH_REPS = 7
INSTALL = "not installed (pip install -e '.[bench]')"


def raw_write(path: Path, setting: str, steps: int, warmup: int = WARMUP) -> float:
    conn = sqlite3.connect(path) if setting == "default" else raw_conn(path, setting)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
    conn.commit()
    raw_inserts(conn, warmup)
    return raw_inserts(conn, steps)


def raw_pg_write(url: str, setting: str, steps: int, warmup: int = WARMUP) -> float:
    """The PostgreSQL floor: each INSERT commits itself (autocommit), one round trip per step."""
    conn = step_overhead.pg_conn(url)
    conn.execute("CREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload text)")
    raw_inserts(conn, warmup, "%s")
    return raw_inserts(conn, steps, "%s")


def ours_write(target: Path | str, setting: str, steps: int, warmup: int = WARMUP) -> float:
    store = open_store(target) if setting == "default" else open_store(target, setting)
    ours(store, warmup)
    return ours(store, steps, placed_run(store, steps))[1]   # its rows among the warm-up run's, as in step_overhead


def ours_replay(target: Path | str, steps: int) -> dict:
    """tui-agent's resume and its floor's come together from step_overhead.replay_row: in the SQLite file's folder,
    or in the database of a PostgreSQL URL."""
    step_overhead.REPLAY_STEPS = steps  # replay_row's run length, read when it runs
    if isinstance(target, str):
        return dict(zip(("tui-agent", "raw psycopg"), replay_row(target).values()))
    return dict(zip(("tui-agent", "raw sqlite3"), replay_row(target.parent).values()))


def langgraph_graph(path: Path, setting: str):
    """A one-node loop: each pass runs tiny() and keeps its result in the state, one superstep per step."""
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        i: int
        n: int
        last: dict

    conn = sqlite3.connect(path, check_same_thread=False)  # as SqliteSaver.from_conn_string does
    if setting != "default":
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={DURABILITY[setting]}")
    graph = StateGraph(State)
    graph.add_node("step", lambda state: {"i": state["i"] + 1, "last": tiny()})
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda state: "step" if state["i"] < state["n"] else END)
    return graph.compile(checkpointer=SqliteSaver(conn))


def langgraph_run(graph, thread: str, n: int, durability: str | None) -> None:
    config = {"configurable": {"thread_id": thread}, "recursion_limit": n + 10}
    assert graph.invoke({"i": 0, "n": n}, config, durability=durability)["i"] == n


def langgraph_write(path: Path, setting: str, steps: int, warmup: int = WARMUP) -> float:
    graph = langgraph_graph(path, setting)
    durability = None if setting == "default" else "sync"
    langgraph_run(graph, "warm-up", warmup, durability)
    return timed(lambda: langgraph_run(graph, "timed", steps, durability))


def langgraph_replay(path: Path, steps: int) -> dict:
    """Resume the finished thread (built by the first round): invoke(None) from its latest checkpoint."""
    built = path.exists()
    graph = langgraph_graph(path, "normal")
    if not built:
        langgraph_run(graph, "finished", steps, "sync")
    config = {"configurable": {"thread_id": "finished"}}
    before = step_overhead.calls

    def resume():
        assert graph.invoke(None, config, durability="sync")["i"] == steps
    resume()  # warm up
    seconds = min(timed(resume) for _ in range(LANGGRAPH_REPS))
    assert step_overhead.calls == before, "a resumed step ran its function"
    return {"LangGraph": seconds}


def dbos_launch(target: Path | str, setting: str):
    """DBOS on a SQLite system database, the pragmas on every connection its engine opens; or on a PostgreSQL URL's
    database, whose synchronous_commit pg_database set."""
    import sqlalchemy
    from dbos import DBOS

    if setting != "default" and isinstance(target, Path):
        def pragmas(conn, _record):
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={DURABILITY[setting]}")
        sqlalchemy.event.listen(sqlalchemy.pool.Pool, "connect", pragmas)
    url = target if isinstance(target, str) else f"sqlite:///{target}"
    DBOS(config={"name": "bench", "system_database_url": url, "application_version": "bench", "log_level": "WARNING"})
    step = DBOS.step()(tiny)

    @DBOS.workflow()
    def workflow(n: int) -> float:
        """Returns the seconds its own body took: on a resume, the steps answered from the system database."""
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        return time.perf_counter() - t0

    DBOS.launch()
    return DBOS, workflow


def dbos_write(target: Path | str, setting: str, steps: int, warmup: int = WARMUP) -> float:
    dbos, workflow = dbos_launch(target, setting)
    workflow(warmup)
    seconds = timed(lambda: workflow(steps))
    dbos.destroy()
    return seconds


def dbos_replay(target: Path | str, steps: int) -> dict:
    """Mark the finished workflow (built by the first round) PENDING again and resume it: the time its body takes
    with every step already recorded."""
    from dbos import SetWorkflowID

    dbos, workflow = dbos_launch(target, "normal")
    status = "dbos.workflow_status" if isinstance(target, str) else "workflow_status"
    with step_overhead.pg_conn(target) if isinstance(target, str) else sqlite3.connect(target) as conn:
        if not conn.execute(f"SELECT 1 FROM {status} WHERE workflow_uuid = 'finished'").fetchall():
            with SetWorkflowID("finished"):
                workflow(steps)
        conn.execute(f"UPDATE {status} SET status = 'PENDING' WHERE workflow_uuid = 'finished'")
    before = step_overhead.calls
    seconds = dbos.resume_workflow("finished").get_result()
    assert step_overhead.calls == before, "a resumed step ran its function"
    dbos.destroy()
    return {"DBOS": seconds}


WRITES = {"raw sqlite3": raw_write, "tui-agent": ours_write, "LangGraph": langgraph_write, "DBOS": dbos_write,
          "raw psycopg": raw_pg_write}
REPLAYS = {"tui-agent": ours_replay, "LangGraph": langgraph_replay, "DBOS": dbos_replay}


def pg_cell(peer: str, setting: str, args) -> dict:
    """A PostgreSQL cell: in a fresh database, dropped after, or for DBOS's resume in the one kept across rounds.
    Through the link, also the round trips its timed steps asked for (`PEER round trips`)."""
    if setting == "replay" and peer == "DBOS":
        return dbos_replay(pg_database(args.postgres, PG_DBOS_REPLAY, "normal"), args.replay_steps)
    name = f"peers_{secrets.token_hex(6)}"
    url = pg_database(args.postgres, name, {"replay": "normal", "link": "full"}.get(setting, setting))
    try:
        if setting == "replay":
            return REPLAYS[peer](url, args.replay_steps)
        if setting == "link":
            step_overhead.count_trips = lambda: link.count_at(args.link_control)
            seconds = WRITES[peer](link.through(url, args.link_port), "full", args.link_steps, LINK_WARMUP)
            return {peer: seconds, f"{peer} round trips": step_overhead.trips}
        return {peer: WRITES[peer](url, setting, args.steps)}
    finally:
        drop_database(args.postgres, name)


def cell(peer: str, setting: str, args) -> dict:
    """One measurement in this (fresh) process: {peer: seconds}. Writes go to a fresh file, as fsync time differs
    from file to file; the peers' finished runs are built once, in args.dir, as building DBOS's takes long."""
    if setting.startswith("pg "):
        return pg_cell(peer, setting.removeprefix("pg "), args)
    if setting == "replay" and peer != "tui-agent":
        return REPLAYS[peer](Path(args.dir) / f"{peer}-replay.db", args.replay_steps)
    tmp = Path(tempfile.mkdtemp(prefix="tui-agent-peers-"))
    try:
        if setting == "replay":
            return REPLAYS[peer](tmp / "replay.db", args.replay_steps)
        return {peer: WRITES[peer](tmp / "write.db", setting, args.steps)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_cell(peer: str, setting: str, args) -> dict:
    """A cell in its own process; a failure comes back as its last line of stderr, never as a number."""
    cmd = [sys.executable, __file__, "--cell", peer, setting, "--steps", str(args.steps),
           "--replay-steps", str(args.replay_steps), "--dir", args.dir]
    cmd += ["--postgres", args.postgres] if args.postgres else []
    cmd += ["--link-steps", str(args.link_steps), "--link-port", str(args.link_port), "--link-control",
            str(args.link_control)] if args.postgres else []
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        return {peer: f"failed: {lines[-1]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def installed(peer: str) -> bool:
    return peer not in MODULES or importlib.util.find_spec(MODULES[peer]) is not None


def cells(args) -> list[tuple[str, str]]:
    found = []
    for _, peers, settings, replay in [BLOCKS["sqlite"]] + ([BLOCKS["postgres"]] if args.postgres else []):
        found += [(peer, setting) for setting in settings for peer in peers if installed(peer)]
        found += [(peer, replay) for peer in REPLAYS if peer in peers and installed(peer)]
    return found


def measure(args) -> dict:
    """{(peer, setting): [seconds per round]}, every cell once per round, the order reversed every other round."""
    results: dict = {}
    for r in range(args.rounds):
        order = cells(args) if r % 2 == 0 else cells(args)[::-1]
        for peer, setting in order:
            for who, value in run_cell(peer, setting, args).items():
                results.setdefault((who, setting), []).append(value)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    return results


def versions() -> str:
    names = ["dbos", "langgraph", "langgraph-checkpoint-sqlite", "sqlalchemy", "psycopg"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def fmt(seconds: float, scale: float) -> str:
    return f"{seconds * scale:,.1f}"


def row(label: str, peer: str, values: list, floor, ours_median, scale: float, trips: str | None = None) -> str:
    """A table row: median (min-max), and the ratios to raw sqlite3 and to tui-agent in the same setting; on
    PostgreSQL (`trips` not None) the round trips per step the link counted."""
    more = "" if trips is None else f" {trips} |"
    failed = [v for v in values if isinstance(v, str)]
    if failed:
        return f"| {label} | {peer} | {failed[0]} | | |{more}"
    median = statistics.median(values)
    spread = f"{fmt(median, scale)} ({fmt(min(values), scale)} – {fmt(max(values), scale)})"
    ratios = [f"{median / base:.2f}x" if isinstance(base, float) else "–" for base in (floor, ours_median)]
    return f"| {label} | {peer} | {spread} | {ratios[0]} | {ratios[1]} |{more}"


def medians(results: dict, setting: str) -> dict:
    return {peer: statistics.median(values) for (peer, s), values in results.items()
            if s == setting and not any(isinstance(v, str) for v in values)}


def table(results: dict, args, block: str) -> list[str]:
    floor, peers, settings, replay = BLOCKS[block]
    counted = block == "postgres"   # through the link: the round trips per step, the same on every setting's path
    lines = [f"| workload | peer | median (min – max) | / {floor} | / tui-agent |" + (" round trips per step |"
                                                                                       if counted else ""),
             "|---|---|---:|---:|---:|" + ("---:|" if counted else "")]
    workloads = [(s, f"{steps_of(args, s):,} steps, {what.format(link_ms=args.link_ms)} (us/step)",
                  1e6 / steps_of(args, s)) for s, what in settings.items()]
    workloads.append((replay, f"resume a finished {args.replay_steps:,}-step run (ms)", 1e3))
    for setting, label, scale in workloads:
        base = medians(results, setting)
        for peer in peers:
            trips = None
            if counted:
                counts = results.get((f"{peer} round trips", "pg link"), [])
                trips = f"{statistics.median(counts) / args.link_steps:.2f}" if counts and setting != replay else ""
            if not installed(peer):
                lines.append(f"| {label} | {peer} | {INSTALL} | | |" + (" |" if counted else ""))
            elif (peer, setting) in results:
                name = f"{peer} ({DEFAULTS[peer]})" if setting == "default" else peer
                lines.append(row(label, name, results[(peer, setting)], base.get(floor), base.get("tui-agent"), scale,
                                 trips))
    return lines


def steps_of(args, setting: str) -> int:
    return args.link_steps if setting == "pg link" else args.steps


def start_pg_server(args):
    """With --postgres and no URL, a throwaway server started as the tests start theirs (tests/pg_cluster.py), or
    None with args.postgres None and the reason in args.pg_skipped when the binaries are absent."""
    if args.postgres != "":
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import pg_cluster

    bin_dir = pg_cluster.find_bin_dir()
    if bin_dir is None:
        args.postgres, args.pg_skipped = None, pg_cluster.SKIP_REASON
        print(f"PostgreSQL rows skipped: {args.pg_skipped}", file=sys.stderr)
        return None
    server = pg_cluster.PgServer(bin_dir)
    server.start()
    args.postgres = server.url
    return server


def pg_header(args) -> str:
    with step_overhead.pg_conn(args.postgres) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        shown = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in ("fsync", "wal_sync_method",
                                                                               "shared_buffers")}
    where = f"a throwaway server (tests/pg_cluster.py) at {urlsplit(args.postgres).hostname}" if args.pg_server \
        else urlsplit(args.postgres).hostname
    settings = ", ".join(f"{k}={v}" for k, v in shown.items())
    return (f"\nPostgreSQL {version} on {where}, over TCP; {settings}; a fresh database per cell. LangGraph is not "
            "measured on PostgreSQL (its PostgresSaver, langgraph-checkpoint-postgres, is not in the bench extra). "
            f"The link (bench/link.py) adds {args.link_ms:g} ms each way, and counts the round trips of the steps "
            "timed through it; raw psycopg's row there is the link's own cost (one round trip per step).\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="7: 11 took 12 minutes on 2 cores")
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--replay-steps", type=int, default=step_overhead.REPLAY_STEPS)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 200 steps: a try-out, not a measurement")
    parser.add_argument("--postgres", nargs="?", const="", metavar="URL",
                        help="PostgreSQL rows too, on the server at URL (a role that may CREATE DATABASE); "
                             "without URL on a throwaway server")
    parser.add_argument("--link-ms", type=float, default=1.0, help="what the link adds each way (1 ms)")
    parser.add_argument("--link-steps", type=int, default=200, help="steps through the link (200)")
    parser.add_argument("--link-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--link-control", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cell", nargs=2, metavar=("PEER", "SETTING"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(cell(*args.cell, args)))
        return
    if args.quick:
        args.rounds, args.steps, args.replay_steps, args.link_steps = 3, 200, 1_000, 50
    started = time.time()
    args.dir = tempfile.mkdtemp(prefix="tui-agent-peers-")
    args.pg_skipped = None
    args.pg_server = start_pg_server(args)
    links = contextlib.ExitStack()
    try:
        if args.postgres:
            server = urlsplit(args.postgres)
            between = links.enter_context(link.Link(server.hostname, server.port or 5432, args.link_ms / 1000))
            args.link_port, args.link_control = between.port, between.control_port
        results = measure(args)
        header = pg_header(args) if args.postgres else ""
    finally:
        links.close()
        shutil.rmtree(args.dir, ignore_errors=True)
        if args.pg_server:
            args.pg_server.stop()
        elif args.postgres:
            drop_database(args.postgres, PG_DBOS_REPLAY)
    print(f"# peers, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, {os.cpu_count()} cores")
    print(f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}; {versions()}; "
          f"{args.rounds} interleaved rounds, each cell in a fresh process, {time.time() - started:.0f} s in all\n")
    print("\n".join(table(results, args, "sqlite")))
    if args.postgres:
        print(header)
        print("\n".join(table(results, args, "postgres")))
    elif args.pg_skipped:
        print(f"\nPostgreSQL rows skipped: {args.pg_skipped}")


if __name__ == "__main__":
    main()
