"""An upgrade that an older tui-agent still running would not survive (schema.STOPS_OLDER: version 11 made the
journal a view, into which an older worker's step cannot write, so its run would end failed) waits until no worker
may still be running: the newer command that would migrate says so in one line, exit 4, and changes nothing; once
the worker is gone, the same command migrates."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import time

import psycopg
from helpers import database_at_version
from old_schemas import pg_v9

from tui_agent.store.host import process_start, this_host
from tui_agent.store.schema import SCHEMA_VERSION, STOPS_OLDER
from tui_agent.store.schema_postgres import MIGRATIONS, statements
from tui_agent.store.workers import REMOTE_SILENT_LEASES

BEFORE = min(STOPS_OLDER) - 1
WORKER = ("INSERT INTO workers (name, pid, host, concurrency, lease_s, started_at, heartbeat_at, pid_started)"
          " VALUES (?, ?, ?, 1, 30, 0, ?, ?)")


def _refused(done: subprocess.CompletedProcess, where: object, worker: str) -> None:
    """`worker`: how the line names the worker, as a regular expression (the seconds left vary)."""
    assert done.returncode == 4, (done.returncode, done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert re.fullmatch(
        re.escape(f"tui-agent: {where} must be upgraded to schema version {min(STOPS_OLDER)} for this tui-agent, and "
                  "worker ") + worker + re.escape(" of an older tui-agent may still be running on it (its runs would "
                                                  "fail); stop it (Ctrl-C where it runs) and run the command again; "
                                                  "nothing was changed"), done.stderr.strip()), done.stderr


def _by_heartbeat(name: str, pid: int, host: str) -> str:
    return (rf"{name} \(pid {pid} on {host}; if it has stopped, it counts as gone once its heartbeat has been silent "
            rf"for {REMOTE_SILENT_LEASES} leases, in \d+ s\)")


def _version(conn) -> str:
    return conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]


def test_a_worker_process_still_there_holds_the_upgrade_off_until_it_is_gone(tui_agent, db_path):
    database_at_version(db_path, BEFORE)
    old = subprocess.Popen(["sleep", "60"])   # an older worker's process on this host: its pid and start time
    try:
        with sqlite3.connect(db_path) as conn:   # a heartbeat long past: on its own host the process decides
            conn.execute(WORKER, ("w-old", old.pid, this_host(), 0.0, process_start(old.pid)))
        _refused(tui_agent("ls"), db_path, rf"w-old \(pid {old.pid} on this host\)")
        with sqlite3.connect(db_path) as conn:
            assert _version(conn) == str(BEFORE)
            assert conn.execute("SELECT type FROM sqlite_master WHERE name = 'journal'").fetchone() == ("table",)
    finally:
        old.kill()
        old.wait()
    # on another host only its heartbeat can tell: silent for fewer than REMOTE_SILENT_LEASES leases it may be
    # running (paused, say), for longer not
    with sqlite3.connect(db_path) as conn:
        conn.execute(WORKER, ("w-away", 1, "another-host", time.time(), None))
    _refused(tui_agent("ls"), db_path, _by_heartbeat("w-away", 1, "another-host"))
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE workers SET heartbeat_at = ? WHERE name = 'w-away'", (time.time() - 30 * 2.5,))
    _refused(tui_agent("ls"), db_path, _by_heartbeat("w-away", 1, "another-host"))
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE workers SET heartbeat_at = ? WHERE name = 'w-away'",
                     (time.time() - 30 * REMOTE_SILENT_LEASES - 1,))
    assert tui_agent("ls").returncode == 0
    with sqlite3.connect(db_path) as conn:
        assert _version(conn) == str(SCHEMA_VERSION)
        assert conn.execute("SELECT type FROM sqlite_master WHERE name = 'journal'").fetchone() == ("view",)


def test_an_old_worker_row_without_a_start_time_whose_pid_lives_on_holds_the_upgrade_off_only_while_it_beats(
        tui_agent, db_path):
    """A row an older tui-agent wrote without its process's start time, whose pid now belongs to another process
    (pid 1 is always there): the pid cannot say it is gone, so its heartbeat does, as for a worker on another host.
    The line says how long that takes; past it, the same command upgrades: the row does not hold it off forever."""
    database_at_version(db_path, BEFORE)
    with sqlite3.connect(db_path) as conn:
        conn.execute(WORKER, ("w-old", 1, this_host(), time.time() - 5, None))
    _refused(tui_agent("ls"), db_path, _by_heartbeat("w-old", 1, "this host"))
    with sqlite3.connect(db_path) as conn:
        assert _version(conn) == str(BEFORE)
        conn.execute("UPDATE workers SET heartbeat_at = ? WHERE name = 'w-old'",
                     (time.time() - 30 * REMOTE_SILENT_LEASES - 1,))
    assert tui_agent("ls").returncode == 0
    with sqlite3.connect(db_path) as conn:
        assert _version(conn) == str(SCHEMA_VERSION)


def test_on_a_server_a_worker_that_beats_holds_the_upgrade_off_until_it_stops(tui_agent, pg_url):
    pg_v9(pg_url)
    with psycopg.connect(pg_url) as conn:   # a server database as a tui-agent of version BEFORE left it
        for version in range(10, BEFORE + 1):
            for statement in statements(MIGRATIONS[version]):
                conn.execute(statement)
        conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(BEFORE),))
        conn.execute("INSERT INTO workers (name, pid, host, concurrency, lease_s, started_at, heartbeat_at) VALUES"
                     " ('w-old', 1, 'another-host', 1, 30, 0, extract(epoch from now()) - 5)")   # by the server's clock
    _refused(tui_agent("--db", pg_url, "ls"), pg_url, _by_heartbeat("w-old", 1, "another-host"))
    with psycopg.connect(pg_url) as conn:
        assert _version(conn) == str(BEFORE)
        conn.execute("UPDATE workers SET stopped_at = 1 WHERE name = 'w-old'")
    assert tui_agent("--db", pg_url, "ls").returncode == 0
    with psycopg.connect(pg_url) as conn:
        assert _version(conn) == str(SCHEMA_VERSION)
