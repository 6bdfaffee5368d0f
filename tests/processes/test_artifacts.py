"""Artifacts (large results, reports) are read by every machine: a server store keeps them in its `artifacts` table,
or as files in a folder every machine shares (`--data DIR`); a SQLite store beside its file, as before. Workers
and commands on "another machine" are processes with another XDG_DATA_HOME, so another per-machine data folder."""

import json
import resource
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from disks import read_only, writable
from helpers import (
    at_once,
    database_at_version,
    on_sqlite,
    registry_of,
    start_and_work,
    until,
    work,
)
from old_schemas import pg_v9

from tui_agent import Agent
from tui_agent.operate import start
from tui_agent.runtime.results import ARTIFACT_THRESHOLD
from tui_agent.runtime.worker import execute
from tui_agent.store import artifacts, open_store
from tui_agent.store.base import reopening
from tui_agent.store.journal import journal_for
from tui_agent.store.runs import claim_run, get_run
from tui_agent.store.schema import SCHEMA_VERSION

BIG = ARTIFACT_THRESHOLD + 1000
REQUEST = json.dumps({"team": "ops", "date": "2024-05-01"})

# An agent for worker processes: a large step result, then a short durable sleep that ends the first worker's
# turn, so another worker (on "another machine") finishes the run by replaying the result.
BIG_AGENT = f'''
from tui_agent import Agent


def _blob(log):
    with open(log, "a") as f:
        f.write("blob\\n")
    return "x" * {BIG}


def run(ctx, request):
    blob = ctx.step("blob", _blob, request["log"])
    ctx.sleep("nap", 2)
    return {{"size": ctx.step("size", len, blob)}}


BIG = Agent(name="big", run=run)
'''


@pytest.fixture(autouse=True)
def no_shared_folder(monkeypatch):
    monkeypatch.delenv(artifacts.ENV, raising=False)


@pytest.fixture
def big_agent(tmp_path):
    path = tmp_path / "big_agents.py"
    path.write_text(textwrap.dedent(BIG_AGENT))
    return str(path)


def machine(tmp_path, name: str) -> dict:
    """The environment of a process on another machine: its own per-machine data folder."""
    return {"XDG_DATA_HOME": str(tmp_path / name)}


def rows(url) -> dict[str, bytes]:
    store = open_store(url, create=False)
    try:
        return {path: bytes(content) for path, content in store.conn.execute("SELECT path, content FROM artifacts")}
    finally:
        store.close()


def files_under(folder) -> list:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "artifacts" in p.parts)


def _run_on_two_machines(tui_agent, tmp_path, big_agent, env: dict) -> str:
    """The big agent's run started and worked on machine a until it sleeps, then finished by machine b."""
    log = tmp_path / "calls.log"
    started = tui_agent("--agents", big_agent, "start", "big", "--input", json.dumps({"log": str(log)}), env=env)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    first = tui_agent("--agents", big_agent, "worker", "--once", env={**env, **machine(tmp_path, "a")})
    assert first.returncode == 0, first.stderr
    assert json.loads(tui_agent("show", run_id, "--json", env=env).stdout)["run"]["status"] == "waiting"
    shown = {}

    def finished() -> bool:
        tui_agent("--agents", big_agent, "worker", "--once", env={**env, **machine(tmp_path, "b")})
        shown.update(json.loads(tui_agent("show", run_id, "--json", env=env).stdout))
        return shown["run"]["status"] != "waiting"

    until("machine b to finish the run", finished, deadline_s=30, every_s=0.5)
    assert shown["run"]["status"] == "succeeded", shown["run"]
    assert shown["run"]["result"] == {"size": BIG}
    assert log.read_text() == "blob\n", "the large result was replayed, not computed again"
    return run_id


@pytest.mark.postgres
def test_a_large_result_on_a_server_is_a_row_that_another_machine_replays(pg_url, tmp_path, tui_agent, big_agent):
    run_id = _run_on_two_machines(tui_agent, tmp_path, big_agent, {"TUI_AGENT_DB": pg_url})
    kept = rows(pg_url)
    assert list(kept) == [f"artifacts/{run_id}/g1-00000-f1-blob.json"]
    assert json.loads(kept[f"artifacts/{run_id}/g1-00000-f1-blob.json"]) == "x" * BIG
    assert files_under(tmp_path / "a") == files_under(tmp_path / "b") == [], "no machine keeps a file of it"
    entry = json.loads(tui_agent("show", run_id, "--json", env={"TUI_AGENT_DB": pg_url}).stdout)["journal"][0]
    assert entry["artifact"] == f"artifact:artifacts/{run_id}/g1-00000-f1-blob.json"


