"""Keeping the database small (issue 40, item 4): `tui-agent prune` removes exactly the ended runs it may, with every
row and file that belonged to them, keeps what a kept run still needs, and the keys of the removed runs outlive
them: a later run with a removed run's effect key does not do the effect again, a `patch-night` fire after its
runs were removed starts none. A worker running meanwhile waits for prune at most the bound docs/operating.md
gives."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from helpers import crashed_into_doubt, later, ok, on_sqlite, until, work

from tui_agent import operate
from tui_agent.agents.patch_sample import sample_repo
from tui_agent.runtime.clock import now
from tui_agent.runtime.registry import load_registry
from tui_agent.store import artifacts, open_store
from tui_agent.store import prune as prune_module
from tui_agent.store.runs import events_for, get_run

DAY = 86400
BIG = 40_000   # a first step's result this long is kept as an artifact (over 32 KiB): a file, or a row


def tables_with_runs(store) -> list[str]:
    """Every table that holds rows of a run (a `run_id` column), found in the catalog: a table added later is
    checked too. kept_keys is not a run's: it is what outlives them."""
    if on_sqlite(store):
        names = [name for (name,) in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        found = [name for name in names if "run_id" in [c[1] for c in store.conn.execute(f'PRAGMA table_info("{name}")')]]
    else:
        found = [name for (name,) in store.conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'run_id' AND table_schema ="
            " current_schema() AND table_name IN (SELECT table_name FROM information_schema.tables WHERE"
            " table_type = 'BASE TABLE')")]
    return sorted(set(found) - {"kept_keys"})


def belongings(store, run_id: str) -> dict:
    """Everything of one run: its row, its rows in every other table, its artifacts (rows and files)."""
    held = {"runs": sorted(map(repr, store.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,))))}
    for table in tables_with_runs(store):
        held[table] = sorted(map(repr, store.conn.execute(f"SELECT * FROM {table} WHERE run_id = ?", (run_id,))))
    held["artifact rows"] = sorted(path for (path,) in store.conn.execute(
        "SELECT path FROM artifacts WHERE path LIKE ?", (f"artifacts/{run_id}/%",)))
    root = artifacts.folder(store)
    folder = root / "artifacts" / run_id if root else None
    held["artifact files"] = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder and \
        folder.exists() else []
    return held


