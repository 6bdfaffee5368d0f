"""`tui-agent export RUN... -o FILE` and `tui-agent import FILE [--adopt]`: a colleague's runs carried into another
database (SQLite or PostgreSQL) to be read, replayed and forked there, never resumed unless taken over; a file that
is not a whole export, or a clash of run ids or ledger keys, is one line and nothing is written."""

import json
import sqlite3
from pathlib import Path

import pytest
from helpers import data_dir, dump, portable

from tui_agent.store import open_store
from tui_agent.store.copying import tables
from tui_agent.store.exports import LEFT_OUT, exported_tables


def ok(result, code: int = 0):
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result


def refused(result, said: str):
    """One line on stderr, exit 2, saying `said`."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("tui-agent: "), result.stderr
    assert said in result.stderr, result.stderr
    return result


def show(invoke, where, run_id) -> dict:
    return json.loads(ok(invoke("--db", str(where), "show", run_id, "--json")).stdout)


def views(invoke, where, run_ids, source=None) -> dict:
    """Each run's `show --json`, artifact locations written as <data>/ and the import mark left out; `source`, the
    database the runs came from, whose data folder their results may name (a report's path) written so too."""
    shown = {run: portable({k: v for k, v in show(invoke, where, run).items() if k != "imported"},
                           str(data_dir(where))) for run in run_ids}
    return shown if source is None else portable(shown, str(data_dir(source)))


def started(invoke, where, *args) -> str:
    return ok(invoke("--db", str(where), "start", *args)).stdout.strip()


def test_every_table_that_names_a_run_is_exported_or_left_out_for_a_reason():
    naming = {t.name for t in tables() if t.name == "runs" or "run_id" in t.columns}
    exported = {t.name for t in exported_tables()}
    assert exported | set(LEFT_OUT) == naming and not exported & set(LEFT_OUT)
    assert {"runs", "checkpoints", "journal_rows", "journal_tail", "effects", "approvals", "events", "model_calls",
            "request_parts"} <= exported


@pytest.mark.postgres
def test_a_round_trip_sqlite_postgres_sqlite_gives_the_same_show_json(demo, pg_url, tmp_path, invoke):
    path, roles = demo
    fork = ok(invoke("--db", str(path), "fork", roles["succeeded"], "--from-step", "2")).stdout.split()[-1]
    named = [fork, roles["waiting for approval"], roles["outcome unknown"], roles["parked on cost"]]
    carried = [*named, roles["succeeded"]]          # the fork's parent comes with it
    original = views(invoke, path, carried)
    assert any(e["state"] == "unknown" for e in original[roles["outcome unknown"]]["effects"])
    assert original[roles["waiting for approval"]]["approvals"]

    there, back, home = tmp_path / "there.db", tmp_path / "back.db", tmp_path / "home" / "runs.db"
    said = ok(invoke("--db", str(path), "export", *named, "-o", str(there))).stdout
    assert f"and {roles['succeeded']}, which they were forked from" in said and "5 runs" in said
    assert not Path(f"{there}-wal").exists() and not (tmp_path / "there.data").exists()   # one file, whole
    ok(invoke("--db", pg_url, "import", str(there)))
    ok(invoke("--db", pg_url, "export", *named, "-o", str(back)))
    said = ok(invoke("--db", str(home), "import", str(back))).stdout
    assert f"exported from {pg_url}" in said and "never to resume" in said

    assert views(invoke, pg_url, carried) == original
    assert views(invoke, home, carried) == original
    mark = show(invoke, home, fork)["imported"]
    assert mark["source"] == pg_url and mark["exported_at"] and show(invoke, path, fork)["imported"] is None
    store = open_store(home, create=False)
    try:   # the report the succeeded run wrote is a file again, where a SQLite file keeps its artifacts
        folder = Path(store.data_dir) / "artifacts" / roles["succeeded"]
        assert [p.name for p in folder.iterdir() if p.name.startswith("report-")]
    finally:
        store.close()


def test_an_imported_run_replays_and_is_never_resumed_or_worked_unless_adopted(invoke, tui_agent, tmp_path):
    a, b, c = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "c.db"
    done = started(invoke, a, "nightly-report")
    ok(invoke("--db", str(a), "worker", "--once"))
    parked = started(invoke, a, "hello")
    ok(invoke("--db", str(a), "park", parked))
    queued = started(invoke, a, "hello")                  # a worker here would run it
    both = tmp_path / "runs.export.db"
    ok(invoke("--db", str(a), "export", done, parked, queued, "-o", str(both)))
    ok(invoke("--db", str(b), "import", str(both)))

    replayed = tui_agent("--db", str(b), "replay", done)       # as a CI job would, in a process of its own
    assert replayed.returncode == 0 and replayed.stdout.startswith(f"{done} nightly-report: reproduced"), replayed
    for action in (("resume", parked), ("cancel", queued), ("park", queued), ("resume", parked, "--restart")):
        refused(invoke("--db", str(b), *action), "was imported from")
    ok(invoke("--db", str(b), "worker", "--once"))
    assert show(invoke, b, queued)["run"]["status"] == "queued"          # no worker here claims it
    assert show(invoke, b, parked)["imported"] is not None
    fork = ok(invoke("--db", str(b), "fork", done, "--from-step", "1")).stdout.strip()
    ok(invoke("--db", str(b), "worker", "--once"))
    assert show(invoke, b, fork)["run"]["status"] == "succeeded"          # a fork is this database's own

    refused(invoke("--db", str(c), "import", str(both), "--adopt"), f"cannot adopt {queued}: it is queued")
    assert not c.exists()
    ended_or_parked = tmp_path / "adopt.db"
    ok(invoke("--db", str(a), "export", done, parked, "-o", str(ended_or_parked)))
    said = ok(invoke("--db", str(c), "import", str(ended_or_parked), "--adopt")).stdout
    assert "must not resume them" in said
    assert show(invoke, c, parked)["imported"] is None
    assert any(e["kind"] == "adopted" and "must not resume it" in e["message"] for e in show(invoke, c, parked)["events"])
    ok(invoke("--db", str(c), "resume", parked))
    ok(invoke("--db", str(c), "worker", "--once"))
    assert show(invoke, c, parked)["run"]["status"] == "succeeded"


def test_a_clash_of_run_ids_or_ledger_keys_is_one_line_exit_2_and_imports_nothing(invoke, database, tmp_path):
    a = tmp_path / "a.db"
    report = started(invoke, a, "nightly-report", "--input", '{"date": "2026-10-19"}')
    keyed = started(invoke, a, "hello", "--key", "greet-ada")
    ok(invoke("--db", str(a), "worker", "--once"))
    reports, greeting = tmp_path / "report.db", tmp_path / "greeting.db"
    ok(invoke("--db", str(a), "export", report, "-o", str(reports)))
    ok(invoke("--db", str(a), "export", keyed, "-o", str(greeting)))

    target = str(database)
    ok(invoke("--db", target, "import", str(greeting)))
    before = dump(database)
    refused(invoke("--db", target, "import", str(greeting)), f"run {keyed} is in")   # imported before
    # the same report, sent by a run of this database: its email's key is in both ledgers
    started(invoke, database, "nightly-report", "--input", '{"date": "2026-10-19"}')
    ok(invoke("--db", target, "worker", "--once"))
    before = dump(database)
    refused(invoke("--db", target, "import", str(reports)), "the effect key 'nightly-report:2026-10-19:")
    assert dump(database) == before
    # another day's report joins them: its rows take the next numbers of this database's own counters
    later = started(invoke, a, "nightly-report", "--input", '{"date": "2026-10-20"}')
    ok(invoke("--db", str(a), "worker", "--once"))
    ok(invoke("--db", str(a), "export", later, "-o", str(tmp_path / "later.db")))
    ok(invoke("--db", target, "import", str(tmp_path / "later.db")))
    assert views(invoke, database, [later], source=a) == views(invoke, a, [later])
    ok(invoke("--db", target, "run", "hello"))                  # and new rows after them
    other = tmp_path / "other.db"
    ok(invoke("--db", str(other), "start", "hello", "--key", "greet-ada"))
    refused(invoke("--db", str(other), "import", str(greeting)), "the run key 'greet-ada' (start --key) names run")


def test_a_file_that_is_not_a_whole_export_is_one_line_and_nothing_is_written(invoke, tmp_path):
    a = tmp_path / "a.db"
    run_id = started(invoke, a, "nightly-report")
    ok(invoke("--db", str(a), "worker", "--once"))
    export = tmp_path / "whole.db"
    ok(invoke("--db", str(a), "export", run_id, "-o", str(export)))
    data = export.read_bytes()
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    files = {"cut in its header": (data[:60], "not a whole tui-agent export (database disk image is malformed)"),
             "cut in half": (data[:len(data) // 2], "cut short"),
             "its last page gone": (data[:-4096], "cut short"),
             "a page overwritten": (data[:8192] + b"\xff" * 4096 + data[12288:], "not a whole tui-agent export"),
             "text": (b"hello, this is not a database\n" * 10, "not a SQLite database"),
             "empty": (b"", "not a whole tui-agent export"),
             "another program's": (other.read_bytes(), "no meta table"),
             "a whole database": (a.read_bytes(), "not an export")}
    existing = tmp_path / "existing.db"
    started(invoke, existing, "hello")
    before = dump(existing)
    for name, (content, said) in files.items():
        bad = tmp_path / f"{name}.db"
        bad.write_bytes(content)
        new = tmp_path / "new" / "runs.db"
        refused(invoke("--db", str(new), "import", str(bad)), said)
        assert not new.parent.exists(), name
        refused(invoke("--db", str(existing), "import", str(bad)), said)
        assert dump(existing) == before, name
        assert bad.read_bytes() == content, name
    refused(invoke("--db", str(existing), "import", str(tmp_path / "missing.db")), "is not there")


def test_an_export_is_one_file_that_opens_with_db_and_is_never_written_over_unasked(invoke, tui_agent, tmp_path):
    a = tmp_path / "a.db"
    run_id = started(invoke, a, "nightly-report")
    ok(invoke("--db", str(a), "worker", "--once"))
    export = tmp_path / "export.db"
    ok(invoke("--db", str(a), "export", run_id[:6], "-o", str(export)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.data", "a.db", "export.db"]
    made = export.read_bytes()
    replayed = tui_agent("--db", str(export), "replay", run_id)          # a CI job on the file checked in
    assert replayed.returncode == 0 and "reproduced" in replayed.stdout, replayed
    assert export.read_bytes() == made and sorted(p.name for p in tmp_path.iterdir()) == ["a.data", "a.db",
                                                                                         "export.db"]
    report = show(invoke, export, run_id)
    assert report["run"]["artifact_dir"] == f"artifact:artifacts/{run_id}"      # rows of the file's own table
    [name] = [p.name for p in (tmp_path / "a.data" / "artifacts" / run_id).iterdir()]
    kept = ok(invoke("--db", str(export), "artifact", f"artifact:artifacts/{run_id}/{name}")).stdout
    assert kept == (tmp_path / "a.data" / "artifacts" / run_id / name).read_text()

    refused(invoke("--db", str(a), "export", run_id, "-o", str(export)), "already exists; nothing was written")
    refused(invoke("--db", str(a), "export", "r-nope", "-o", str(tmp_path / "x.db")), "no run has an id")
    assert not (tmp_path / "x.db").exists()
    other = started(invoke, a, "hello")
    ok(invoke("--db", str(a), "export", other, "-o", str(export), "--force"))
    assert [r["id"] for r in json.loads(ok(invoke("--db", str(export), "ls", "--json")).stdout)] == [other]
