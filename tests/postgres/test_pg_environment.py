"""The environment stops a command on PostgreSQL (issue 24), as tests/processes/test_environment.py and
tests/processes/test_bad_input.py prove it on SQLite: a server that is down or goes away, the writers' lock held by
another session, a read-only role, a database that is not ours or is newer than the code, tables another program
changed, a refused password.
Each is one line (exit 4, or 2 for the URL's own mistake), never a traceback, never a failed run, nothing lost.
A password in the URL is never printed, stored, logged or shown in `ps`. `doctor` has the server's checks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from helpers import ROOT, dump, show_json, until
from pg_cluster import PgServer, find_bin_dir

from tui_agent.cli import cli
from tui_agent.store import open_store
from tui_agent.store.doctor import diagnose
from tui_agent.store.postgres import WRITE_LOCK, PostgresError
from tui_agent.store.schema import SCHEMA_VERSION

pytestmark = pytest.mark.postgres

AGENTS = ["--agents", "counting_agents"]
SECRET = "sekrit-123"
# The busy timeout is 15 s; the same code path with a shorter one keeps these tests fast.
_SHORT_BUSY = ("import sys; import tui_agent.store.postgres as pg; pg.BUSY_TIMEOUT_MS = int(sys.argv.pop(1)); "
               "from tui_agent.cli import main; main()")


def _one_line(done, code: int = 4) -> str:
    """The error is one line, the last on stderr (a worker logs its claims before it), and no traceback."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("tui-agent: ")]
    assert errors and lines[-1] == errors[-1], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return errors[-1]


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def _with_user(url: str, user: str, password: str | None = None) -> str:
    return re.sub(r"//[^@]*@", f"//{user}{':' + password if password else ''}@", url)


@pytest.fixture
def database(pg_url, monkeypatch) -> str:
    """A fresh PostgreSQL database, named by TUI_AGENT_DB for every command and process the test starts."""
    monkeypatch.setenv("TUI_AGENT_DB", pg_url)
    return pg_url