def test_prune_removes_exactly_the_ended_runs_it_may_with_all_they_held_and_leaves_the_rest(database, clock,
                                                                                             tui_agent, tmp_path):
    store = open_store(database)
    registry = load_registry(["ledger_agents", "counting_agents"])
    log = str(tmp_path / "sent.log")

    def ran(agent, request, key=None):
        run_id = operate.start(store, registry, agent_name=agent, request=request, key=key)[0]
        work(store, registry, run_id)
        return run_id

    clock.set(now() - 40 * DAY)                     # the old runs: made and ended 40 days ago
    old = {"succeeded": ran("hello", {"delay_s": 0}),
           "keyed, with an artifact": ran("ledger", {"key": "e-old", "log": log, "big": BIG}, key="rk-old"),
           "failed": ran("failing", {})}
    old["cancelled"] = operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0]
    operate.cancel_run(store, old["cancelled"])
    old["forked, both old"] = ran("hello", {"delay_s": 0})
    old["the fork, old"] = operate.fork(store, old["forked, both old"], 1)
    work(store, registry, old["the fork, old"])
    operate.schedule_add(store, registry, name="hourly", agent="hello", cron="0 * * * *", request={"delay_s": 0})
    old["fired by a schedule"] = operate.schedule_fire(store, registry, "hourly").started[0]
    work(store, registry, old["fired by a schedule"])
    kept = {"a parent a kept fork needs": ran("ledger", {"key": "e-parent", "log": log, "big": BIG}),
            "in doubt": operate.start(store, registry, agent_name="ledger", request={"key": "e-doubt", "log": log})[0],
            "parked": operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0],
            "waiting": operate.start(store, registry, agent_name="ledger",
                                     request={"key": "e-wait", "log": log, "ask": True})[0],
            "queued": operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0]}
    store = crashed_into_doubt(store, database, registry, clock, kept["in doubt"])
    operate.abandon(store, kept["in doubt"], "send")           # cancelled, its send in doubt for good
    operate.park(store, kept["parked"])
    work(store, registry, kept["waiting"])
    clock.set(time.time())                          # the recent runs
    kept["the kept fork"] = operate.fork(store, kept["a parent a kept fork needs"], 1)
    work(store, registry, kept["the kept fork"])
    kept["recent, keyed"] = ran("ledger", {"key": "e-new", "log": log}, key="rk-new")
    kept["recent, failed"] = ran("failing", {})
    assert {get_run(store, r)["status"] for r in old.values()} == {"succeeded", "failed", "cancelled"}
    assert belongings(store, old["keyed, with an artifact"])["artifact files" if on_sqlite(store) else
                                                             "artifact rows"], "a large result is an artifact"
    before = {run_id: belongings(store, run_id) for run_id in kept.values()}
    fire_key = get_run(store, old["fired by a schedule"])["run_key"]
    schedule_events = len(list(store.query("SELECT id FROM events WHERE schedule = 'hourly'")))

    done = json.loads(ok(tui_agent("prune", "--older-than", "30d", "--yes", "--json")).stdout)
    assert sorted(done["remove"]) == sorted(old.values())
    assert done["removed"] == {"succeeded": 5, "failed": 1, "cancelled": 1}
    assert done["kept"] == {"fork": 1, "doubt": 1}
    for role, run_id in old.items():
        assert not any(belongings(store, run_id).values()), f"{role}: {belongings(store, run_id)}"
    for role, run_id in kept.items():
        assert belongings(store, run_id) == before[run_id], role
    assert len(list(store.query("SELECT id FROM events WHERE schedule = 'hourly'"))) == schedule_events
    assert sorted(tuple(row) for row in store.conn.execute("SELECT kind, key, run_id FROM kept_keys")) == [
        ("effect", "e-old", old["keyed, with an artifact"]), ("run", "rk-old", old["keyed, with an artifact"]),
        ("run", fire_key, old["fired by a schedule"])]
    assert ok(tui_agent("doctor")).stdout.rstrip().endswith("healthy")
    ok(tui_agent("--agents", "ledger_agents", "replay", kept["the kept fork"]))
    again = json.loads(ok(tui_agent("prune", "--older-than", "30d", "--yes", "--json")).stdout)
    assert again["remove"] == [] and again["kept"] == {"fork": 1, "doubt": 1}
    store.close()


def test_a_removed_runs_effect_key_and_run_key_still_count(database, tui_agent, tmp_path):
    """After prune, a run with the removed run's effect key is worked: the effect is not done again (the log has the
    key once) and its events name the removed run; `start --key` with the removed run's key starts nothing."""
    log = tmp_path / "sent.log"
    request = json.dumps({"key": "report:2026-01-05:team", "log": str(log)})
    first = ok(tui_agent("--agents", "ledger_agents", "start", "ledger", "--key", "nightly", "--input", request))
    first_id = first.stdout.strip()
    ok(tui_agent("--agents", "ledger_agents", "worker", "--once"))
    ahead = {"TUI_AGENT_NOW": later(31 * DAY)}
    ok(tui_agent("prune", "--older-than", "30d", "--yes", env=ahead))
    assert log.read_text().split() == ["report:2026-01-05:team"]
    again = ok(tui_agent("--agents", "ledger_agents", "start", "ledger", "--key", "nightly", "--input", request))
    assert again.stdout.strip() == first_id
    assert again.stderr == (f"tui-agent: run key 'nightly' names run {first_id}, which prune removed; nothing new was "
                            "started (pass another key for a new run)\n")
    worked = ok(tui_agent("--agents", "ledger_agents", "run", "ledger", "--key", "nightly", "--input", request), 2)
    assert worked.stderr == again.stderr, "run has no run to work: the same line, exit 2"
    other = ok(tui_agent("--agents", "ledger_agents", "start", "ledger", "--input", request)).stdout.strip()
    ok(tui_agent("--agents", "ledger_agents", "worker", "--once"))
    store = open_store(database)
    assert get_run(store, other)["status"] == "succeeded"
    assert log.read_text().split() == ["report:2026-01-05:team"], "the effect was not done again"
    assert any(f"already confirmed by run {first_id}; not done again" in e["message"] for e in events_for(store, other))
    refused = ok(tui_agent("--agents", "ledger_agents", "start", "ledger", "--key", "nightly", "--input", "{}"), 2)
    assert f"run key 'nightly' named run {first_id} (removed by prune), which had another input" in refused.stderr
    store.close()


