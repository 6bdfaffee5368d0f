"""`tui-agent copy --from SRC --to DST`: a laptop's SQLite history into the team's PostgreSQL database and back,
ids, journals, ledgers and artifacts kept; refusals leave the target as it was."""

import json
import sqlite3
import time
from pathlib import Path

import pytest
from helpers import portable, registry_of, start_and_work

from tui_agent import Agent
from tui_agent.runtime.clock import CLOCK
from tui_agent.runtime.registry import load_registry
from tui_agent.runtime.results import ARTIFACT_THRESHOLD
from tui_agent.runtime.worker import execute
from tui_agent.store import StoreError, artifacts, copying, open_store
from tui_agent.store.copying import copy_database, open_source, open_target, tables
from tui_agent.store.runs import claim_run
from tui_agent.store.schema import SCHEMA_VERSION

pytestmark = pytest.mark.postgres


def _json(invoke, where, *args):
    result = invoke("--db", str(where), *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _copy(invoke, source, target):
    result = invoke("copy", "--from", str(source), "--to", str(target))
    assert result.exit_code == 0, result.stderr
    return result


def _data_dir(where) -> str:
    store = open_store(where, create=False)
    try:
        return str(store.data_dir)
    finally:
        store.close()


def _views(invoke, where, run_ids):
    data_dir = _data_dir(where)
    return ({run: portable(_json(invoke, where, "show", run), data_dir) for run in run_ids},
            portable(_json(invoke, where, "ls"), data_dir))


def _counts(where) -> dict[str, int]:
    store = open_store(where, create=False)
    try:
        return {t.name: store.conn.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0] for t in tables()}
    finally:
        store.close()


def test_every_table_of_the_schema_is_copied_and_meta_is_not():
    names = [t.name for t in tables()]
    assert names[0] == "runs" and "meta" not in names
    # the journal is its two tables, each copied as it is (a run stopped inside its tail keeps it), not their view
    assert set(names) == {"runs", "checkpoints", "journal_rows", "effects", "workers", "approvals", "events",
                          "schedules", "let_go", "model_calls", "request_parts", "notices", "journal_tail",
                          "imported_runs", "kept_keys",   # the keys of removed runs: the ledger's promise goes with a copy
                          "commands", "saved_filters"}
    assert {t.name for t in tables() if t.identity} == {"effects", "approvals", "events", "notices", "commands"}


def test_every_column_of_every_table_is_copied_those_later_migrations_added_too(db_path):
    """A migration that adds a column (runs.script, model_calls.usage) adds it to what is copied."""
    open_store(db_path).close()
    conn = sqlite3.connect(db_path)
    try:
        for table in tables():
            assert table.columns == tuple(row[1] for row in conn.execute(f"PRAGMA table_info({table.name})")), \
                table.name
    finally:
        conn.close()


def test_demo_database_to_postgres_and_back_reads_the_same(demo, pg_url, tmp_path, invoke):
    path, roles = demo
    fork = invoke("--db", str(path), "fork", roles["succeeded"], "--from-step", "1")
    assert fork.exit_code == 0, fork.stderr
    back = tmp_path / "back" / "runs.db"

    started = time.perf_counter()
    there = _copy(invoke, path, pg_url)
    to_pg = time.perf_counter() - started
    started = time.perf_counter()
    home = _copy(invoke, pg_url, back)
    to_sqlite = time.perf_counter() - started
    print(f"\ncopy of the demo database: SQLite -> PostgreSQL {to_pg:.2f} s, PostgreSQL -> SQLite {to_sqlite:.2f} s")

    listing = _json(invoke, path, "ls")
    run_ids = [r["id"] for r in listing]
    assert set(roles.values()) <= set(run_ids) and len(run_ids) == len(roles) + 1   # and the fork
    assert there.stdout.startswith(f"copied {len(run_ids)} runs (") and f"from {path} to " in there.stdout
    assert "journal entries" in there.stdout and "effects" in there.stdout
    assert home.stdout.strip().endswith(f"to {back} in " + home.stdout.strip().split(" in ")[-1])

    original = _views(invoke, path, run_ids)
    assert _views(invoke, pg_url, run_ids) == original
    assert _views(invoke, back, run_ids) == original
    assert _counts(path) == _counts(pg_url) == _counts(back)


def test_the_password_of_a_url_is_never_printed(demo, pg_url, invoke):
    path, _ = demo
    with_password = pg_url.replace("postgres@", "postgres:sesame@")   # trust authentication: any password passes
    result = _copy(invoke, path, with_password)
    assert "sesame" not in result.stdout + result.stderr and pg_url in result.stdout


