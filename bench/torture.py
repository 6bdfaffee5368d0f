"""The torture run (issue 21, part 3): real worker processes killed at random while an operator parks, resumes
and approves, and one worker paused past its lease; then the world and the store are checked, and one line is
printed:

    kills=N runs=30 duplicates=0 lost=0 refused_stale_writes=N integrity=ok

The cast, every one a real process on one temporary database and its data folder:

- 3 `tui-agent worker` processes (concurrency 2, lease 2 s). This process, the killer, sends SIGKILL to one of
  them at random moments and at once starts a new one in its place, under a new name. A moment is a random gap
  (0.4-1.2 s short, 0.4-1.4 s long) after the previous kill, stretched until some worker holds a run (at most
  5 s: a new worker takes a while to start, and killing an idle one proves nothing); the victim is a random
  one of those holding a run, else of all three.
- 30 runs, started at a steady pace through the chaos so that there is work at every kill: 20 nightly-report
  runs (the 4 service modes, dedupe/every x lookup/none, 5 each; 7 of them ask for approval), each for its own
  team and so with its own email key; 10 refactor-imports runs, each on a tree of its own.
- 1 worker paused past its lease: started before the others with TUI_AGENT_PAUSE_AT=after-step:1, it claims the
  first run and stops itself between that run's first step function and the step's commit. Once its lease has
  ended and the run's fence has moved (another worker took it over, or the operator parked it), it gets
  SIGCONT; its commit must be refused, and the store must say so (a `let_go` row for its claim). Then it is
  killed too (not counted among the kills): a worker the killer spared would shield the runs it claimed next.
- 1 operator (this file with --operator: a process of its own acting through tui_agent.operate): every
  0.1-0.5 s it picks a run that has not ended and resumes it if parked, approves it if asked, or else parks it
  one time in four.

End condition. The chaos lasts until the kills reached the form's count, all 30 runs have been started and the
paused worker's refusal is on record (bounded by the form's chaos_s, past which that is a problem). Then the
operator is stopped and this process, as the person, resumes every parked run and approves every question,
again and again, while the workers (no longer killed) drain the queue. The drain ends when every run has
ended or waits for a person on an effect nobody else can decide (`waiting: reconcile`, not held back for a
sender that may still send), and nothing is queued, running, parked or asked (bounded by drain_s; what is
left then counts as lost). Then every process is stopped and the checks run.

The one wait the design requires: a nightly-report run with service `every` and no lookup whose send was
attempted when its worker died (or was fenced off) has its effect `unknown` and waits for a person
(`reconcile`): nothing can tell whether the email left, and a resend could be a second email. It is not lost;
its email must still have gone out at most once. Every other run must have succeeded.

The checks, all read from the world and the store once every process has stopped:

- emails: the outbox's Maildir holds at most one message per idempotency key, and exactly one for each
  succeeded nightly-report run;
- files: each refactor tree is byte for byte its reference (each original file put through the rewrite engine
  once, in this process, without the runtime), with no temporary file left; the run planned exactly the files
  that mention the old module and journaled one entry for each. That proves each file's new content was
  renamed into place exactly once: at least once (the bytes), and never twice, because the rewrite is
  idempotent (a second attempt finds nothing to change and records `already done` in the file's one entry,
  which only a claim that died between the rename and the record can cause: at most claims - 1 of them);
- journal: no (run, generation, position) twice, positions 0..n-1 without a gap, no name twice in one
  generation, each checkpoint's current_step equal to its entries (as readers see it: the `checkpoints_now` view
  where the schema has one); each journaled model call answered exactly once (model_calls). Fetches: the sources' log
  (fetches.log, lines without run ids) holds at least one line per journaled fetch, and at most one more per nightly
  claim that was not the last (a step in flight when its claim died or was refused runs again: at-least-once); a
  replay that called a recorded fetch again would add three per claim and break the bound;
- `PRAGMA integrity_check` is ok; no worker printed a traceback or exited other than by our signals.

refused_stale_writes is what the store and the world recorded: the `let_go` rows (each a claim whose write the
fence refused: the paused worker's, every worker the operator's park took a run from, any whose lease ran out
while it lived) plus the outbox's `stale_refused` counter. duplicates counts each extra email, journal position
or name, answered model call, and each fetch or `already done` beyond its bound; lost counts each run in no allowed
end and each succeeded run without its email.
On a failure the line shows the real numbers, one line per problem follows, and the exit code is 1.

    python bench/torture.py --short    # the suite's form: >= 10 kills, 150-file trees; 13-16 s on 2 idle cores,
                                       # 20-30 s beside a test run
    python bench/torture.py            # the long form: >= 100 kills, 1000-file trees; 110 s on 2 idle cores
    --seed N (default 1); --keep keeps the temporary folder and prints its path on stderr
"""