def test_a_patch_night_fire_after_its_runs_were_removed_starts_none(tui_agent, tmp_path):
    sample = sample_repo(tmp_path / "runs.data")
    issues = tmp_path / "queue"
    issues.mkdir()
    for name in ("a-first.md", "b-second.md"):
        (issues / name).write_text(f"# {name}\n")
    request = json.dumps({"repo": str(sample), "issues": str(issues)})
    assert len(json.loads(ok(tui_agent("run", "patch-night", "--input", request)).stdout.splitlines()[-1])["started"]) == 2
    ok(tui_agent("cancel", "--where", "agent:patch status:queued", "--yes"))
    ahead = {"TUI_AGENT_NOW": later(31 * DAY)}
    pruned = json.loads(ok(tui_agent("prune", "--older-than", "30d", "--yes", "--json", env=ahead)).stdout)
    assert pruned["removed"] == {"cancelled": 2, "succeeded": 1}
    assert json.loads(ok(tui_agent("ls", "--json")).stdout) == []
    ok(tui_agent("schedule", "add", "night", "--agent", "patch-night", "--cron", "0 1 * * *", "--input", request,
                 env=ahead))
    ok(tui_agent("schedule", "fire", "night", env=ahead))
    ok(tui_agent("worker", "--once", env=ahead))
    (fired,) = json.loads(ok(tui_agent("ls", "--json")).stdout)
    report = json.loads(ok(tui_agent("show", fired["id"], "--json")).stdout)
    assert (report["run"]["agent"], report["run"]["status"]) == ("patch-night", "succeeded")
    assert report["run"]["result"] == {"issues": 2, "started": []}


WORKER_WAIT_BOUND_S = 0.5   # docs/operating.md: the longest a worker's commit waits behind prune


def cloned(store, template: str, count: int) -> list[str]:
    """`count` copies of the run `template` (its row and every row of its in every table), made in one write: a
    database with many old runs, quickly."""
    def columns(table: str) -> list[str]:
        if on_sqlite(store):
            return [row[1] for row in store.conn.execute(f'PRAGMA table_info("{table}")')]
        return [name for (name,) in store.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND table_schema ="
            " current_schema() ORDER BY ordinal_position", (table,))]

    tables = {table: [c for c in columns(table) if c != "id"] for table in tables_with_runs(store)}
    runs = columns("runs")
    made = []
    with store.write() as conn:
        for n in range(count):
            run_id = f"r-c{n:07d}"
            picked = ", ".join({"id": "?", "artifact_dir": "?", "run_key": "NULL"}.get(c, c) for c in runs)
            conn.execute(f"INSERT INTO runs ({', '.join(runs)}) SELECT {picked} FROM runs WHERE id = ?",
                         (run_id, f"artifacts/{run_id}", template))
            for table, names in tables.items():
                picked = ", ".join("?" if c == "run_id" else c for c in names)
                conn.execute(f"INSERT INTO {table} ({', '.join(names)}) SELECT {picked} FROM {table} WHERE run_id = ?",
                             (run_id, template))
            made.append(run_id)
    return made


