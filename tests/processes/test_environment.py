"""The environment stops a command (issue 12): another program holds the write lock past the busy
timeout, the disk is full, a page is damaged, the file is read-only. Each is one line and exit 4, never a
traceback and never a failed run; what was committed is all there afterwards. Real processes throughout."""

import json
import signal
import sqlite3
import time
from pathlib import Path

from disks import fill, limited, one_line, read_only, sha256, writable
from helpers import dump, later, ran_steps, show_json, until

from tui_agent.runtime.clock import iso, parse_instant

AGENTS = ["--agents", "counting_agents"]
HOLD_S = 20.0   # longer than the store's 15 s busy timeout


# -- 1. another program holds the write lock for 20 s -------------------------------------------


def test_a_lock_held_past_the_busy_timeout_fails_no_run_and_kills_no_heartbeat(tui_agent, spawn, tmp_path, db_path):
    """Two long-running workers; a run whose steps (3 s) outlast the lease (2 s), so only the heartbeat keeps
    it; another connection takes the write lock for 20 s just before a step ends. The step's commit, the
    heartbeats and the other worker's claim all wait; nothing fails, nothing livelocks, and the claim that
    waited for the lock gets a whole lease from when it got the lock."""
    log = tmp_path / "calls.log"
    run_id = tui_agent(*AGENTS, "start", "counting", "--input",
                       json.dumps({"log": str(log), "steps": 2, "delay_s": 3})).stdout.strip()
    workers = [spawn(*AGENTS, "worker", "--lease", "2", "--name", name, label=name) for name in ("w-a", "w-b")]
    until("the first step to start", lambda: ran_steps(log)["s0"] == 1)
    time.sleep(1.0)
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    time.sleep(HOLD_S)
    held_until = time.time()
    holder.execute("COMMIT")
    holder.close()

    until("the run to end", lambda: show_json(tui_agent, run_id, *AGENTS)["run"]["status"] not in ("queued", "running"),
          deadline_s=40)
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed"), report["events"]
    assert [e["name"] for e in report["journal"]] == ["s0", "s1"]
    kinds = [e["kind"] for e in report["events"]]
    assert "failed" not in kinds, kinds
    assert kinds.count("takeover") <= 1, kinds
    assert ran_steps(log)["s1"] == 1
    assert ran_steps(log)["s0"] <= 2
    for event in report["events"]:  # every claim after the hold took its time once it held the lock
        if event["kind"] in ("claimed", "takeover") and event["at"] > iso(held_until - HOLD_S):
            assert event["at"] >= iso(held_until - 0.05), event

    # both heartbeats outlived the stall and both workers still work
    later = tui_agent(*AGENTS, "start", "counting", "--input", json.dumps({"log": str(log), "steps": 1})).stdout.strip()
    until("a run started after the stall to succeed", lambda: show_json(tui_agent, later, *AGENTS)["run"]["status"] == "succeeded")
    beats = {w["name"]: _epoch(w["heartbeat_at"]) for w in json.loads(tui_agent("workers", "--json").stdout)}
    assert all(beats[name] > held_until for name in ("w-a", "w-b")), beats
    assert all(w.poll() is None for w in workers)
    for w in workers:
        w.send_signal(signal.SIGTERM)
        assert w.wait(timeout=20) == 0


def _epoch(value) -> float:
    return parse_instant(value) if isinstance(value, str) else float(value)


def test_a_run_taken_over_again_and_again_without_progress_is_parked_not_looped(tui_agent, tmp_path):
    """Each worker dies inside the first step (as a step longer than the lease with no heartbeat would lose
    it): after a few takeovers with no new journal entry the run is parked (takeover_loop), not claimed
    forever; a longer lease and a resume finish it."""
    log = tmp_path / "calls.log"
    run_id = tui_agent(*AGENTS, "start", "counting", "--input", json.dumps({"log": str(log), "steps": 2})).stdout.strip()
    for _ in range(8):
        done = tui_agent(*AGENTS, "worker", "--once", "--lease", "0.3", env={"TUI_AGENT_CRASH_AT": "after-step"})
        if show_json(tui_agent, run_id, *AGENTS)["run"]["status"] == "parked":
            break
        assert done.returncode == -signal.SIGKILL, done.stderr
        time.sleep(0.35)  # the dead worker's lease runs out
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "takeover_loop"), report["events"]
    assert "--lease" in report["events"][-1]["message"]
    assert report["journal"] == []
    assert tui_agent(*AGENTS, "resume", run_id).returncode == 0
    assert tui_agent(*AGENTS, "worker", "--once").returncode == 0
    assert show_json(tui_agent, run_id, *AGENTS)["run"]["status"] == "succeeded"