from __future__ import annotations

import argparse
import email.policy
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from email.parser import BytesParser
from pathlib import Path

from tui_agent import operate
from tui_agent.agents.imports_rewrite import mentions, rewrite
from tui_agent.agents.nightly_report import fetch_log
from tui_agent.errors import TuiAgentError
from tui_agent.runtime.registry import load_registry
from tui_agent.states import TERMINAL
from tui_agent.store import data_dir_for, open_store

ROOT = Path(__file__).resolve().parent.parent
RUNS, WORKERS, CONCURRENCY, LEASE_S = 30, 3, 2, 2.0
OLD, NEW, DATE = "legacy_util", "modern_util", "2026-11-30"
MODES = [("dedupe", True), ("dedupe", False), ("every", True), ("every", False)]
PAUSED = "paused"
FIRST_BATCH = 4   # queued before the paused worker starts, so it has a run to claim
KILL_PATIENCE_S = 5   # how long a kill may wait for a worker that holds a run (new workers take a while to start)


@dataclass(frozen=True)
class Form:
    kills: int
    files: int                          # per refactor-imports tree
    delay_s: float                      # nightly-report's pause in each fetch, its report and its send
    kill_gap_s: tuple[float, float]
    chaos_s: float                      # bound on the chaos
    drain_s: float                      # bound on the drain


SHORT = Form(kills=10, files=150, delay_s=0.2, kill_gap_s=(0.4, 1.2), chaos_s=40, drain_s=25)
LONG = Form(kills=100, files=1000, delay_s=0.4, kill_gap_s=(0.4, 1.4), chaos_s=400, drain_s=120)


@dataclass
class Tally:
    kills: int = 0
    duplicates: int = 0
    lost: int = 0
    refused: int = 0
    integrity: str = "?"
    problems: list[str] = field(default_factory=list)

    def duplicate(self, n: int, why: str) -> None:
        self.duplicates += n
        self.problems.append(f"duplicate: {why}")

    def lose(self, why: str) -> None:
        self.lost += 1
        self.problems.append(f"lost: {why}")

    def line(self) -> str:
        return (f"kills={self.kills} runs={RUNS} duplicates={self.duplicates} lost={self.lost} "
                f"refused_stale_writes={self.refused} integrity={self.integrity}")


def say(text: str) -> None:
    print(f"torture: {text}", file=sys.stderr, flush=True)