def test_a_worker_running_while_prune_removes_many_runs_waits_at_most_the_stated_bound(database, clock, tui_agent,
                                                                                       spawn, tmp_path):
    """Two thousand old runs of 60 entries each (about 150,000 rows); a worker process works a long run of short
    steps meanwhile. While prune removes them, no step of the worker's waits longer than WORKER_WAIT_BOUND_S
    between its function's return and the next step's start (its commit, behind prune's batches), and prune's own
    measure of its longest batch is below it too."""
    store = open_store(database)
    registry = load_registry(["counting_agents", "ledger_agents"])
    clock.set(now() - 40 * DAY)
    template = operate.start(store, registry, agent_name="counting",
                             request={"steps": 60, "log": str(tmp_path / "old.log")})[0]
    work(store, registry, template)
    clock.set(time.time())
    old = [template, *cloned(store, template, 2000)]
    steady = operate.start(store, registry, agent_name="steady", request={"steps": 100_000, "delay_s": 0.002})[0]
    worker = spawn("--agents", "ledger_agents", "worker", "--name", "w-steady", label="worker")
    until("the worker to be at work", lambda: len(list(store.query(
        "SELECT position FROM journal WHERE run_id = ?", (steady,)))) >= 50)
    started = time.time()
    done = json.loads(ok(tui_agent("prune", "--older-than", "30d", "--yes", "--json", timeout=300)).stdout)
    ended = time.time()
    operate.cancel_run(store, steady)
    worker.terminate()
    worker.wait(timeout=60)
    assert done["removed"] == {"succeeded": len(old)}
    entries = list(store.query("SELECT position, started_at, duration_s FROM journal WHERE run_id = ? ORDER BY"
                               " position", (steady,)))
    ends = [e["started_at"] + e["duration_s"] for e in entries]
    # each wait: from a step function's return to the next step's start (its commit), and to prune's end for the last
    waits = [(later_start if later_start is not None else ended) - end
             for end, later_start in zip(ends, [e["started_at"] for e in entries[1:]] + [None])
             if started <= end <= ended]
    print(f"prune {ended - started:.1f}s, {done['batches']} batches, longest {done['longest_hold_s'] * 1000:.0f} ms;"
          f" {len(waits)} steps meanwhile, longest wait {max(waits) * 1000:.0f} ms")
    assert len(waits) > 100, "the worker went on while prune ran"
    assert max(waits) < WORKER_WAIT_BOUND_S
    assert done["longest_hold_s"] < WORKER_WAIT_BOUND_S
    store.close()


def cancelled_runs(path: Path, count: int, size: int) -> list[str]:
    """`count` cancelled runs whose requests hold `size` bytes each: pages for prune to free."""
    store = open_store(path)
    registry = load_registry()
    made = [operate.start(store, registry, agent_name="hello",
                          request={"name": f"{n}" + "x" * size})[0] for n in range(count)]
    for run_id in made:
        operate.cancel_run(store, run_id)
    store.close()
    return made