# -- 4. storage faults ---------------------------------------------------------------------------


def test_a_full_disk_is_one_line_and_exit_4_and_the_run_resumes_once_there_is_room(tui_agent, small_disk):
    folder, mounted = small_disk
    db = folder / "runs.db"
    assert tui_agent("--db", str(db), "run", "hello").returncode == 0
    run_id = tui_agent("--db", str(db), *AGENTS, "start", "counting", "--input",
                       json.dumps({"log": str(folder / "calls.log"), "steps": 90})).stdout.strip()
    before = dump(db)
    if mounted:
        filler = fill(folder, leave=48 * 1024)
        env = {}
    else:  # a file-size limit: the WAL cannot grow past it
        filler = None
        env = {"TUI_AGENT_TEST_FSIZE": str(db.stat().st_size + 48 * 1024)}
    done = limited(tui_agent, env, "--db", str(db), *AGENTS, "worker", "--once")
    line = one_line(done)
    assert str(db) in line
    assert "disk is full" in line
    assert "nothing that was committed was lost" in line
    report = show_json(tui_agent, run_id, "--db", str(db), *AGENTS)
    assert report["run"]["status"] == "running"  # not failed: resumable
    assert report["run"]["worker"]
    if mounted:
        _doctor_finds(tui_agent, db, "disk")
    kept = dump(db)
    assert [row for row in before if "INSERT INTO \"runs\"" in row and run_id not in row] == \
        [row for row in kept if "INSERT INTO \"runs\"" in row and run_id not in row]
    assert set(before) - set(kept) <= {row for row in before if run_id in row or "workers" in row}
    if filler:
        filler.unlink()
    done = tui_agent("--db", str(db), *AGENTS, "worker", "--once", env={"TUI_AGENT_NOW": later(120)})
    assert done.returncode == 0, done.stderr
    report = show_json(tui_agent, run_id, "--db", str(db), *AGENTS)
    assert report["run"]["status"] == "succeeded", report["events"][-3:]
    assert len(report["journal"]) == 90


def _damage_runs_table(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    conn.close()
    with open(db, "r+b") as f:   # no connection of ours is open: closing this descriptor drops no lock
        f.seek((root - 1) * page_size)   # the b-tree page header: no read or write of the table gets past it
        f.write(b"\xff" * 64)


def test_a_damaged_page_is_one_line_exit_4_and_never_written_to(tui_agent, db_path):
    for _ in range(3):
        assert tui_agent("run", "hello").returncode == 0
    _damage_runs_table(db_path)
    before = sha256(db_path)
    for args in (["ls"], ["start", "hello"], ["worker", "--once"]):
        line = one_line(tui_agent(*args))
        assert str(db_path) in line, line
        assert "damaged" in line, line
        assert "tui-agent doctor" in line, line
    assert sha256(db_path) == before
    _doctor_finds(tui_agent, db_path, "integrity")
    assert sha256(db_path) == before


def _doctor_finds(tui_agent, db: Path, check: str) -> None:
    """`doctor` names the problem (exit 1) with advice, and leaves the file as it was."""
    done = tui_agent("--db", str(db), "doctor", "--json")
    assert done.returncode == 1, (done.stdout, done.stderr)
    failed = {c["name"]: c for c in json.loads(done.stdout)["checks"] if not c["ok"]}
    assert check in failed, failed
    assert failed[check]["advice"], failed


def test_a_read_only_file_is_one_line_exit_4_untouched_and_reads_still_work(tui_agent, db_path):
    ran = tui_agent("run", "hello")
    run_id = ran.stdout.split()[0]
    parked = tui_agent("start", "hello").stdout.strip()
    assert tui_agent("park", parked).returncode == 0
    before = dump(db_path)
    read_only(db_path)
    try:
        for args in (["start", "hello"], ["worker", "--once"], ["resume", parked], ["run", "hello"]):
            line = one_line(tui_agent(*args))
            assert str(db_path) in line, line
            assert "read-only" in line, line
        assert tui_agent("ls").returncode == 0
        assert json.loads(tui_agent("show", run_id, "--json").stdout)["run"]["status"] == "succeeded"
        _doctor_finds(tui_agent, db_path, "permissions")
    finally:
        writable(db_path)
    assert dump(db_path) == before


def test_a_new_database_in_a_read_only_folder_is_one_line_exit_4(tui_agent, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    read_only(folder)
    try:
        line = one_line(tui_agent("--db", str(folder / "runs.db"), "run", "hello"))
        assert "read-only" in line
        assert str(folder / "runs.db") in line
    finally:
        writable(folder)
    assert list(folder.iterdir()) == []
