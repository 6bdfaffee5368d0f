"""`tui-agent doctor`: read-only checks that say what is wrong and what to do; exit 0 when healthy, 1 otherwise;
never a traceback, never a write (a damaged file's bytes are compared before and after), never a new file."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from disks import damage, quick_check_fails, sha256

from tui_agent import operate
from tui_agent.runtime.registry import load_registry
from tui_agent.store import doctor, open_store

CHECKS = ["database", "tables", "integrity", "size", "largest runs", "wal", "permissions", "data folder", "disk"]


def database_with_runs(path: Path, count: int = 300) -> None:
    """Enough runs that the runs b-tree spans several pages, all checkpointed into the main file and closed."""
    store = open_store(path)
    registry = load_registry()
    for i in range(count):
        operate.start(store, registry, agent_name="hello", request={"name": f"n{i}", "delay_s": 0})
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def report(done) -> dict:
    found = json.loads(done.stdout)
    return found | {"by_name": {check["name"]: check for check in found["checks"]}}


def test_a_healthy_database_exits_0_and_every_check_is_ok(invoke, db_path):
    database_with_runs(db_path, count=3)
    done = invoke("doctor", "--json")
    assert done.exit_code == 0, done.output
    found = report(done)
    assert found["healthy"] is True
    assert found["path"] == str(db_path)
    assert [c["name"] for c in found["checks"]] == CHECKS
    assert all(c["ok"] and c["advice"] is None and c["detail"] for c in found["checks"]), found["checks"]
    assert "quick_check" in found["by_name"]["integrity"]["detail"]

    text = invoke("doctor", "--full")
    assert text.exit_code == 0
    assert text.output.strip().endswith("healthy")
    assert "integrity_check found nothing wrong" in text.output


@pytest.mark.parametrize("table", ["runs", "journal_rows", None], ids=["runs", "journal", "schema page"])
def test_a_damaged_page_is_named_with_recover_advice_and_the_file_is_not_changed(tui_agent, db_path, table):
    database_with_runs(db_path, count=100 if table == "journal_rows" else 300)
    if table == "journal_rows":  # hello journals three steps per run, folded into journal_rows as each run ends
        assert tui_agent("worker", "--once", env={"TUI_AGENT_DURABILITY": "normal"}).returncode == 0
        conn = sqlite3.connect(db_path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    damage(db_path, table)
    assert quick_check_fails(db_path)
    before = sha256(db_path)

    for args in (["doctor"], ["doctor", "--full"], ["doctor", "--json"]):
        done = tui_agent(*args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr, done.stderr
        assert done.stderr == "", done.stderr
    found = report(done)
    assert found["healthy"] is False
    damaged = [c for c in found["checks"] if not c["ok"]]
    assert damaged, damaged
    assert all("damaged" in c["detail"] for c in damaged), damaged
    advice = damaged[0]["advice"]
    assert f"sqlite3 {db_path} .recover | sqlite3 " in advice, advice
    assert "will not write" in advice, advice
    assert sha256(db_path) == before


def test_the_recovery_steps_doctor_prints_work_when_followed_as_written(tui_agent, db_path, tmp_path):
    """A person pastes each command of the advice, in its order, into a shell where tui-agent is on PATH. Step 2's
    .recover needs a shell built with sqlite_dbpage; where it says 'SQL logic error' (Debian's, say), the advice's
    .dump takes its place. Afterwards the database in place is healthy, holds the runs whose pages were intact and
    takes new runs; the damaged file is kept as it was."""
    database_with_runs(db_path, count=300)
    damage(db_path, "events")
    assert quick_check_fails(db_path)
    before = sha256(db_path)
    advice = report(tui_agent("doctor", "--json"))["by_name"]["integrity"]["advice"]
    recover, dump_instead, check, put_in_place = re.findall(r"`([^`]+)`", advice)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])

    def shell(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(command, shell=True, capture_output=True, text=True, cwd=tmp_path,
                              env={**os.environ, "PATH": path}, timeout=120)

    done = shell(recover)
    if "SQL logic error" in done.stderr:
        done = shell(dump_instead)
    assert done.returncode == 0, done.stderr
    checked = shell(check)
    assert checked.returncode == 0 and checked.stdout.strip().endswith("healthy"), checked.stdout + checked.stderr
    assert shell(put_in_place).returncode == 0
    assert not Path(f"{db_path}-wal").exists()   # nothing to move aside
    assert sha256(Path(f"{db_path}.damaged")) == before

    assert len(json.loads(tui_agent("ls", "--json").stdout)) == 300
    assert tui_agent("run", "hello").returncode == 0
    assert tui_agent("doctor").returncode == 0


def test_a_missing_database_is_said_and_not_created(invoke, tmp_path):
    path = tmp_path / "nowhere" / "runs.db"
    done = invoke("--db", str(path), "doctor")
    assert done.exit_code == 1
    assert f"there is no database at {path}" in done.output
    assert not path.parent.exists()
    found = report(invoke("--db", str(path), "doctor", "--json"))
    assert found["healthy"] is False
    assert [c["name"] for c in found["checks"]] == ["database"]
    assert "creates one" in found["checks"][0]["advice"]
    assert not path.parent.exists()


def test_wrong_permissions_are_named_with_the_chmod_that_fixes_them(invoke, db_path):
    database_with_runs(db_path, count=1)
    db_path.chmod(0o644)
    (db_path.with_name("runs.data")).chmod(0o755)
    found = report(invoke("doctor", "--json"))
    assert found["healthy"] is False
    permissions, folder = found["by_name"]["permissions"], found["by_name"]["data folder"]
    assert not permissions["ok"]
    assert "0644" in permissions["detail"]
    assert f"chmod 600 {db_path}" in permissions["advice"]
    assert not folder["ok"]
    assert "0755" in folder["detail"]
    assert "chmod 700" in folder["advice"]
    assert found["by_name"]["integrity"]["ok"]
    assert invoke("doctor").exit_code == 1


@pytest.mark.parametrize("content, words", [(b"hello, I am a text file\n" * 100, "not a SQLite database"),
                                            (b"", "an empty file")], ids=["text", "empty"])
def test_a_file_that_is_not_sqlite_is_said_and_left_alone(invoke, db_path, content, words):
    db_path.write_bytes(content)
    done = invoke("doctor", "--json")
    assert done.exit_code == 1
    [check] = json.loads(done.stdout)["checks"]
    assert check["name"] == "database"
    assert words in check["detail"]
    assert not check["ok"]
    assert db_path.read_bytes() == content
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["runs.db"]  # no -wal, -shm or data folder


def test_another_programs_sqlite_file_is_not_tui_agents(invoke, db_path):
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    found = report(invoke("doctor", "--json"))
    assert found["healthy"] is False
    assert "not tui-agent's" in found["by_name"]["database"]["detail"]
    assert "permissions" not in found["by_name"]  # its folder and modes are not ours to judge


def test_low_disk_space_and_a_large_wal_say_what_to_do(db_path, monkeypatch):
    store = open_store(db_path)  # an open writer keeps its WAL
    try:
        operate.start(store, load_registry(), agent_name="hello", request={})
        monkeypatch.setattr(doctor, "WAL_LARGE", 1)
        monkeypatch.setattr(doctor, "DISK_LOW", 2**62)
        found = doctor.diagnose(db_path)
    finally:
        store.close()
    checks = {c.name: c for c in found.checks}
    assert not found.healthy
    assert checks["integrity"].ok
    assert not checks["wal"].ok
    assert "snapshot" in checks["wal"].detail
    assert "close" in checks["wal"].advice
    assert not checks["disk"].ok
    assert "free space" in checks["disk"].advice


def without_cache_columns(path: Path) -> None:
    """The checkpoints table as a development build's version 5 made it, before its cache token columns: the
    meta table still says the current version, and the views still name the columns (seen on a developer's
    machine: `tui-agent ls` then died with a traceback, and doctor said healthy)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA legacy_alter_table = ON")   # the views keep naming `checkpoints`
    conn.execute("ALTER TABLE checkpoints RENAME TO old_checkpoints")
    kept = [row[1] for row in conn.execute("PRAGMA table_info(old_checkpoints)") if "cache" not in row[1]]
    conn.execute(f"CREATE TABLE checkpoints AS SELECT {', '.join(kept)} FROM old_checkpoints")
    conn.execute("DROP TABLE old_checkpoints")
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_tables_that_differ_from_their_schema_version_are_one_line_and_never_written(tui_agent, db_path):
    database_with_runs(db_path, count=3)
    without_cache_columns(db_path)
    before = sha256(db_path)
    with closing(sqlite3.connect(db_path)) as conn:
        run_id = conn.execute("SELECT id FROM runs LIMIT 1").fetchone()[0]
    for args in (["ls"], ["show", "--json", run_id], ["worker", "--once"]):   # the worker before it claims
        done = tui_agent(*args)
        assert done.returncode == 4, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        line = done.stderr.strip()
        assert line.count("\n") == 0 and line.startswith(f"tui-agent: {db_path} is not as its schema version"), line
        assert "checkpoints lacks used_cache_read_tokens, used_cache_write_tokens" in line, line
    done = tui_agent("doctor", "--json")
    assert done.returncode == 1, done.stderr
    tables = report(done)["by_name"]["tables"]
    assert not tables["ok"] and "checkpoints lacks used_cache_read_tokens" in tables["detail"], tables
    assert "move it aside" in tables["advice"]
    assert sha256(db_path) == before


def test_a_missing_column_in_a_database_that_matches_its_version_is_not_blamed_on_the_file(db_path):
    """A query of ours that names a column no version makes is a bug: it must surface as one, not as damage."""
    database_with_runs(db_path, count=1)
    store = open_store(db_path)
    try:
        with pytest.raises(sqlite3.OperationalError) as raised:
            store.conn.execute("SELECT no_such_column FROM runs")
        assert store.stopped(raised.value) is None
    finally:
        store.close()
