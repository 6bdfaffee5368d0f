import hashlib
import os
import sqlite3
import stat

import pytest
from helpers import at_once

from tui_agent.store import data_dir_for, open_store, schema
from tui_agent.store import db as store_db


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_new_database_is_private_wal_and_versioned(db_path):
    s = open_store(db_path)
    try:
        assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
            schema.SCHEMA_VERSION)
        assert s.data_dir == db_path.parent / "runs.data"
        assert stat.S_IMODE(s.data_dir.stat().st_mode) == 0o700
    finally:
        s.close()
    assert not [p for p in db_path.parent.iterdir() if p.name.endswith(".tmp")], "the temporary file was left"


def test_normal_durability_is_opt_in(db_path):
    s = open_store(db_path, "normal")
    try:
        assert s.conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    finally:
        s.close()


def test_data_folder_sits_beside_the_database(tmp_path):
    assert data_dir_for(tmp_path / "runs.db") == tmp_path / "runs.data"
    assert data_dir_for(tmp_path / "mydb") == tmp_path / "mydb.data"


def test_default_path_is_under_the_user_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("TUI_AGENT_DB")
    path = store_db.default_path()
    assert path.name == "runs.db"
    assert str(path).startswith(str(tmp_path / "xdg"))


@pytest.mark.parametrize("content, words", [
    (b"", "empty file"),
    (b"name,amount\nada,3\n" * 20, "not a SQLite database"),
])
def test_a_file_that_is_not_ours_exits_2_unchanged(tui_agent, db_path, content, words):
    db_path.write_bytes(content)
    before = _digest(db_path)
    done = tui_agent("--db", str(db_path), "ls")
    assert done.returncode == 2
    assert words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
    assert _digest(db_path) == before
    assert [p.name for p in db_path.parent.iterdir()] == [db_path.name], "no -wal, -shm or data folder may appear"


def test_another_programs_sqlite_file_exits_2_unchanged(tui_agent, db_path):
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before = _digest(db_path)
    done = tui_agent("--db", str(db_path), "ls")
    assert done.returncode == 2
    assert "not tui-agent's" in done.stderr
    assert _digest(db_path) == before
    mode = sqlite3.connect(db_path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "delete", "validation must not switch the file to WAL"


def test_a_newer_schema_exits_2_unchanged(tui_agent, db_path):
    open_store(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(schema.SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    before = _digest(db_path)
    done = tui_agent("--db", str(db_path), "ls")
    assert done.returncode == 2
    assert "newer than this tui-agent" in done.stderr
    assert "upgrade" in done.stderr
    assert _digest(db_path) == before


def test_an_older_schema_is_migrated_forward(db_path, monkeypatch):
    open_store(db_path).close()

    def v2(db):
        db["notes"].create({"id": int, "text": str}, pk="id")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, v2])
    monkeypatch.setattr(schema, "SCHEMA_VERSION", len(schema.MIGRATIONS))
    monkeypatch.setattr(store_db, "MIGRATIONS", schema.MIGRATIONS)
    monkeypatch.setattr(store_db, "SCHEMA_VERSION", schema.SCHEMA_VERSION)
    s = open_store(db_path)
    try:
        assert s.conn.execute("SELECT name FROM sqlite_master WHERE name = 'notes'").fetchone() == ("notes",)
        assert s.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
            schema.SCHEMA_VERSION)
    finally:
        s.close()


def test_a_failed_migration_leaves_the_old_schema(db_path, monkeypatch):
    open_store(db_path).close()

    def broken(db):
        db["notes"].create({"id": int}, pk="id")
        raise RuntimeError("migration bug")

    migrations = [*schema.MIGRATIONS, broken]
    monkeypatch.setattr(store_db, "MIGRATIONS", migrations)
    monkeypatch.setattr(store_db, "SCHEMA_VERSION", len(migrations))
    with pytest.raises(RuntimeError):
        open_store(db_path)
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
        schema.SCHEMA_VERSION)
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name='notes'").fetchone()[0] == 0


def test_many_openers_of_a_fresh_path_agree_on_one_file(db_path):
    def opener() -> int:
        s = open_store(db_path)
        inode = os.stat(db_path).st_ino
        s.conn.execute("SELECT count(*) FROM runs").fetchone()
        s.close()
        return inode

    inodes = at_once(opener, 8)
    assert len(set(inodes)) == 1
    assert not [p for p in db_path.parent.iterdir() if p.name.endswith(".tmp")]