def child_env() -> dict[str, str]:
    """The environment without a crash point, clock, database, agents or API key of the caller's."""
    drop = {"TUI_AGENT_CRASH_AT", "TUI_AGENT_PAUSE_AT", "TUI_AGENT_NOW", "TUI_AGENT_DB", "TUI_AGENT_AGENTS",
            "TUI_AGENT_DURABILITY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def read_only(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (`T`: stopped); empty once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


# -- the world: trees, runs, the outbox -----------------------------------------------------------------


def make_tree(root: Path, count: int, rng: random.Random) -> dict[str, bytes]:
    """`count` files that import OLD (Python and TypeScript with CRLF), plus one that does not; name -> bytes."""
    files = {"plain.py": b"import json\n"}
    for i in range(count):
        if i % 2:
            files[f"pkg{i % 4}/mod_{i}.py"] = (f"import os\nfrom {OLD}.part{i % 3} import thing_{i}\n"
                                               f"import {OLD} as old\nVALUE = {rng.randint(0, 10**6)}\n").encode()
        else:
            files[f"web{i % 3}/comp_{i}.ts"] = (f"import {{ cn }} from '{OLD}/part{i % 3}';\r\n"
                                                f"const x = require(\"{OLD}\");\r\n"
                                                f"export const v{i} = {rng.randint(0, 10**6)};\r\n").encode()
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def reference(files: dict[str, bytes]) -> dict[str, bytes]:
    """Each file as one pass of the rewrite engine leaves it, without the runtime and without crashes."""
    return {name: rewrite(data, name, OLD, NEW).data if mentions(data, OLD) else data for name, data in files.items()}


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def plan_runs(tmp: Path, form: Form, rng: random.Random) -> tuple[list[tuple[str, dict]], dict[str, dict]]:
    """The 30 runs in a seeded order, and each refactor tree's originals by root."""
    runs = [("nightly-report", {"date": DATE, "team": f"team-{i:02d}", "service": service, "lookup": lookup,
                                "approve": i % 3 == 0, "delay_s": form.delay_s})
            for i, (service, lookup) in enumerate(MODES * 5)]
    trees = {}
    for i in range(RUNS - len(runs)):
        root = tmp / "trees" / f"tree-{i:02d}"
        trees[str(root)] = make_tree(root, form.files, rng)
        runs.append(("refactor-imports", {"root": str(root), "from": OLD, "to": NEW}))
    rng.shuffle(runs)
    return runs, trees


class World:
    """The database, its data folder, the runs and the processes; everything under one temporary folder."""

    def __init__(self, tmp: Path, form: Form, rng: random.Random) -> None:
        self.tmp, self.form, self.rng = tmp, form, rng
        self.db = tmp / "runs.db"
        self.data = data_dir_for(self.db)
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.plan, self.trees = plan_runs(tmp, form, rng)
        self.store = open_store(self.db)
        self.ro = read_only(self.db)
        self.registry = load_registry()
        self.run_ids: list[str] = []
        self.procs: dict[str, subprocess.Popen] = {}

    def start_runs(self, upto: int) -> None:
        while len(self.run_ids) < min(upto, RUNS):
            agent, request = self.plan[len(self.run_ids)]
            self.run_ids.append(operate.start(self.store, self.registry, agent_name=agent, request=request,
                                              model="scripted")[0])

    def spawn(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
        out, err = (open(self.logs / f"{name}.{kind}", "wb") for kind in ("out", "err"))
        with out, err:
            proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env={**child_env(), **(env or {})})
        self.procs[name] = proc
        return proc

    def worker(self, name: str, *extra: str, env: dict | None = None) -> subprocess.Popen:
        return self.spawn(name, [sys.executable, "-m", "tui_agent", "--db", str(self.db), "worker", "--lease",
                                 f"{LEASE_S:g}", "--grace", "1", "--name", name, *extra], env)

    def statuses(self) -> list[tuple[str, str, str | None]]:
        return self.ro.execute("SELECT id, status, reason FROM runs").fetchall()

    def registered(self, timeout_s: float = 10) -> None:
        """Wait until every live worker has registered: its SIGTERM handler is in place by then."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            live = {n for n, p in self.procs.items() if n != "operator" and p.poll() is None}
            if live <= {n for (n,) in self.ro.execute("SELECT name FROM workers")}:
                return
            time.sleep(0.05)

    def stop_all(self) -> dict[str, int | str]:
        """SIGTERM (after SIGCONT) to every live process, SIGKILL after 10 s; the exit code of each."""
        self.registered()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | str] = {}
        deadline = time.monotonic() + 10
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = f"did not stop on SIGTERM (killed, {proc.wait()})"
        return codes

    def close(self) -> None:
        self.ro.close()
        self.store.close()


# -- the chaos: killer, paused worker, operator ----------------------------------------------------------


class Fleet:
    """The 3 workers the killer picks from; each slot is refilled at once under a new name."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.born = Counter()
        self.mid_run = 0   # kills of a worker that held a run at that instant
        self.slots = {slot: self.spawn(slot) for slot in range(WORKERS)}

    def spawn(self, slot: int) -> str:
        self.born[slot] += 1
        name = f"w{slot}.{self.born[slot]}"
        self.world.worker(name, "--concurrency", str(CONCURRENCY))
        return name

    def holders(self) -> list[int]:
        """The slots whose worker holds a live lease now."""
        holding = {w for (w,) in self.world.ro.execute(
            "SELECT DISTINCT worker FROM runs WHERE status = 'running' AND lease_expires_at > ?", (time.time(),))}
        return [s for s, name in self.slots.items() if name in holding]

    def kill_one(self, rng: random.Random) -> str:
        holders = self.holders()
        self.mid_run += bool(holders)
        slot = rng.choice(holders or list(self.slots))
        victim = self.world.procs[self.slots[slot]]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed, self.slots[slot] = self.slots[slot], self.spawn(slot)
        return killed

    def exited(self) -> list[str]:
        """Live-slot workers that ended by themselves (a worker stops only on a damaged or full database)."""
        return [name for name in self.slots.values() if self.world.procs[name].poll() is not None]


class Paused:
    """A worker stopped between a step's function and its commit, continued once its run was taken from it."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world, self.rng = world, rng
        self.proc = world.worker(PAUSED, "--once", env={"TUI_AGENT_PAUSE_AT": "after-step:1"})
        self.claim: tuple[str, int, float] | None = None   # run, fence, lease end
        self.continue_at = 0.0
        self.done = False

    def wait_stopped(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while process_state(self.proc.pid) not in ("T", "") and time.monotonic() < deadline:
            time.sleep(0.01)
        if process_state(self.proc.pid) != "T":
            raise RuntimeError(f"the paused worker did not stop itself (exit {self.proc.poll()})")
        self.claim = self.world.ro.execute("SELECT id, fence, lease_expires_at FROM runs WHERE worker = ? AND"
                                           " status = 'running'", (PAUSED,)).fetchone()
        if self.claim is None:
            raise RuntimeError("the paused worker stopped without holding a run")
        self.continue_at = self.claim[2] + self.rng.uniform(0, 1)

    def step(self) -> None:
        """SIGCONT once the lease is over and the fence moved; done when the store recorded its refusal. Then it
        is killed (not counted as a kill): a worker the killer spares would shield the runs it claims next."""
        if self.done or self.claim is None:
            return
        run_id, fence, _ = self.claim
        if process_state(self.proc.pid) == "T":
            (now_fence,) = self.world.ro.execute("SELECT fence FROM runs WHERE id = ?", (run_id,)).fetchone()
            if now_fence > fence and time.time() >= self.continue_at:
                self.proc.send_signal(signal.SIGCONT)
            return
        if self.world.ro.execute("SELECT 1 FROM let_go WHERE run_id = ? AND fence = ?", (run_id, fence)).fetchone():
            self.proc.kill()
            self.proc.wait()
            self.done = True


def operator(db: Path, seed: int) -> None:
    """The operator's process: park, resume and approve at random until SIGTERM; one line per action."""
    rng, store = random.Random(seed), open_store(db, create=False)
    while True:
        time.sleep(rng.uniform(0.1, 0.5))
        live = store.conn.execute("SELECT id, status, reason FROM runs WHERE status NOT IN"
                                  " ('succeeded', 'failed', 'cancelled')").fetchall()
        if not live:
            continue
        run_id, status, reason = rng.choice(live)
        if status == "parked":
            act = operate.resume
        elif (status, reason) == ("waiting", "approval"):
            act = operate.approve
        elif rng.random() < 0.25:
            act = operate.park
        else:
            continue
        try:
            act(store, run_id)
            print(f"{act.__name__} {run_id} ({status} {reason or ''})", flush=True)
        except TuiAgentError as e:   # another actor got there first: the loser's one line
            print(f"{act.__name__} {run_id} refused: {e}", flush=True)


def chaos(world: World, tally: Tally) -> None:
    """Kills at random moments, the paused worker's episode and the operator, until the end condition."""
    form, rng = world.form, world.rng
    world.start_runs(FIRST_BATCH)
    began = time.monotonic()
    paused = Paused(world, rng)
    paused.wait_stopped()
    fleet = Fleet(world)
    world.spawn("operator", [sys.executable, str(Path(__file__).resolve()), "--operator", str(world.db),
                             "--seed", str(rng.randrange(10**9))])
    pace_s = form.kills * sum(form.kill_gap_s) / 2 / RUNS
    next_kill = began + rng.uniform(*form.kill_gap_s)
    while not (tally.kills >= form.kills and len(world.run_ids) == RUNS and paused.done):
        now = time.monotonic()
        if now - began > form.chaos_s:
            tally.problems.append(f"the chaos did not end within {form.chaos_s:g} s (kills {tally.kills}, runs "
                                  f"started {len(world.run_ids)}, paused worker refused: {paused.done})")
            break
        if fleet.exited():
            tally.problems.append(f"workers exited by themselves: {', '.join(fleet.exited())}")
            break
        world.start_runs(FIRST_BATCH + int((now - began) / pace_s))
        paused.step()
        if now >= next_kill and (now >= next_kill + KILL_PATIENCE_S or fleet.holders()):
            fleet.kill_one(rng)
            tally.kills += 1
            next_kill = time.monotonic() + rng.uniform(*form.kill_gap_s)
        time.sleep(0.02)
    world.procs["operator"].terminate()
    world.procs["operator"].wait()
    acts = Counter(line.split()[0] for line in (world.logs / "operator.out").read_text().splitlines()
                   if " refused: " not in line)
    say(f"chaos over after {time.monotonic() - began:.1f} s: {tally.kills} kills ({fleet.mid_run} of a worker "
        f"holding a run); the operator's {dict(acts)}")


def drain(world: World, tally: Tally) -> None:
    """The person at the end: resume what is parked, approve what is asked, until every run has ended or
    waits on an effect only a person can decide."""
    began = time.monotonic()
    while time.monotonic() < began + world.form.drain_s:
        rows = world.statuses()
        for run_id, status, reason in rows:
            if status == "parked" or (status, reason) == ("waiting", "approval"):
                try:
                    (operate.resume if status == "parked" else operate.approve)(world.store, run_id)
                except TuiAgentError:
                    pass   # a worker moved first; the next pass looks again
        if all(status in TERMINAL or held_for_person(world, run_id, status, reason)
               for run_id, status, reason in rows):
            say(f"drained in {time.monotonic() - began:.1f} s")
            return
        time.sleep(0.1)
    live = [(name, pid, process_state(pid), round(time.time() - beat, 1)) for name, pid, beat in world.ro.execute(
        "SELECT name, pid, heartbeat_at FROM workers WHERE stopped_at IS NULL") if process_state(pid)]
    tally.problems.append(f"the drain did not end within {world.form.drain_s:g} s; live workers (name, pid, state, "
                          f"heartbeat age s): {live}")


def held_for_person(world: World, run_id: str, status: str, reason: str | None) -> bool:
    """Waiting on an effect a person must decide, not on a sender that may still send (a worker frees that)."""
    if (status, reason) != ("waiting", "reconcile"):
        return False
    return world.ro.execute("SELECT count(*) FROM effects WHERE run_id = ? AND waits_for IS NOT NULL",
                            (run_id,)).fetchone()[0] == 0


# -- the checks ----------------------------------------------------------------------------------------


def delivered(data: Path) -> dict[str, list[str]]:
    """The Message-IDs in the outbox's Maildir per idempotency key."""
    ids: dict[str, list[str]] = {}
    parser = BytesParser(policy=email.policy.default)
    for path in [*(data / "outbox" / "new").glob("*"), *(data / "outbox" / "cur").glob("*")]:
        with open(path, "rb") as f:
            headers = parser.parse(f, headersonly=True)
        ids.setdefault(headers["X-Idempotency-Key"], []).append(headers["Message-ID"])
    return ids


def outbox_counters(data: Path) -> dict:
    path = data / "outbox.keys.json"
    return json.loads(path.read_text())["counters"] if path.exists() else {}


def check_runs(world: World, tally: Tally, ro: sqlite3.Connection) -> None:
    """Each run ended as allowed; each nightly email at most once, exactly once when the run succeeded."""
    emails = delivered(world.data)
    for key, ids in emails.items():
        if len(ids) > 1:   # one delivery number twice: the outbox's process died before it remembered the first
            lost_memory = " (a Message-ID twice: the kill came between delivery and the outbox's memory)" \
                if len(set(ids)) < len(ids) else ""
            tally.duplicate(len(ids) - 1, f"{len(ids)} emails for {key}: {', '.join(ids)}{lost_memory}")
    for run_id, (agent, request) in zip(world.run_ids, world.plan):
        status, reason = ro.execute("SELECT status, reason FROM runs WHERE id = ?", (run_id,)).fetchone()
        if agent == "refactor-imports":
            if status != "succeeded":
                tally.lose(f"{run_id} (refactor-imports) is {status} {reason}")
            check_tree(world, tally, ro, run_id, request["root"])
            continue
        key = f"nightly-report:{request['date']}:{request['team']}"
        if status == "succeeded" and key not in emails:   # more than one is a duplicate, counted above
            tally.lose(f"{run_id} succeeded but no email for {key} was delivered")
        elif status != "succeeded" and not may_wait(ro, run_id, status, reason, request):
            tally.lose(f"{run_id} (nightly-report {request['service']}, lookup {request['lookup']}) is {status} "
                       f"{reason}")


def may_wait(ro: sqlite3.Connection, run_id: str, status: str, reason: str | None, request: dict) -> bool:
    """The one wait the design requires: an `every` service without lookup, its send in doubt."""
    if (status, reason, request["service"], request["lookup"]) != ("waiting", "reconcile", "every", False):
        return False
    return ro.execute("SELECT state FROM effects WHERE run_id = ? AND name = 'send-report'",
                      (run_id,)).fetchone() == ("unknown",)


def check_tree(world: World, tally: Tally, ro: sqlite3.Connection, run_id: str, root: str) -> None:
    """Byte for byte the reference, the plan the files that mention OLD, one entry per file."""
    originals = world.trees[root]
    expected = reference(originals)
    now = snapshot(Path(root))
    wrong = sorted(set(now) ^ set(expected) | {n for n in set(now) & set(expected) if now[n] != expected[n]})
    if wrong:
        tally.lose(f"{run_id}: {len(wrong)} files differ from the reference, e.g. {wrong[:3]}")
    entries = ro.execute("SELECT name, result FROM journal WHERE run_id = ? AND name LIKE 'file:%'",
                         (run_id,)).fetchall()
    planned = {n for n, data in originals.items() if mentions(data, OLD)}
    names = Counter(name.removeprefix("file:") for name, _ in entries)
    if set(names) != planned and ro.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0] \
            == "succeeded":
        tally.lose(f"{run_id}: journaled {len(names)} files, planned {len(planned)}")
    again = sum('"already done"' in result for _, result in entries)
    (claims,) = ro.execute("SELECT attempt FROM runs WHERE id = ?", (run_id,)).fetchone()
    if again > max(claims - 1, 0):
        tally.duplicate(again - max(claims - 1, 0), f"{run_id}: {again} files 'already done' with {claims} claims")