def test_after_a_copy_new_rows_get_fresh_ids_and_a_worker_resumes_a_copied_run(demo, pg_url, invoke, clock):
    path, roles = demo
    _copy(invoke, path, pg_url)
    store = open_store(pg_url)
    try:
        before = {table: store.conn.execute(f"SELECT max(id) FROM {table}").fetchone()[0]
                  for table in ("events", "effects", "approvals", "notices")}
        assert all(before.values())
        new = invoke("--db", pg_url, "run", "hello")
        assert new.exit_code == 0, new.stderr
        new_id = _json(invoke, pg_url, "ls")[0]["id"]
        events = [e["id"] for e in store.query("SELECT id FROM events WHERE run_id = ?", (new_id,))]
        assert events and min(events) > before["events"]

        # the queued run and the sleeping one, worked on the copy: the sleeper once its wake time has come (on
        # PostgreSQL by the server's clock, which a test cannot move: its wake_at is moved back instead)
        registry = load_registry()
        sleeper = roles["sleeping until tomorrow"]
        assert claim_run(store, sleeper, "w-copy", 30.0, CLOCK.now()) is None    # not yet
        store.conn.execute("UPDATE runs SET wake_at = wake_at - 2 * 86400 WHERE id = ?", (sleeper,))
        clock.set(CLOCK.now() + 2 * 86_400)
        for role in ("running", "sleeping until tomorrow"):
            claim = claim_run(store, roles[role], "w-copy", 30.0, clock.now())
            assert claim is not None, role
            execute(store, registry, claim=claim)
            run = _json(invoke, pg_url, "show", roles[role])["run"]
            assert run["status"] == "succeeded", (role, run["status"], run["reason"], run["error"])
        assert store.conn.execute("SELECT max(id) FROM effects").fetchone()[0] > before["effects"]
        assert store.conn.execute("SELECT max(id) FROM notices").fetchone()[0] >= before["notices"]
    finally:
        store.close()


def test_a_copy_to_sqlite_keeps_the_id_counters_past_the_source(demo, pg_url, tmp_path, invoke):
    """PostgreSQL's sequence may be past the largest id (a rolled-back insert); sqlite_sequence takes it."""
    path, _ = demo
    _copy(invoke, path, pg_url)
    store = open_store(pg_url)
    top = store.conn.execute("SELECT max(id) FROM notices").fetchone()[0]
    store.conn.execute("SELECT setval(pg_get_serial_sequence('notices', 'id'), ?)", (top + 50,))
    store.close()
    back = tmp_path / "back.db"
    _copy(invoke, pg_url, back)
    conn = sqlite3.connect(back)
    assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'notices'").fetchone()[0] == top + 50
    conn.close()


def _snapshot(where) -> tuple:
    """Everything a refused copy must leave as it was: every table's rows, meta, and the data folder."""
    store = open_store(where, create=False)
    try:
        rows = {t.name: sorted(map(repr, store.conn.execute(f"SELECT * FROM {t.name}").fetchall()))
                for t in tables()}
        meta = sorted(store.conn.execute("SELECT key, value FROM meta").fetchall())
        folder = Path(store.data_dir)
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []
        return rows, meta, files
    finally:
        store.close()


def test_a_target_that_holds_a_run_is_refused_untouched(demo, pg_url, tmp_path, invoke):
    path, _ = demo
    target = tmp_path / "busy.db"
    assert invoke("--db", str(target), "run", "hello").exit_code == 0
    before = _snapshot(target)
    result = invoke("copy", "--from", str(path), "--to", str(target))
    assert result.exit_code == 2 and "is not empty" in result.stderr and len(result.stderr.splitlines()) == 1
    assert _snapshot(target) == before

    assert invoke("--db", pg_url, "run", "hello").exit_code == 0
    before = _snapshot(pg_url)
    result = invoke("copy", "--from", str(path), "--to", pg_url)
    assert result.exit_code == 2 and "is not empty" in result.stderr
    assert _snapshot(pg_url) == before


def test_copying_a_database_onto_itself_is_refused(demo, pg_url, invoke):
    path, _ = demo
    before = _snapshot(path)
    for same in (str(path), str(path.parent / "." / path.name)):
        result = invoke("copy", "--from", str(path), "--to", same)
        assert result.exit_code == 2 and "are the same database" in result.stderr, result.stderr
    assert _snapshot(path) == before

    _copy(invoke, path, pg_url)
    before = _snapshot(pg_url)
    other_spelling = pg_url.replace("127.0.0.1", "localhost")
    for same in (pg_url, other_spelling):
        result = invoke("copy", "--from", pg_url, "--to", same)
        assert result.exit_code == 2 and "are the same database" in result.stderr, result.stderr
    assert _snapshot(pg_url) == before


