import compileall
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_messages import DUMMY_KEY, FakeMessages
from helpers import FIXTURES, ROOT

from tui_agent.cli import cli
from tui_agent.demo import build
from tui_agent.runtime.clock import CLOCK
from tui_agent.runtime.registry import load_registry
from tui_agent.store import open_store
from tui_agent.store.copying import copy_database
from tui_agent.store.host import process_start

# the PostgreSQL fixtures pg_server, pg_url and pg_store_url; small_disk (disks holds the storage faults' helpers)
pytest_plugins = ["pg_server", "disks"]
# worker_pilot's asserts were a test module's: rewritten as before, pytest still explains one that fails
pytest.register_assert_rewrite("worker_pilot")


def pytest_configure(config):
    """Compile the package and the fixtures' agents once: a machine with PYTHONDONTWRITEBYTECODE set (ours are)
    never writes the bytecode it compiles, so each of the suite's many `tui-agent` processes would compile ~80
    modules again (0.2 s of its 0.7 s start). Bytecode already there is read whatever that variable says."""
    for folder in (ROOT / "tui_agent", FIXTURES):
        compileall.compile_dir(folder, quiet=1)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No test may touch the user's own database, config file or TUI state, or inherit a crash point, a clock or
    a tracing collector (the subprocesses a test starts inherit the same)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("TUI_AGENT_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))
    for name in ("TUI_AGENT_CRASH_AT", "TUI_AGENT_NOW", "TUI_AGENT_AGENTS", "TUI_AGENT_DURABILITY", "TUI_AGENT_DATA",
                 "TUI_AGENT_LOG"):
        monkeypatch.delenv(name, raising=False)
    for name in [name for name in os.environ if name.startswith("OTEL_") or name == "TUI_AGENT_TRACES"]:
        monkeypatch.delenv(name)
    monkeypatch.syspath_prepend(str(FIXTURES))


DEAD_ENDPOINT = "http://127.0.0.1:9"  # the discard port: nothing listens there


@pytest.fixture(autouse=True)
def no_anthropic_key(monkeypatch):
    """No test may spend a key: the Anthropic key is unset and the endpoint is a dead local one, so even a
    key leaked into a subprocess never reaches the real API. The `fake` fixture sets both for Claude."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", DEAD_ENDPOINT)


@pytest.fixture
def fake(monkeypatch):
    """The fake Messages API on 127.0.0.1 as "Claude", with a dummy key; a test may raise `max_requests`."""
    server = FakeMessages()
    server.serve()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DUMMY_KEY)
    yield server
    server.close()
    assert len(server.requests) <= server.max_requests  # bounded: no test loops on the fake


@pytest.fixture
def clock():
    """The process's clock, for a test to move (`set`, `advance`, `freeze`); put back as it was afterwards."""
    with CLOCK.restored():
        yield CLOCK


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "runs.db"


def _no_postgres_variant(item) -> bool:
    """A test marked sqlite_only is about SQLite's own file (its WAL, its pragmas): no PostgreSQL variant. A test
    marked postgres_case(**params) runs on PostgreSQL only in the case with those parameters: its other cases take
    the same path through the store (the same lock, the same transaction) and differ elsewhere, on SQLite too."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "postgres" not in (callspec.params.get("database"), callspec.params.get("demo")):
        return False
    if item.get_closest_marker("sqlite_only") is not None:
        return True
    case = item.get_closest_marker("postgres_case")
    return case is not None and any(callspec.params.get(name) != value for name, value in case.kwargs.items())


def pytest_collection_modifyitems(config, items):
    dropped = [item for item in items if _no_postgres_variant(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in set(dropped)]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request, db_path, monkeypatch) -> Path | str:
    """Where a test's database is, once on each store: a SQLite file at `db_path`, and a fresh PostgreSQL
    database's URL, its schema created (`pg_store_url`). TUI_AGENT_DB names it, so a command or a process the test starts opens the same."""
    if request.param == "sqlite":
        return db_path
    url = request.getfixturevalue("pg_store_url")
    monkeypatch.setenv("TUI_AGENT_DB", url)
    return url


@pytest.fixture
def store(database):
    """The store every engine test runs on, once on each database (see `database`)."""
    s = open_store(database)
    yield s
    s.close()


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The demo database (tui_agent.demo), built once per session by executing its runs (one with a
    crash): its folder and the run ids by role. Tests use a copy: the `demo` fixture."""
    folder = tmp_path_factory.mktemp("demo-template")
    roles = build(folder / "demo.db", load_registry())
    return folder, roles


@pytest.fixture(scope="session")
def pg_demo_template(demo_template, pg_server, tmp_path_factory) -> str:
    """The demo copied into a PostgreSQL database by `tui-agent copy`'s own code (copy_database), once per test
    process: the name of the template each test's PostgreSQL demo is cloned from (CREATE DATABASE ... TEMPLATE)."""
    # not imported at the top: pytest_plugins loads pg_server (with assert rewriting)
    from pg_cluster import create_database

    folder, _ = demo_template
    work = tmp_path_factory.mktemp("demo-postgres")
    shutil.copytree(folder, work / "demo")
    name = create_database(pg_server)
    with pytest.MonkeyPatch.context() as env:   # session scope: not yet inside a test's `isolated`
        env.setenv("XDG_DATA_HOME", str(work / "xdg"))
        env.delenv("TUI_AGENT_DATA", raising=False)
        source, target = open_store(work / "demo" / "demo.db", create=False), open_store(f"{pg_server}/{name}")
        try:
            copy_database(source, target)
        finally:
            source.close(), target.close()
    return name   # a template: nobody is connected to it


@pytest.fixture
def demo(request, demo_template, tmp_path, monkeypatch) -> Iterator[tuple[Path | str, dict[str, str]]]:
    """A private copy of the demo database (with its data folder) for one test: (where, run ids by role). In a
    `demo_on_both` module also a PostgreSQL database of its own, cloned from the demo `tui-agent copy`'s own code
    copied into PostgreSQL once per test process (`pg_demo_template`), whose URL TUI_AGENT_DB then names."""
    folder, roles = demo_template
    shutil.copytree(folder, tmp_path / "demo")
    path = tmp_path / "demo" / "demo.db"
    if getattr(request, "param", "sqlite") == "sqlite":
        yield path, roles
        return
    from pg_cluster import create_database, drop_database

    server = request.getfixturevalue("pg_server")
    name = create_database(server, template=request.getfixturevalue("pg_demo_template"))
    url = f"{server}/{name}"
    try:
        open_store(url).close()   # as the copy left it: the database's own data folder made
        monkeypatch.setenv("TUI_AGENT_DB", url)
        yield url, roles
    finally:
        drop_database(server, name)


@pytest.fixture
def invoke():
    """Run the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    runner = CliRunner()

    def _invoke(*args: str, **kwargs):
        return runner.invoke(cli, list(args), catch_exceptions=False, **kwargs)

    return _invoke


@pytest.fixture
def tui_agent():
    """Run the CLI in a real subprocess (needed for crash points and TUI_AGENT_NOW)."""

    def _run(*args: str, env: dict | None = None, timeout: float = 60,
             input: str | None = None) -> subprocess.CompletedProcess:   # input: its stdin (else none to read)
        full_env = {**os.environ, **(env or {})}
        return subprocess.run([sys.executable, "-m", "tui_agent", *args], capture_output=True, text=True,
                              env=full_env, timeout=timeout, cwd=ROOT, input=input,
                              stdin=subprocess.DEVNULL if input is None else None)

    return _run


@pytest.fixture
def spawn(tmp_path):
    """Start `tui-agent ARGS` as a long-lived process (output to files); every one is killed at teardown. With
    `own_group`, it leads a process group of its own, as a command started from a shell does (else it shares the
    test's), and the whole group is killed at teardown."""
    procs = []

    def _spawn(*args: str, env: dict | None = None, label: str, own_group: bool = False) -> subprocess.Popen:
        out = open(tmp_path / f"{label}.out", "w")
        err = open(tmp_path / f"{label}.err", "w")
        proc = subprocess.Popen([sys.executable, "-m", "tui_agent", *args], cwd=ROOT, stdout=out, stderr=err,
                                env={**os.environ, **(env or {})}, start_new_session=own_group)
        out.close()
        err.close()
        proc.label, proc.own_group, proc.started = label, own_group, process_start(proc.pid)
        procs.append(proc)
        return proc

    try:
        yield _spawn
    finally:
        for proc in procs:
            if proc.own_group and process_start(proc.pid) in (None, proc.started):   # its pid is not reused
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)   # what its steps started too
            if proc.poll() is None:
                proc.kill()  # SIGKILL works on a stopped (T) process too
            proc.wait()