def check_journal(world: World, tally: Tally, ro: sqlite3.Connection) -> None:
    """No position or name twice, no gap, checkpoints that match, one answer per model call, fetches bounded."""
    for sql, what in (
        ("SELECT run_id, generation, position, count(*) FROM journal GROUP BY 1, 2, 3 HAVING count(*) > 1",
         "position written twice"),
        ("SELECT run_id, generation, name, count(*) FROM journal GROUP BY 1, 2, 3 HAVING count(*) > 1",
         "name journaled twice"),
        ("SELECT run_id, generation, position, count(*) FROM model_calls WHERE state = 'answered'"
         " GROUP BY 1, 2, 3 HAVING count(*) > 1", "model call answered twice"),
    ):
        for *where, n in ro.execute(sql):
            tally.duplicate(n - 1, f"{what}: {where}")
    for run_id, gen, n, last in ro.execute("SELECT run_id, generation, count(*), max(position) FROM journal"
                                           " GROUP BY 1, 2"):
        if last != n - 1:
            tally.problems.append(f"journal gap in {run_id} g{gen}: {n} entries up to position {last}")
    for run_id, step, n in ro.execute(f"SELECT c.run_id, c.current_step, (SELECT count(*) FROM journal j JOIN runs"
                                      f" r ON r.id = j.run_id WHERE j.run_id = c.run_id AND j.generation ="
                                      f" r.generation) FROM {checkpoints(ro)} c"):
        if step != n:
            tally.problems.append(f"checkpoint of {run_id} says step {step}, its journal has {n} entries")
    unanswered = ro.execute("SELECT j.run_id, j.position FROM journal j WHERE j.kind = 'model' AND NOT EXISTS"
                            " (SELECT 1 FROM model_calls m WHERE m.run_id = j.run_id AND m.generation ="
                            " j.generation AND m.position = j.position AND m.state = 'answered')").fetchall()
    if unanswered:
        tally.problems.append(f"journaled model calls without an answered call: {unanswered}")
    check_fetches(world, tally, ro)