def test_a_source_at_another_schema_version_is_refused_and_neither_side_changes(demo, pg_url, tmp_path, invoke):
    path, _ = demo
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION - 1),))
    conn.commit()
    conn.close()
    source_before = path.read_bytes()
    target = tmp_path / "new.db"
    result = invoke("copy", "--from", str(path), "--to", str(target))
    assert result.exit_code == 2 and f"schema version {SCHEMA_VERSION - 1}" in result.stderr, result.stderr
    assert not target.exists()                          # not even made
    assert path.read_bytes() == source_before           # and the source was not migrated

    store = open_store(pg_url)                          # an empty PostgreSQL target with our schema
    store.close()
    before = _snapshot(pg_url)
    result = invoke("copy", "--from", str(path), "--to", pg_url)
    assert result.exit_code == 2 and "schema version" in result.stderr
    assert _snapshot(pg_url) == before

    # a PostgreSQL source at an older version: refused too
    fresh = tmp_path / "fresh.db"
    store = open_store(pg_url)
    store.conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION - 1),))
    store.close()
    result = invoke("copy", "--from", pg_url, "--to", str(fresh))
    assert result.exit_code == 2 and f"schema version {SCHEMA_VERSION - 1}" in result.stderr, result.stderr
    assert not fresh.exists()


def test_copy_database_refuses_before_writing(demo, tmp_path):
    path, _ = demo
    source = open_source(str(path))
    target = open_target(str(tmp_path / "t.db"))
    try:
        copy_database(source, target)
        with pytest.raises(StoreError, match="is not empty"):
            copy_database(source, target)
    finally:
        source.close()
        target.close()


def test_rows_that_reach_the_target_after_the_first_check_are_refused_inside_the_copy(demo, pg_url, monkeypatch):
    """A worker that starts on the target between the refusals and the copy's write: the check inside the write
    transaction refuses, and the target keeps exactly its own rows."""
    path, _ = demo
    source, target = open_source(str(path)), open_target(pg_url)
    try:
        def then_a_worker_arrives(source_store, target_store, schema):
            real_check(source_store, target_store, schema)
            with target_store.write() as conn:
                conn.execute("INSERT INTO workers (name, pid, host, concurrency, lease_s, started_at, heartbeat_at)"
                             " VALUES ('w-early', 1, 'elsewhere', 1, 60, 0, 0)")
            arrived.append(_rows(pg_url))
        real_check, arrived = copying.check, []
        monkeypatch.setattr(copying, "check", then_a_worker_arrives)
        with pytest.raises(StoreError, match=r"not empty \(its workers hold rows\)"):
            copy_database(source, target)
        after = _rows(pg_url)
        assert after == arrived[0] and after["workers"] and not after["runs"]
    finally:
        source.close()
        target.close()


@pytest.mark.parametrize("shared", [False, True], ids=["into-the-table", "into-a-data-folder"])
def test_a_large_result_and_a_report_read_back_after_the_copy_either_way(pg_url, tmp_path, invoke, monkeypatch,
                                                                           shared):
    """SQLite's files become the server's rows (or files in its --data folder) and files again on the way back."""
    big = "x" * (ARTIFACT_THRESHOLD + 1000)

    def run(ctx, request):
        blob = ctx.step("blob", lambda: {"text": big})
        report = ctx.step("report", ctx.save_artifact, "report.md", "# a report\n")
        return {"blob": blob, "size": ctx.step("size", lambda: len(blob["text"])), "report": report}

    source = tmp_path / "laptop.db"
    store = open_store(source)
    run_id = start_and_work(store, registry_of(Agent(name="blobby", run=run)), "blobby", {}).run_id
    named = [r["artifact"] for r in store.query("SELECT artifact FROM journal WHERE artifact IS NOT NULL")]
    named.append(next(store.query("SELECT result_artifact FROM runs"))["result_artifact"])
    kept = {relative: (store.data_dir / relative).read_bytes()
            for relative in [*named, f"artifacts/{run_id}/report.md"]}
    store.close()
    assert len(named) == 2 and all(named)

    if shared:
        monkeypatch.setenv(artifacts.ENV, str(tmp_path / "shared"))
    back = tmp_path / "elsewhere" / "runs.db"
    assert f"{len(kept)} artifacts" in _copy(invoke, source, pg_url).stdout
    server = open_store(pg_url)
    try:
        in_table = {path: bytes(content) for path, content in server.conn.execute("SELECT path, content FROM artifacts")}
        assert in_table == ({} if shared else kept)
        assert not any((server.data_dir / relative).exists() for relative in kept), "not in a machine's own folder"
    finally:
        server.close()
    assert f"{len(kept)} artifacts" in _copy(invoke, pg_url, back).stdout
    for where in (pg_url, back):
        shown = _json(invoke, where, "show", run_id)
        assert shown["run"]["result"]["blob"] == {"text": big}
        assert shown["run"]["result"]["size"] == len(big)
    folder = tmp_path / "shared" if shared else None
    for relative, data in kept.items():
        assert (back.parent / "runs.data" / relative).read_bytes() == data
        if folder is not None:
            assert (folder / relative).read_bytes() == data
    blob = _json(invoke, back, "show", run_id)["journal"][0]
    assert blob["name"] == "blob" and Path(blob["artifact"]).is_relative_to(back.parent)