def _ran(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


# -- the server is down, or goes away ------------------------------------------------------------


@pytest.mark.parametrize("args", [["ls"], ["start", "hello"], ["worker", "--once"], ["db", "init"]])
def test_a_server_that_is_down_is_one_line_exit_4(tui_agent, args):
    url = f"postgresql://someone:{SECRET}@127.0.0.1:9/runs"   # the discard port: nothing listens there
    done = tui_agent("--db", url, *args)
    line = _one_line(done, 4)
    assert "cannot reach postgresql://someone@127.0.0.1:9/runs" in line, line
    assert SECRET not in done.stdout + done.stderr


def test_a_server_that_goes_away_under_worker_once_is_one_line_exit_4_and_loses_nothing(tui_agent, tmp_path,
                                                                                         monkeypatch):
    """A second server of our own, stopped (immediate: as a crash) while `worker --once` (a command: a long-running
    worker waits instead, tests/postgres/test_pg_restart.py) is inside a step: its run waits for the server while its
    lease allows, then the worker stops with one line and exit 4, the run still running (not failed); the server back, a
    later worker finishes it, and what the first recorded is not done again."""
    server = PgServer(find_bin_dir())
    try:
        server.start()
        url = f"{server.url}/postgres"
        monkeypatch.setenv("TUI_AGENT_DB", url)
        log = tmp_path / "calls.log"
        run_id = tui_agent(*AGENTS, "start", "counting", "--input",
                           json.dumps({"log": str(log), "steps": 3, "delay_s": 1.5})).stdout.strip()
        worker = subprocess.Popen([sys.executable, "-m", "tui_agent", *AGENTS, "worker", "--once", "--lease", "3"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            until("the second step to start", lambda: _ran(log) == ["s0", "s1"])
            server.crash()
            out, err = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        line = _one_line(subprocess.CompletedProcess([], worker.returncode, out, err), 4)
        assert "postgresql://postgres@127.0.0.1" in line, line
        assert "cannot reach" in line or "lost the connection" in line, line

        server.start_again()
        report = show_json(tui_agent, run_id, *AGENTS)
        assert report["run"]["status"] == "running", report["events"]   # not failed: resumable
        assert [e["name"] for e in report["journal"]] == ["s0"]
        from helpers import later
        done = tui_agent(*AGENTS, "worker", "--once", env={"TUI_AGENT_NOW": later(60)})
        assert done.returncode == 0, done.stderr
        report = show_json(tui_agent, run_id, *AGENTS)
        assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed"), report["events"]
        assert _ran(log).count("s0") == 1   # recorded before the server went: not done again
        assert "failed" not in [e["kind"] for e in report["events"]]
    finally:
        server.stop()


def test_connections_the_server_drops_are_opened_again_and_the_run_goes_on(tui_agent, database, tmp_path, pg_server):
    """An administrator ends every session of the database (pg_terminate_backend) while a worker is inside a
    step: its next statements go to new connections, and the run succeeds with every step done once."""
    log = tmp_path / "calls.log"
    run_id = tui_agent(*AGENTS, "start", "counting", "--input",
                       json.dumps({"log": str(log), "steps": 3, "delay_s": 1.0})).stdout.strip()
    worker = subprocess.Popen([sys.executable, "-m", "tui_agent", *AGENTS, "worker", "--lease", "5"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until("the second step to start", lambda: _ran(log) == ["s0", "s1"])
        with _admin(f"{pg_server}/postgres") as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                          (database.rsplit("/", 1)[1],))
        until("the run to end", lambda: show_json(tui_agent, run_id, *AGENTS)["run"]["status"] != "running",
              deadline_s=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed"), (report["events"], err)
    assert _ran(log) == ["s0", "s1", "s2"]
    assert "Traceback" not in err


# -- the writers' lock held by another session ---------------------------------------------------


def _holding(url: str) -> psycopg.Connection:
    holder = psycopg.connect(url, autocommit=True)
    holder.execute("BEGIN")
    holder.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
    return holder


def test_a_lock_held_past_the_busy_timeout_is_one_line_exit_4_and_loses_nothing(tui_agent, database):
    assert tui_agent("run", "hello").returncode == 0
    queued = tui_agent("start", "hello").stdout.strip()
    before = dump(database)
    holder = _holding(database)
    try:
        for args in (["start", "hello"], ["cancel", queued]):
            done = subprocess.run([sys.executable, "-c", _SHORT_BUSY, "400", *args], capture_output=True, text=True,
                                  cwd=ROOT, timeout=60)
            line = _one_line(done, 4)
            assert f"{database} is busy" in line, line
            assert "nothing was lost" in line and "run the command again" in line, line
        assert tui_agent("ls").returncode == 0, "reads do not wait for the writers' lock"
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert dump(database) == before
    assert tui_agent("cancel", queued).returncode == 0, "once the lock is let go, the command works"


def test_a_worker_whose_lease_runs_waits_out_a_held_lock_and_its_run_succeeds(tui_agent, database, tmp_path):
    """The worker's busy timeout is 0.5 s and the lock is held 4 s, past it many times over, while the run is
    inside a step: the step's commit and the heartbeat wait (patience: the lease still runs), nothing fails."""
    log = tmp_path / "calls.log"
    run_id = tui_agent(*AGENTS, "start", "counting", "--input",
                       json.dumps({"log": str(log), "steps": 2, "delay_s": 1.0})).stdout.strip()
    worker = subprocess.Popen([sys.executable, "-c", _SHORT_BUSY, "500", *AGENTS, "worker", "--lease", "30"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until("the first step to start", lambda: _ran(log) == ["s0"])
        holder = _holding(database)
        time.sleep(4.0)
        holder.execute("ROLLBACK")
        holder.close()
        until("the run to end", lambda: show_json(tui_agent, run_id, *AGENTS)["run"]["status"] != "running",
              deadline_s=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    report = show_json(tui_agent, run_id, *AGENTS)
    assert (report["run"]["status"], report["run"]["reason"]) == ("succeeded", "check_passed"), (report["events"], err)
    assert _ran(log) == ["s0", "s1"]
    assert worker.returncode == 0, err
    assert "Traceback" not in err


# -- a role that may only read; databases that are not ours --------------------------------------


def test_a_read_only_role_reads_and_is_told_in_one_line_that_it_cannot_write(tui_agent, database):
    ran = tui_agent("run", "hello").stdout.split()[0]
    parked = tui_agent("start", "hello").stdout.strip()
    assert tui_agent("park", parked).returncode == 0
    with _admin(database) as admin:
        admin.execute("DROP ROLE IF EXISTS ro_reader")
        admin.execute("CREATE ROLE ro_reader LOGIN")
        admin.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO ro_reader")
    before = dump(database)
    ro = _with_user(database, "ro_reader")
    try:
        assert tui_agent("--db", ro, "ls").returncode == 0
        assert show_json(tui_agent, ran, "--db", ro)["run"]["status"] == "succeeded"
        for args in (["start", "hello"], ["resume", parked], ["run", "hello"], ["worker", "--once"]):
            line = _one_line(tui_agent("--db", ro, *args), 4)
            assert "read-only" in line and "ro_reader@" in line, line
        done = tui_agent("--db", ro, "doctor", "--json")
        assert done.returncode == 1
        failed = {c["name"]: c for c in json.loads(done.stdout)["checks"] if not c["ok"]}
        assert list(failed) == ["role"] and "GRANT" in failed["role"]["advice"], failed
    finally:
        with _admin(database) as admin:
            admin.execute("DROP OWNED BY ro_reader")
            admin.execute("DROP ROLE ro_reader")
    assert dump(database) == before


@pytest.mark.parametrize("args", [["ls"], ["db", "init"], ["start", "hello"], ["worker", "--once"], ["doctor"]])
def test_a_database_that_is_not_ours_is_refused_untouched(tui_agent, pg_url, args):
    with _admin(pg_url) as admin:
        admin.execute("CREATE TABLE invoices (id int PRIMARY KEY, total numeric)")
        admin.execute("INSERT INTO invoices VALUES (1, 9.5)")
    before = _everything(pg_url)
    done = tui_agent("--db", pg_url, *args)
    if args == ["doctor"]:
        assert done.returncode == 1 and "not tui-agent's" in done.stdout, done.stdout
    else:
        line = _one_line(done, 2)
        assert "holds tables but not tui-agent's" in line, line
    assert _everything(pg_url) == before


@pytest.mark.parametrize("args", [["ls"], ["db", "init"], ["start", "hello"], ["worker", "--once"], ["doctor"]])
def test_a_database_newer_than_the_code_is_refused_untouched(tui_agent, pg_url, args):
    assert tui_agent("--db", pg_url, "run", "hello").returncode == 0
    with _admin(pg_url) as admin:
        admin.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    before = _everything(pg_url)
    done = tui_agent("--db", pg_url, *args)
    if args == ["doctor"]:
        assert done.returncode == 1 and "schema version 999, newer" in done.stdout, done.stdout
    else:
        line = _one_line(done, 2)
        assert "schema version 999, newer than this tui-agent" in line and "upgrade tui-agent" in line, line
    assert _everything(pg_url) == before


@pytest.mark.parametrize("args", [["ls"], ["db", "migrate"], ["start", "hello"]])
def test_a_postgresql_schema_older_than_any_we_made_is_refused_untouched(tui_agent, pg_url, args):
    assert tui_agent("--db", pg_url, "run", "hello").returncode == 0
    with _admin(pg_url) as admin:
        admin.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
    before = _everything(pg_url)
    line = _one_line(tui_agent("--db", pg_url, *args), 2)
    assert "schema version 8, older than any tui-agent made on PostgreSQL" in line, line
    assert _everything(pg_url) == before


def _everything(url: str) -> list[str]:
    """Every table's rows and the schema's shape, read with psycopg (dump() opens a store, which refuses)."""
    with _admin(url) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM information_schema.tables"
                                             " WHERE table_schema = 'public' ORDER BY 1")]
        columns = conn.execute("SELECT table_name, column_name, data_type FROM information_schema.columns"
                               " WHERE table_schema = 'public' ORDER BY 1, 2").fetchall()
        return [repr(columns)] + [f"{t}: {sorted(map(repr, conn.execute(f'SELECT * FROM {t}').fetchall()))}"
                                  for t in tables]


# -- tables another program changed (tests/engine/test_doctor.py proves the same on SQLite) ---------------


@pytest.mark.parametrize("drop, said, readers", [
    # the view that names the column goes too: a read meets no such table
    ("checkpoints DROP COLUMN used_cache_read_tokens CASCADE",
     "checkpoints lacks used_cache_read_tokens; no checkpoints_now", ["ls", "show"]),
    # ls names the column: no such column (show reads runs.*, without it)
    ("runs DROP COLUMN agent_version", "runs lacks agent_version", ["ls"]),
])
def test_tables_that_differ_from_their_schema_version_are_one_line_and_never_written(tui_agent, database, drop,
                                                                                       said, readers):
    run_id = tui_agent("start", "hello").stdout.strip()   # queued: a worker that did not refuse would claim it
    assert [c.name for c in diagnose(database).checks if c.name == "tables" and c.ok] == ["tables"]
    with _admin(database) as admin:
        admin.execute(f"ALTER TABLE {drop}")
    before = _everything(database)
    commands = {"ls": ["ls"], "show": ["show", "--json", run_id]}
    for args in [commands[name] for name in readers] + [["worker", "--once"]]:   # the worker before it claims
        line = _one_line(tui_agent(*args), 4)
        assert line.startswith(f"tui-agent: {database} is not as its schema version makes it ({said})"), line
        assert line.endswith("no worker writes to it; pass --db another database (tui-agent doctor says more)")
    done = tui_agent("doctor", "--json")
    assert done.returncode == 1, done.stderr
    failed = {c["name"]: c for c in json.loads(done.stdout)["checks"] if not c["ok"]}
    assert list(failed) == ["tables"], failed
    assert failed["tables"]["detail"] == f"not as schema version {SCHEMA_VERSION} makes them: {said}"
    assert _everything(database) == before


def test_a_missing_column_in_a_database_that_matches_its_version_is_not_blamed_on_the_database(database):
    """A query of ours that names a column or table no version makes is a bug: it must surface as one."""
    store = open_store(database)
    try:
        for sql, state in (("SELECT no_such_column FROM runs", "42703"), ("SELECT * FROM no_such_table", "42P01")):
            with pytest.raises(PostgresError) as raised:
                store.conn.execute(sql)
            assert raised.value.sqlstate == state
            assert store.stopped(raised.value) is None
    finally:
        store.close()


def test_a_role_that_may_not_make_temporary_tables_still_works_and_doctor_says_its_tables_were_not_compared(
        tui_agent, database):
    """The comparison makes the version's schema in the session's temporary schema; without TEMP (revoked from
    PUBLIC) a worker goes on as it did before there was a comparison, and doctor says why it did not compare."""
    run_id = tui_agent("start", "hello").stdout.strip()
    name = database.rsplit("/", 1)[1]
    with _admin(database) as admin:
        admin.execute("DROP ROLE IF EXISTS no_temp")
        admin.execute("CREATE ROLE no_temp LOGIN")
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO no_temp")
        admin.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO no_temp")
        admin.execute(f"REVOKE TEMP ON DATABASE {name} FROM PUBLIC")
    user = _with_user(database, "no_temp")
    try:
        done = tui_agent("--db", user, "worker", "--once")
        assert done.returncode == 0 and f"{run_id} succeeded" in done.stdout, (done.stdout, done.stderr)
        done = tui_agent("--db", user, "doctor", "--json")
        assert done.returncode == 0, done.stdout
        tables = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "tables")
        assert tables["ok"] and tables["detail"].startswith("not compared: user no_temp may not create temporary"
                                                            " tables"), tables
    finally:
        with _admin(database) as admin:
            admin.execute("DROP OWNED BY no_temp")
            admin.execute("DROP ROLE no_temp")


# -- a wrong password: a second server of our own, with password authentication -------------------


def test_a_wrong_password_is_one_line_exit_2_and_never_printed(tui_agent):
    server = PgServer(find_bin_dir())
    try:
        server.start()
        with _admin(f"{server.url}/postgres") as admin:
            admin.execute(f"CREATE ROLE pw_user LOGIN PASSWORD '{SECRET}'")
        hba = server.data / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all postgres 127.0.0.1/32 trust\n"
                       "host all all 127.0.0.1/32 scram-sha-256\n")
        server._run("pg_ctl", "-D", str(server.data), "reload")
        time.sleep(0.5)
        good = _with_user(f"{server.url}/postgres", "pw_user", SECRET)
        wrong = _with_user(f"{server.url}/postgres", "pw_user", "wrong-password")
        for args in (["ls"], ["start", "hello"]):
            done = tui_agent("--db", wrong, *args)
            line = _one_line(done, 2)
            assert "password authentication failed" in line and "pw_user@127.0.0.1" in line, line
            assert "wrong-password" not in done.stdout + done.stderr
        done = tui_agent("--db", wrong, "doctor")
        assert done.returncode == 1 and "password authentication failed" in done.stdout
        assert "wrong-password" not in done.stdout + done.stderr
        with _admin(f"{server.url}/postgres") as admin:
            admin.execute("GRANT ALL ON SCHEMA public TO pw_user")
        done = tui_agent("--db", good, "run", "hello")
        assert done.returncode == 0, done.stderr   # the right one gets in: the refusal was the password's
    finally:
        server.stop()


# -- the password in the URL is never printed, stored, logged or shown ---------------------------


def test_a_password_in_the_url_is_never_printed_stored_or_logged(pg_url, tmp_path, monkeypatch):
    """Trust authentication lets the role in whatever the password, so here the password is only carried:
    which is all it takes to prove that it goes nowhere."""
    name = pg_url.rsplit("/", 1)[1]
    with _admin(pg_url) as admin:
        admin.execute(f"CREATE ROLE pw_{name} LOGIN PASSWORD '{SECRET}'")
        admin.execute(f"ALTER DATABASE {name} OWNER TO pw_{name}")
        admin.execute(f"ALTER SCHEMA public OWNER TO pw_{name}")
    url = _with_user(pg_url, f"pw_{name}", SECRET)
    monkeypatch.setenv("TUI_AGENT_DB", url)
    runner = CliRunner()
    said: list[str] = []

    def cli_says(*args: str, code: int | None = 0) -> str:
        done = runner.invoke(cli, list(args), catch_exceptions=True)
        text = done.output + repr(done.exception or "")
        said.append(text)
        if code is not None:
            assert done.exit_code == code, text
        return done.output

    cli_says("db", "init")
    run_id = cli_says("run", "hello").split()[0]
    queued = cli_says("start", "hello").strip()
    for args in (["ls"], ["ls", "--json"], ["show", run_id], ["show", run_id, "--json"], ["workers", "--all"],
                 ["workers", "--all", "--json"], ["doctor"], ["doctor", "--json"], ["park", queued],
                 ["resume", queued]):
        cli_says(*args, code=None)
    cli_says("show", "r-nothing", code=2)                                    # an error names the database
    cli_says("--db", url.replace(pg_url.rsplit(":", 1)[1].split("/")[0], "9"), "ls", code=4)   # unreachable
    assert any("doctor" in s or "healthy" in s for s in said)

    # a worker in a real process: its output and its log
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        worker = subprocess.Popen([sys.executable, "-m", "tui_agent", "worker", "--name", "w-secret"], cwd=ROOT,
                                  stdout=out, stderr=out)
        until("the queued run to succeed",
              lambda: json.loads(runner.invoke(cli, ["show", queued, "--json"]).output)["run"]["status"] == "succeeded")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    said.append(log.read_text())

    # a worker the TUI starts: its command line and its log
    from tui_agent.operate import start_worker
    from tui_agent.store import open_store

    store = open_store(url)
    try:
        assert SECRET not in str(store.path) and SECRET not in store.label
        spawned = start_worker(store, name="w-tui", log_dir=tmp_path / "logs")
        try:
            until("the worker to register", lambda: any(
                w["name"] == "w-tui" for w in json.loads(runner.invoke(cli, ["workers", "--json"]).output)))
            ps = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(spawned.pid)], capture_output=True, text=True)
            cmdline = Path(f"/proc/{spawned.pid}/cmdline").read_bytes().decode()
            said += [ps.stdout, cmdline]
            assert "tui_agent" in cmdline
        finally:
            spawned.terminate()
            spawned.wait(timeout=30)
        said += [p.read_text() for p in (tmp_path / "logs").iterdir()]
    finally:
        store.close()

    for text in said:
        assert SECRET not in text, text
    with _admin(pg_url) as conn:   # no row of any table
        tables = [t for (t,) in conn.execute("SELECT table_name FROM information_schema.tables"
                                             " WHERE table_schema = 'public'")]
        assert len(tables) > 5
        for table in tables:
            for row in conn.execute(f"SELECT * FROM {table}").fetchall():
                assert SECRET not in repr(row), (table, row)
    for root in {tmp_path, Path(os.environ["XDG_DATA_HOME"])}:   # no file under the test's folders
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert SECRET.encode() not in path.read_bytes(), path
