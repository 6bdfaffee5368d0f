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

    pip install -e '.[bench]'
    python bench/peers.py            # 7 rounds, about 8 minutes on 2 cores (--rounds 11: 12 minutes)
    python bench/peers.py --quick    # a try-out
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import step_overhead
from step_overhead import WARMUP, ours, raw_conn, raw_inserts, replay_row, timed, tiny

from tui_agent.store import open_store
from tui_agent.store.db import DURABILITY

PEERS = {"raw sqlite3": None, "tui-agent": None, "LangGraph": "langgraph", "DBOS": "dbos"}
SETTINGS = {"full": "WAL + synchronous=FULL", "normal": "WAL + synchronous=NORMAL", "default": "its own default"}
DEFAULTS = {"raw sqlite3": "rollback journal, FULL", "tui-agent": "WAL, FULL",
            "LangGraph": "WAL, FULL, durability=async", "DBOS": "rollback journal, FULL"}
LANGGRAPH_REPS = 7
INSTALL = "not installed (pip install -e '.[bench]')"


def raw_write(path: Path, setting: str, steps: int) -> float:
    conn = sqlite3.connect(path) if setting == "default" else raw_conn(path, setting)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT)")
    conn.commit()
    raw_inserts(conn, WARMUP)
    return raw_inserts(conn, steps)


def ours_write(path: Path, setting: str, steps: int) -> float:
    store = open_store(path) if setting == "default" else open_store(path, setting)
    ours(store, WARMUP)
    return ours(store, steps)[1]


def ours_replay(path: Path, steps: int) -> dict:
    """tui-agent's and raw sqlite3's resume come together from step_overhead.replay_row, in path's directory."""
    step_overhead.REPLAY_STEPS = steps  # replay_row's run length, read when it runs
    best = replay_row(path.parent)
    return {"tui-agent": best["ours"], "raw sqlite3": best["raw"]}


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


def langgraph_write(path: Path, setting: str, steps: int) -> float:
    graph = langgraph_graph(path, setting)
    durability = None if setting == "default" else "sync"
    langgraph_run(graph, "warm-up", WARMUP, durability)
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


def dbos_launch(path: Path, setting: str):
    """DBOS on a SQLite system database; the pragmas go on every connection its engine opens."""
    import sqlalchemy
    from dbos import DBOS

    if setting != "default":
        def pragmas(conn, _record):
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={DURABILITY[setting]}")
        sqlalchemy.event.listen(sqlalchemy.pool.Pool, "connect", pragmas)
    DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{path}", "application_version": "bench",
                 "log_level": "WARNING"})
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


def dbos_write(path: Path, setting: str, steps: int) -> float:
    dbos, workflow = dbos_launch(path, setting)
    workflow(WARMUP)
    seconds = timed(lambda: workflow(steps))
    dbos.destroy()
    return seconds


def dbos_replay(path: Path, steps: int) -> dict:
    """Mark the finished workflow (built by the first round) PENDING again and resume it: the time its body takes
    with every step already recorded."""
    from dbos import SetWorkflowID

    built = path.exists()
    dbos, workflow = dbos_launch(path, "normal")
    if not built:
        with SetWorkflowID("finished"):
            workflow(steps)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE workflow_status SET status = 'PENDING' WHERE workflow_uuid = 'finished'")
    before = step_overhead.calls
    seconds = dbos.resume_workflow("finished").get_result()
    assert step_overhead.calls == before, "a resumed step ran its function"
    dbos.destroy()
    return {"DBOS": seconds}


WRITES = {"raw sqlite3": raw_write, "tui-agent": ours_write, "LangGraph": langgraph_write, "DBOS": dbos_write}
REPLAYS = {"tui-agent": ours_replay, "LangGraph": langgraph_replay, "DBOS": dbos_replay}


def cell(peer: str, setting: str, args) -> dict:
    """One measurement in this (fresh) process: {peer: seconds}. Writes go to a fresh file, as fsync time differs
    from file to file; the peers' finished runs are built once, in args.dir, as building DBOS's takes long."""
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
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
        return {peer: f"failed: {lines[-1]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def installed(peer: str) -> bool:
    return PEERS[peer] is None or importlib.util.find_spec(PEERS[peer]) is not None


def cells() -> list[tuple[str, str]]:
    writes = [(peer, setting) for setting in SETTINGS for peer in PEERS if installed(peer)]
    return writes + [(peer, "replay") for peer in REPLAYS if installed(peer)]


def measure(args) -> dict:
    """{(peer, setting): [seconds per round]}, every cell once per round, the order reversed every other round."""
    results: dict = {}
    for r in range(args.rounds):
        order = cells() if r % 2 == 0 else cells()[::-1]
        for peer, setting in order:
            for who, value in run_cell(peer, setting, args).items():
                results.setdefault((who, setting), []).append(value)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    return results


def versions() -> str:
    names = ["dbos", "langgraph", "langgraph-checkpoint-sqlite", "sqlalchemy"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def fmt(seconds: float, scale: float) -> str:
    return f"{seconds * scale:,.1f}"


def row(label: str, peer: str, values: list, floor, ours_median, scale: float) -> str:
    """A table row: median (min-max), and the ratios to raw sqlite3 and to tui-agent in the same setting."""
    failed = [v for v in values if isinstance(v, str)]
    if failed:
        return f"| {label} | {peer} | {failed[0]} | | |"
    median = statistics.median(values)
    spread = f"{fmt(median, scale)} ({fmt(min(values), scale)} – {fmt(max(values), scale)})"
    ratios = [f"{median / base:.2f}x" if isinstance(base, float) else "–" for base in (floor, ours_median)]
    return f"| {label} | {peer} | {spread} | {ratios[0]} | {ratios[1]} |"


def medians(results: dict, setting: str) -> dict:
    return {peer: statistics.median(values) for (peer, s), values in results.items()
            if s == setting and not any(isinstance(v, str) for v in values)}


def table(results: dict, args) -> list[str]:
    lines = ["| workload | peer | median (min – max) | / raw sqlite3 | / tui-agent |", "|---|---|---:|---:|---:|"]
    workloads = [(s, f"{args.steps:,} steps, {what} (us/step)", 1e6 / args.steps) for s, what in SETTINGS.items()]
    workloads.append(("replay", f"resume a finished {args.replay_steps:,}-step run (ms)", 1e3))
    for setting, label, scale in workloads:
        base = medians(results, setting)
        for peer in PEERS:
            if not installed(peer):
                lines.append(f"| {label} | {peer} | {INSTALL} | | |")
            elif (peer, setting) in results:
                name = f"{peer} ({DEFAULTS[peer]})" if setting == "default" else peer
                lines.append(row(label, name, results[(peer, setting)], base.get("raw sqlite3"),
                                 base.get("tui-agent"), scale))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="7: 11 took 12 minutes on 2 cores")
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--replay-steps", type=int, default=step_overhead.REPLAY_STEPS)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 200 steps: a try-out, not a measurement")
    parser.add_argument("--cell", nargs=2, metavar=("PEER", "SETTING"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(cell(*args.cell, args)))
        return
    if args.quick:
        args.rounds, args.steps, args.replay_steps = 3, 200, 1_000
    started = time.time()
    args.dir = tempfile.mkdtemp(prefix="tui-agent-peers-")
    try:
        results = measure(args)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(f"# peers, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, {os.cpu_count()} cores")
    print(f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}; {versions()}; "
          f"{args.rounds} interleaved rounds, each cell in a fresh process, {time.time() - started:.0f} s in all\n")
    print("\n".join(table(results, args)))


if __name__ == "__main__":
    main()