def _rows(where) -> dict[str, list[tuple]]:
    """Every row of every copied table, in primary-key order."""
    store = open_store(where, create=False)
    try:
        return {t.name: store.conn.execute(f"SELECT {', '.join(t.columns)} FROM {t.name}"
                                           f" ORDER BY {', '.join(t.key)}").fetchall() for t in tables()}
    finally:
        store.close()


def test_pages_of_a_few_rows_copy_every_row_once_with_progress_up_to_the_total(demo, pg_url, tmp_path, monkeypatch):
    """Keyset pages across composite keys (journal, model_calls), both ways, every row with every column."""
    monkeypatch.setattr("tui_agent.store.copying.PAGE_ROWS", 7)
    path, _ = demo
    back = tmp_path / "back.db"
    seen = {}
    for source_where, target_where in ((str(path), pg_url), (pg_url, str(back))):
        source, target = open_source(source_where), open_target(target_where)
        try:
            counts = copy_database(source, target, lambda table, done, total: seen.setdefault(source_where, []).append(  # noqa: B023 - called in this turn
                (table, done, total)))
        finally:
            source.close()
            target.close()
    original = _rows(path)
    assert _rows(pg_url) == original and _rows(back) == original
    assert counts["journal"] == len(original["journal_rows"]) + len(original["journal_tail"]) > 7 * 3
    rows = sum(map(len, original.values()))
    in_table = counts["artifacts"]   # the server's artifacts are rows of its table, counted in its total
    assert in_table > 0
    for source_where, total in ((str(path), rows), (pg_url, rows + in_table)):
        dones = [done for _, done, _ in seen[source_where]]
        assert {t for _, _, t in seen[source_where]} == {total} and dones[-1] == total
        assert all(0 < b - a <= 7 for a, b in zip(dones, dones[1:]))
    assert [table for table, _, _ in seen[pg_url]][-1] == "artifacts"


def test_a_copy_that_fails_halfway_leaves_no_row_in_the_target(demo, pg_url):
    path, _ = demo
    source, target = open_source(str(path)), open_target(pg_url)

    def fail_in_the_journal(table, done, total):
        if table == "journal":
            raise RuntimeError("the laptop's lid closed")

    try:
        with pytest.raises(RuntimeError):
            copy_database(source, target, fail_in_the_journal)
        assert all(count == 0 for count in _counts(pg_url).values())
        copy_database(source, target)                      # and a second try copies it all
    finally:
        source.close()
        target.close()
    assert _rows(pg_url) == _rows(path)


def test_a_servers_artifacts_are_read_by_pages_of_paths_not_once_per_run(demo, pg_url, tmp_path, monkeypatch):
    """From a server that keeps its artifacts in its table: one query per page of paths and one per artifact,
    whatever the number of runs (it was a scan of the table per run), and every row copied, even one that no run's
    folder holds."""
    monkeypatch.setattr("tui_agent.store.copying.PAGE_ROWS", 3)
    path, _ = demo
    source, target = open_source(str(path)), open_target(pg_url)
    try:
        copy_database(source, target)
    finally:
        source.close(), target.close()
    server = open_store(pg_url)
    try:
        artifacts.save(server, "artifacts/r-nobody/kept.txt", b"kept by hand")
        held = server.conn.execute("SELECT count(*) FROM artifacts").fetchone()[0]
        runs = server.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    finally:
        server.close()
    assert held > 3 and runs > held // 3 + 1
    source, target = open_source(pg_url), open_target(str(tmp_path / "back.db"))
    statements = []
    source.conn.set_trace_callback(statements.append)
    try:
        counts = copy_database(source, target)
    finally:
        source.close(), target.close()
    reads = [sql for sql in statements if "FROM artifacts" in sql and "count(*)" not in sql]
    assert counts["artifacts"] == held
    assert len(reads) == held + held // 3 + 1, reads   # the contents, and the pages of paths (the last one short)
    assert (tmp_path / "back.data" / "artifacts" / "r-nobody" / "kept.txt").read_bytes() == b"kept by hand"