def pragma(path: Path, name: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.sqlite_only
def test_prune_gives_the_space_back_and_doctor_names_the_sizes(db_path, tui_agent):
    """A new file has incremental auto-vacuum: the pages prune frees go back to the file system, none left free;
    doctor names the largest tables and runs, before and after."""
    made = cancelled_runs(db_path, 60, 20_000)
    ok(tui_agent("worker", "--once"))   # nothing to work: the WAL checkpointed into the file
    before = db_path.stat().st_size
    assert pragma(db_path, "auto_vacuum") == 2
    report = {c["name"]: c for c in json.loads(ok(tui_agent("doctor", "--json")).stdout)["checks"]}
    assert "largest tables (with their indexes): runs " in report["size"]["detail"]
    assert report["largest runs"]["detail"] == "no run has a journal entry yet"
    done = ok(tui_agent("prune", "--older-than", "30d", "--yes", env={"TUI_AGENT_NOW": later(31 * DAY)}))
    assert done.stdout.startswith("removed 60 runs (60 cancelled)")
    assert "back to the file system" in done.stdout
    assert pragma(db_path, "freelist_count") == 0
    assert db_path.stat().st_size < before / 4, (before, db_path.stat().st_size)
    store = open_store(db_path)
    assert not any(store.conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() for run_id in made)
    store.close()
    after = {c["name"]: c for c in json.loads(ok(tui_agent("doctor", "--json")).stdout)["checks"]}
    assert ", 0 B of it free pages;" in after["size"]["detail"]


@pytest.mark.sqlite_only
def test_an_older_file_keeps_its_free_pages_until_db_vacuum_converts_it_after_asking(db_path, tui_agent):
    cancelled_runs(db_path, 60, 20_000)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum=NONE")   # as an older tui-agent made every file
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert pragma(db_path, "auto_vacuum") == 0
    done = ok(tui_agent("prune", "--older-than", "30d", "--yes", env={"TUI_AGENT_NOW": later(31 * DAY)}))
    assert "free inside the file, which was made without incremental auto-vacuum" in done.stdout
    assert "tui-agent db vacuum gives them back" in done.stdout
    free = pragma(db_path, "freelist_count")
    assert free > 200
    ok(tui_agent("worker", "--once"))
    size = db_path.stat().st_size
    doctor = {c["name"]: c for c in json.loads(ok(tui_agent("doctor", "--json")).stdout)["checks"]}
    assert "made without incremental auto-vacuum: `tui-agent db vacuum` gives them back" in doctor["size"]["detail"]

    refused = ok(tui_agent("db", "vacuum"), 2)   # no terminal, no --yes: no question, nothing done
    assert refused.stderr == ("tui-agent: db vacuum rewrites the whole file holding the write lock; pass --yes to do "
                              "it without a question\n")
    assert (pragma(db_path, "freelist_count"), pragma(db_path, "auto_vacuum")) == (free, 0)

    converted = ok(tui_agent("db", "vacuum", "--yes"))
    assert "it gives the pages prune frees back by itself from now on" in converted.stdout
    assert (pragma(db_path, "freelist_count"), pragma(db_path, "auto_vacuum")) == (0, 2)
    assert db_path.stat().st_size < size / 4
    assert ok(tui_agent("doctor")).stdout.rstrip().endswith("healthy")


@pytest.mark.parametrize("args, line", [
    (["--older-than", "30d", "--status", "succeeded,running"],
     "tui-agent: --status 'succeeded,running': running is not an ended status; prune removes only ended runs: name "
     "one or more of succeeded, cancelled, failed, comma-separated\n"),
    (["--older-than", "a month"],
     "tui-agent: --older-than 'a month' is not a span of time; give a number and a unit, as in 30m, 2h, 3d or 2w\n"),
    (["--older-than", "30d"],
     "tui-agent: prune would remove 3 runs; pass --yes to remove them without a question, or --dry-run to see what it "
     "would remove\n"),
])
def test_a_wrong_prune_or_one_off_a_terminal_without_yes_is_one_line_and_removes_nothing(database, tui_agent, args,
                                                                                         line):
    store = open_store(database)
    registry = load_registry()
    made = [operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0] for _ in range(3)]
    for run_id in made:
        operate.cancel_run(store, run_id)
    ahead = {"TUI_AGENT_NOW": later(31 * DAY)}
    refused = ok(tui_agent("prune", *args, env=ahead), 2)
    assert refused.stderr == line
    dry = json.loads(ok(tui_agent("prune", "--older-than", "30d", "--dry-run", "--json", env=ahead)).stdout)
    assert sorted(dry["remove"]) == sorted(made)
    assert sorted(r["id"] for r in store.query("SELECT id FROM runs")) == sorted(made)
    assert list(store.query("SELECT * FROM kept_keys")) == []
    store.close()