@pytest.mark.postgres
def test_data_keeps_a_servers_artifacts_as_files_in_the_shared_folder(pg_url, tmp_path, tui_agent, big_agent):
    shared = tmp_path / "shared"
    run_id = _run_on_two_machines(tui_agent, tmp_path, big_agent, {"TUI_AGENT_DB": pg_url, artifacts.ENV: str(shared)})
    blob = shared / "artifacts" / run_id / "g1-00000-f1-blob.json"
    assert json.loads(blob.read_text()) == "x" * BIG
    assert rows(pg_url) == {}
    assert files_under(tmp_path / "a") == files_under(tmp_path / "b") == []
    # --data on the command line, as the variable
    shown = tui_agent("--data", str(shared), "artifact", f"artifacts/{run_id}/g1-00000-f1-blob.json",
                      env={"TUI_AGENT_DB": pg_url, **machine(tmp_path, "c")})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == blob.read_text()


def _nightly_report(tui_agent, env: dict) -> dict:
    done = tui_agent("run", "nightly-report", "--input", REQUEST, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.postgres
def test_a_nightly_report_on_a_server_prints_on_another_machine(pg_url, tmp_path, tui_agent):
    env = {"TUI_AGENT_DB": pg_url}
    result = _nightly_report(tui_agent, {**env, **machine(tmp_path, "a")})
    assert result["report"].startswith("artifact:artifacts/r-") and result["report"].endswith(
        "/report-2024-05-01-ops.md")
    printed = tui_agent("artifact", result["report"], env={**env, **machine(tmp_path, "b")})
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.startswith("# Nightly report, ops, 2024-05-01")
    saved = tmp_path / "report.md"
    assert tui_agent("artifact", result["report"], "-o", str(saved), env={**env, **machine(tmp_path, "b")}
                     ).returncode == 0
    assert saved.read_text() == printed.stdout
    email = Path(result["email"])
    assert email.is_relative_to(tmp_path / "a") and "outbox" in email.parts, "the outbox is machine a's own"
    assert "| north | 41 | 12890 |" in email.read_text(), "the email's body is the report, read back from the table"
    assert files_under(tmp_path / "a") == [] and files_under(tmp_path / "b") == []
    missing = tui_agent("artifact", "artifact:artifacts/r-none/report.md", env=env)
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1, missing.stderr
    assert "no such artifact in the database" in missing.stderr


def test_sqlite_keeps_its_artifacts_beside_its_file_whatever_data_says(db_path, tmp_path, tui_agent):
    env = {"TUI_AGENT_DB": str(db_path), artifacts.ENV: str(tmp_path / "shared")}
    result = _nightly_report(tui_agent, env)
    report = db_path.parent / "runs.data" / "artifacts" / result["report"].split("/artifacts/")[1]
    assert result["report"] == str(report) and report.is_file()
    assert not (tmp_path / "shared").exists()
    assert rows(db_path) == {}
    printed = tui_agent("artifact", result["report"], env=env)
    assert printed.returncode == 0 and printed.stdout == report.read_text()


def test_a_large_result_is_kept_where_the_store_keeps_artifacts(store):
    def run(ctx, request):
        return {"size": len(ctx.step("blob", lambda: "y" * BIG))}

    registry = registry_of(Agent(name="blobby", run=run))
    run_id = start_and_work(store, registry, "blobby", {}).run_id
    relative = f"artifacts/{run_id}/g1-00000-f1-blob.json"
    assert (store.data_dir / relative).is_file() == on_sqlite(store)
    assert (relative in rows(reopening(store.path))) == (not on_sqlite(store))
    assert json.loads(artifacts.load(store, relative)) == "y" * BIG
    store.conn.execute("UPDATE runs SET status = 'queued', reason = 'resumed' WHERE id = ?", (run_id,))
    assert work(store, registry, run_id).result == {"size": BIG}
    assert get_run(store, run_id)["status"] == "succeeded"


def test_a_sqlite_file_at_version_9_is_migrated(db_path):
    database_at_version(db_path, 9)
    store = open_store(db_path)
    try:
        assert store.found_version == 9
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(
            SCHEMA_VERSION)
        assert store.conn.execute("SELECT count(*) FROM artifacts").fetchone()[0] == 0
    finally:
        store.close()


@pytest.mark.postgres
def test_a_postgres_database_at_version_9_is_migrated_once_by_racing_openers(pg_url):
    pg_v9(pg_url)

    def opener() -> int:
        store = open_store(pg_url, create=False)
        store.close()
        return store.found_version

    found = at_once(opener, 4)
    assert sorted(found)[0] == 9 and len(found) == 4   # each one found 9, or 10 when another had migrated it
    assert rows(pg_url) == {}
    again = open_store(pg_url, create=False)
    assert again.found_version == SCHEMA_VERSION
    again.close()


def test_a_worker_that_lost_its_run_cannot_write_over_the_new_owners_artifact(database):
    """A worker paused in a step past its lease finishes that step after another took the run over and recorded
    it: the late one's commit is refused by the fence, and its artifact, kept before that commit, lands beside the
    new owner's (the fence is in the name) instead of over the one the journal names."""
    release, entered = threading.Event(), threading.Event()

    def blob():
        if threading.current_thread().name == "late":
            entered.set()
            release.wait(30)
            return "a" * BIG
        return "b" * BIG

    def run(ctx, request):
        return {"first": ctx.step("blob", blob)[0]}

    registry = registry_of(Agent(name="blobby", run=run))
    second = open_store(database)
    claims, outcomes = [], []

    def late_worker():
        first = open_store(database)   # a connection of its own, as another worker process has
        try:
            claims.append(claim_run(first, run_id, "w-late", 0.5, time.time()))
            outcomes.append(execute(first, registry, claim=claims[0]))
        finally:
            first.close()

    try:
        run_id, _ = start(second, registry, agent_name="blobby", request={})
        thread = threading.Thread(target=late_worker, name="late")
        thread.start()
        assert entered.wait(10)
        time.sleep(1.0)   # the late worker's lease runs out (by the lease clock: the server's on PostgreSQL)
        taken = claim_run(second, run_id, "w-new", 60, time.time())
        assert taken is not None and taken.fence == claims[0].fence + 1
        assert execute(second, registry, claim=taken).status == "succeeded"
        release.set()
        thread.join(30)
        assert outcomes and outcomes[0].status != "succeeded", outcomes
        [row] = journal_for(second, run_id)
        assert row["fence"] == taken.fence
        assert json.loads(artifacts.load(second, row["artifact"])) == "b" * BIG
        assert get_run(second, run_id)["status"] == "succeeded"
    finally:
        release.set()
        second.close()


# -- `tui-agent artifact` reads the runs' artifacts and nothing else; -o never writes over a file unasked --------


def _keeping(keep: str, request, tmp_path) -> tuple[dict, Path | None]:
    """The environment of commands on a database that keeps its artifacts `keep`: beside a SQLite file, in a
    server's table, or as files in a folder `--data` names; and the folder that holds them (None: the table)."""
    if keep == "beside":
        return {}, tmp_path / "runs.data"
    env = {"TUI_AGENT_DB": request.getfixturevalue("pg_url")}
    return ({**env, artifacts.ENV: str(tmp_path / "shared")}, tmp_path / "shared") if keep == "shared" else (env, None)


@pytest.mark.parametrize("keep", ["beside", pytest.param("table", marks=pytest.mark.postgres),
                                  pytest.param("shared", marks=pytest.mark.postgres)])
def test_artifact_outside_the_runs_artifacts_is_refused_and_nothing_is_printed(keep, request, tmp_path, tui_agent):
    env, root = _keeping(keep, request, tmp_path)
    report = _nightly_report(tui_agent, env)["report"]
    run_id = report.split("artifacts/")[1].split("/")[0]
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET\n")
    up = "../" * 30   # past the root of the file system, then down to the file
    outside = {str(secret), "/etc/passwd", f"artifacts/{up}{str(secret).lstrip('/')}",
               f"artifact:artifacts/{up}{str(secret).lstrip('/')}", f"artifacts/{run_id}/../../secret.txt"}
    links = set()
    if root is not None:   # a file beside the artifacts' folder, and a link inside it to the secret
        (root / "notes.txt").write_text("SECRET\n")
        outside |= {str(root / "notes.txt"), "notes.txt"}
        (root / "artifacts" / run_id / "leak.md").symlink_to(secret)
        links = {str(root / "artifacts" / run_id / "leak.md"), f"artifacts/{run_id}/leak.md"}
    if keep == "beside":   # the database file itself
        outside |= {str(tmp_path / "runs.db"), "artifacts/../../runs.db", "artifact:artifacts/../../runs.db"}
    for name in sorted(outside | links):
        done = tui_agent("artifact", name, env=env)
        assert (done.returncode, done.stdout) == (2, ""), (name, done)
        [line] = done.stderr.splitlines()
        why = "a link that leads out of" if name in links else "not one of the runs' artifacts, which are"
        assert line.startswith(f"tui-agent: cannot read artifact {name} ({why} "), line
    printed = tui_agent("artifact", report, env=env)
    assert printed.returncode == 0 and printed.stdout.startswith("# Nightly report, ops, 2024-05-01"), printed
    # the path the database a copy was made from printed (as a copied run's journal holds it): the copy's own
    copied = tui_agent("artifact", f"/elsewhere/runs.data/artifacts/{report.split('artifacts/', 1)[1]}", env=env)
    assert (copied.returncode, copied.stdout) == (0, printed.stdout), copied


@pytest.fixture
def blob(db_path) -> tuple[str, bytes]:
    """A run's large result in a SQLite store's artifacts: its relative path and its bytes."""
    store = open_store(db_path)
    try:
        registry = registry_of(Agent(name="blobby", run=lambda ctx, _: {"n": len(ctx.step("blob", lambda: "z" * BIG))}))
        run_id = start_and_work(store, registry, "blobby", {}).run_id
        relative = f"artifacts/{run_id}/g1-00000-f1-blob.json"
        return relative, artifacts.load(store, relative)
    finally:
        store.close()


def _saving(relative: str, output: Path | str, *args: str, file_size_limit: int | None = None):
    """`tui-agent artifact RELATIVE -o OUTPUT ARGS`, its files at most `file_size_limit` bytes (as a full disk)."""
    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run([sys.executable, "-m", "tui_agent", "artifact", relative, "-o", str(output), *args],
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=limited if file_size_limit is not None else None)


def test_artifact_o_into_a_missing_folder_is_one_line_exit_2(blob, tmp_path):
    missing = tmp_path / "no-such-folder" / "out.json"
    done = _saving(blob[0], missing)
    assert (done.returncode, done.stderr) == (2, f"tui-agent: -o {missing}: the folder {missing.parent} does not "
                                                 "exist; make it first (mkdir -p), or save somewhere else\n")
    assert not missing.parent.exists()


def test_artifact_o_onto_an_existing_file_needs_force_and_replaces_it_whole_or_not_at_all(blob, tmp_path):
    relative, content = blob
    saved = tmp_path / "saved" / "out.json"
    saved.parent.mkdir()
    assert _saving(relative, saved).returncode == 0 and saved.read_bytes() == content      # a new file
    saved.write_bytes(b"kept")
    done = _saving(relative, saved)
    assert (done.returncode, done.stderr) == (2, f"tui-agent: -o {saved} already exists; nothing was written; pass "
                                                 "--force to replace it\n")
    assert saved.read_bytes() == b"kept"
    # a write that fails halfway (a file size limit below the artifact's, as a disk that fills): the old file stays
    full = _saving(relative, saved, "--force", file_size_limit=len(content) - 100)
    assert full.returncode == 4 and full.stderr.startswith(f"tui-agent: the disk is full (or failing): {saved} "
                                                           "could not be written (File too large)"), full.stderr
    assert len(full.stderr.splitlines()) == 1
    assert saved.read_bytes() == b"kept" and sorted(p.name for p in saved.parent.iterdir()) == ["out.json"]
    assert _saving(relative, saved, "--force").returncode == 0 and saved.read_bytes() == content
    assert sorted(p.name for p in saved.parent.iterdir()) == ["out.json"]


def test_artifact_o_onto_a_full_device_or_into_a_read_only_folder_is_one_line_exit_4(blob, tmp_path):
    done = _saving(blob[0], "/dev/full")
    assert (done.returncode, done.stderr) == (4, "tui-agent: the disk is full (or failing): /dev/full could not be "
                                                 "written (No space left on device); nothing was written; free space "
                                                 "and run the command again\n")
    folder = tmp_path / "read-only"
    folder.mkdir()
    read_only(folder)
    try:
        done = _saving(blob[0], folder / "out.json")
        assert done.returncode == 4 and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith(f"tui-agent: -o {folder / 'out.json'}: ") and done.stderr.endswith(
            "; nothing was written; save somewhere this user may write\n"), done.stderr
        assert list(folder.iterdir()) == []
    finally:
        writable(folder)