def checkpoints(ro: sqlite3.Connection) -> str:
    """Where readers read a checkpoint: the `checkpoints_now` view where the schema has one (the row itself is
    brought up to date only every few plain steps, the view adds its tail), else the row."""
    view = ro.execute("SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = 'checkpoints_now'").fetchone()
    return "checkpoints_now" if view else "checkpoints"


def check_fetches(world: World, tally: Tally, ro: sqlite3.Connection) -> None:
    log = fetch_log(world.data)
    lines = len(log.read_text().splitlines()) if log.exists() else 0
    (journaled,) = ro.execute("SELECT count(*) FROM journal WHERE name LIKE 'fetch:%'").fetchone()
    (unfinished,) = ro.execute("SELECT coalesce(sum(attempt - 1), 0) FROM runs WHERE agent = 'nightly-report'"
                               ).fetchone()
    if lines < journaled:
        tally.problems.append(f"{journaled} fetches journaled, only {lines} served")
    if lines > journaled + unfinished:
        tally.duplicate(lines - journaled - unfinished, f"{lines} fetches served for {journaled} journaled, with "
                                                        f"{unfinished} claims that were not a run's last")


def check_processes(world: World, tally: Tally, codes: dict) -> None:
    """Workers end by our SIGKILL or SIGTERM (exit 0); none prints a traceback."""
    for name, code in codes.items():
        if name != "operator" and code not in (0, -signal.SIGKILL):
            tally.problems.append(f"{name} exited {code}")
        err = (world.logs / f"{name}.err").read_text(errors="replace")
        if "Traceback" in err:
            tally.problems.append(f"{name} printed a traceback: {err[err.index('Traceback'):][:1500]}")