def test_a_run_an_interrupted_prune_began_is_refused_to_every_action_and_the_next_prune_finishes_it(database,
                                                                                                     tui_agent):
    """prune marks a run before its rows go; killed meanwhile, it leaves the mark and part of the rows: no action
    takes the run (it would act on half a run), and the next prune removes it, however recent its end."""
    store = open_store(database)
    registry = load_registry()
    run_id = operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0]
    work(store, registry, run_id)
    with store.write() as conn:   # as prune leaves it when killed between two batches
        conn.execute("UPDATE runs SET pruned_at = ? WHERE id = ?", (now(), run_id))
        conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
    for args in (["resume", run_id, "--restart"], ["fork", run_id, "--from-step", "1"]):
        refused = ok(tui_agent(*args), 2)
        assert refused.stderr.startswith(f"tui-agent: {run_id} is succeeded")
        assert refused.stderr.endswith("; prune is removing it; nothing changed\n")
    done = json.loads(ok(tui_agent("prune", "--older-than", "30d", "--yes", "--json")).stdout)
    assert done["removed"] == {"succeeded": 1}
    assert not any(belongings(store, run_id).values())
    store.close()


@pytest.mark.sqlite_only
def test_db_vacuum_without_room_for_the_rewrite_is_one_line_exit_4_and_changes_nothing(db_path, invoke, monkeypatch):
    cancelled_runs(db_path, 3, 100)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum=NONE")
    conn.execute("VACUUM")
    conn.close()
    before = db_path.read_bytes()
    monkeypatch.setattr(prune_module.shutil, "disk_usage", lambda where: shutil._ntuple_diskusage(
        total=2**30, used=2**30 - 1024, free=1024))   # 1 KiB free on every disk
    done = invoke("--db", str(db_path), "db", "vacuum", "--yes")
    assert done.exit_code == 4, done.output
    assert done.stderr.startswith("tui-agent: the rewrite needs ")
    assert done.stderr.endswith("then run tui-agent db vacuum again; nothing was changed\n")
    assert db_path.read_bytes() == before
    assert pragma(db_path, "auto_vacuum") == 0



def test_a_schedule_of_the_prune_agent_prunes_as_the_command_does(database, clock, tui_agent):
    """`schedule add --agent prune` (operating.md's nightly prune): its fire, worked, removes the old ended runs but
    the newest of their agent, keeps their keys, and is itself a run that ends succeeded with what it did."""
    store = open_store(database)
    registry = load_registry()
    clock.set(now() - 40 * DAY)
    old = [operate.start(store, registry, agent_name="hello", request={"delay_s": 0}, key=f"k{n}")[0] for n in range(3)]
    for run_id in old:
        work(store, registry, run_id)
    clock.set(time.time())
    recent = operate.start(store, registry, agent_name="hello", request={"delay_s": 0})[0]
    work(store, registry, recent)
    newest_old = max(old, key=lambda r: (get_run(store, r)["finished_at"], r))   # the order --keep-last keeps
    ok(tui_agent("schedule", "add", "tidy", "--agent", "prune", "--cron", "30 3 * * *", "--input",
                 '{"older_than": "30d", "keep_last": 2}'))
    ok(tui_agent("schedule", "fire", "tidy"))
    ok(tui_agent("worker", "--once"))
    runs = {run["id"]: run for run in json.loads(ok(tui_agent("ls", "--json")).stdout)}
    (tidy,) = [run_id for run_id, run in runs.items() if run["agent"] == "prune"]
    assert runs[tidy]["status"] == "succeeded"
    assert set(runs) == {tidy, recent, newest_old}
    report = json.loads(ok(tui_agent("show", tidy, "--json")).stdout)
    assert report["run"]["result"] == {"removed": {"succeeded": 2}, "kept": {"newest": 1}, "kept_keys": 2,
                                       "artifact_bytes": 0}
    assert len(list(store.query("SELECT key FROM kept_keys WHERE kind = 'run'"))) == 2
    store.close()