def check(world: World, tally: Tally, codes: dict) -> None:
    ro = read_only(world.db)
    try:
        check_runs(world, tally, ro)
        check_journal(world, tally, ro)
        (letgo,) = ro.execute("SELECT count(*) FROM let_go").fetchone()
        tally.refused = letgo + outbox_counters(world.data).get("stale_refused", 0)
        rows = [r for (r,) in ro.execute("PRAGMA integrity_check")]
        tally.integrity = "ok" if rows == ["ok"] else "damaged"
        if rows != ["ok"]:
            tally.problems.append(f"integrity_check: {rows[:5]}")
    finally:
        ro.close()
    check_processes(world, tally, codes)
    if len(world.run_ids) != RUNS:
        tally.problems.append(f"only {len(world.run_ids)} of {RUNS} runs were started")


def torture(form: Form, seed: int, keep: bool) -> Tally:
    tmp = Path(tempfile.mkdtemp(prefix="tui-agent-torture-"))
    tally, world, codes = Tally(), None, {}
    try:
        world = World(tmp, form, random.Random(seed))
        try:
            chaos(world, tally)
            drain(world, tally)
        finally:
            codes = world.stop_all()
        check(world, tally, codes)
    except Exception as e:   # the harness itself failed: say so on the line's terms
        tally.problems.append(f"the harness stopped: {type(e).__name__}: {e}")
    finally:
        if world is not None:
            world.close()
        if keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="the suite's form: >= 10 kills, small trees")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--operator", type=Path, help=argparse.SUPPRESS)   # the operator's own process
    args = parser.parse_args()
    if args.operator:
        operator(args.operator, args.seed)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # through the finally blocks: no worker outlives us
    began = time.monotonic()
    tally = torture(SHORT if args.short else LONG, args.seed, args.keep)
    say(f"{time.monotonic() - began:.1f} s")
    print(tally.line())
    for problem in tally.problems:
        print(problem)
    return 1 if tally.problems or tally.duplicates or tally.lost or tally.integrity != "ok" else 0


if __name__ == "__main__":
    sys.exit(main())
