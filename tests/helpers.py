"""Small drivers shared by the tests: in-process work, CLI output, a worker process paused at a fault point,
and the TUI under Pilot (`tui`, keys, the Runs screen)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from click.testing import Result

from tui_agent.app import TuiAgentApp
from tui_agent.operate import start
from tui_agent.report import beside, run_view, timeline_page
from tui_agent.runtime import faults
from tui_agent.runtime.clock import now
from tui_agent.runtime.faults import SimulatedCrash
from tui_agent.runtime.registry import Registry
from tui_agent.runtime.worker import execute
from tui_agent.screens.run import RunScreen
from tui_agent.screens.runs import RunsScreen
from tui_agent.store import open_store, schema
from tui_agent.store.runs import claim_run, db_clock, get_run
from tui_agent.widgets.timeline import TimelineItem, timeline_items

ROOT = Path(__file__).resolve().parent.parent   # the checkout
FIXTURES = ROOT / "tests" / "fixtures"          # agents and programs the tests load (on sys.path, PYTHONPATH)


def console_script() -> str:
    """The `tui-agent` that pip installed next to this Python (the venv's bin), else the one on PATH: what a
    user runs, rather than `python -m tui_agent`."""
    beside_python = Path(sys.executable).parent / "tui-agent"
    found = str(beside_python) if beside_python.exists() else shutil.which("tui-agent")
    assert found, "the tui-agent console script is not installed"
    return found


def later(seconds: float) -> str:
    """An ISO instant `seconds` from now, for TUI_AGENT_NOW: a worker whose clock is past the leases."""
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def ok(done: subprocess.CompletedProcess, code: int = 0) -> subprocess.CompletedProcess:
    """A finished command, asserting its exit code (and showing its output when it is not the one expected)."""
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return done


def stdout_ok(done: Result | subprocess.CompletedProcess) -> str:
    """The stdout of a command that exited 0, run in-process (click's Result) or as a process."""
    code = done.exit_code if isinstance(done, Result) else done.returncode
    assert code == 0, done.stderr + done.stdout
    return done.stdout


def one_line_error(done: Result | subprocess.CompletedProcess) -> str:
    """The one line a refused command wrote: asserts exit 2, that line alone on stderr as `tui-agent: ...`, no
    traceback and nothing on stdout."""
    code = done.exit_code if isinstance(done, Result) else done.returncode
    assert code == 2, (code, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tui-agent: "), done.stderr
    assert "Traceback" not in done.stderr and not done.stdout, (done.stdout, done.stderr)
    return lines[0]


def ran_steps(log: Path) -> Counter:
    """How many times each step's function ran, from the log the counting agents append its name to."""
    return Counter(log.read_text().split()) if log.exists() else Counter()


def show_json(tui_agent, run_id: str, *prefix_args: str) -> dict:
    """`tui-agent [PREFIX_ARGS] show RUN_ID --json` in a subprocess (options before the command, such as
    `--db PATH`), asserting it exits 0; the parsed report."""
    return json.loads(ok(tui_agent(*prefix_args, "show", run_id, "--json")).stdout)


def parked_message(tui_agent, run_id: str) -> str:
    """The line a run parked with (reason environment), asserting it is parked so."""
    report = show_json(tui_agent, run_id)
    message = report["events"][-1]["message"]
    assert (report["run"]["status"], report["run"]["reason"]) == ("parked", "environment"), message
    return message


def registry_of(*agents) -> Registry:
    registry = Registry()
    for agent in agents:
        registry.add(agent, "test")
    return registry


def database_at_version(db_path: Path, version: int, *statements: str) -> None:
    """A database as an older tui-agent left it: its first `version` migrations, then `statements`, in one
    transaction; opening it migrates the rest."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN")
    db = sqlite_utils.Database(conn)
    for migrate in schema.MIGRATIONS[:version]:
        migrate(db)
    db["meta"].insert({"key": "schema_version", "value": str(version)})
    for statement in statements:
        conn.execute(statement)
    conn.execute("COMMIT")
    conn.close()


def start_and_work(store, registry, agent_name, request, worker="w-test", lease_s=60.0):
    run_id, _ = start(store, registry, agent_name=agent_name, request=request)
    return work(store, registry, run_id, worker, lease_s)


def work(store, registry, run_id, worker="w-test", lease_s=60.0):
    claim = claim_run(store, run_id, worker, lease_s, now())
    assert claim is not None, f"{run_id} was not claimable"
    return execute(store, registry, claim=claim)


def crashed_into_doubt(store, database, registry, clock, run_id: str):
    """The run's send attempted and its worker gone before it recorded what came of it; the next worker finds
    nothing that settles the key (no lookup, or its window past): the run waits for a person. Returns the store
    opened again."""
    faults.arm("after-attempted")
    with pytest.raises(SimulatedCrash):
        work(store, registry, run_id, lease_s=1)
    faults.disarm()
    store = open_store(database)
    clock.advance(2)
    taken_over(database, run_id)        # on PostgreSQL, the server's clock judges the lease: waited out
    execute(store, registry, claim=claim_run(store, run_id, "w-2", 60, now()))
    assert (get_run(store, run_id)["status"], get_run(store, run_id)["reason"]) == ("waiting", "reconcile")
    return store


SIZE = (120, 40)  # the terminal the TUI tests use unless they test a small one


@asynccontextmanager
async def tui(db: Path, size: tuple[int, int] = SIZE, *, toasts: list[str] | None = None,
              cleanup: Callable[[TuiAgentApp], None] | None = None,
              notifications: bool = False) -> AsyncIterator[tuple[TuiAgentApp, object]]:
    """The app over `db`, headless and without its change poll (a test that wants a re-read calls
    `app.poll()` or posts DataChanged): yields (app, pilot). `toasts`, when given, collects every toast
    from before the app starts; `cleanup(app)` runs after the app has exited, whatever happened;
    `notifications` shows the toasts on the screen (Textual's tests leave them off)."""
    app = TuiAgentApp(db, poll_s=None)
    if toasts is not None:
        recorded_toasts(app, into=toasts)
    try:
        async with app.run_test(size=size, notifications=notifications) as pilot:
            await settled(pilot)
            yield app, pilot
    finally:
        if cleanup is not None:
            cleanup(app)


async def settled(pilot, deadline_s: float = 20) -> None:
    """Let the app settle: every read and action it handed to its reader and actor threads answered and painted
    (what a re-read after DataChanged, a poll or a decision needs before a test looks)."""
    session = getattr(pilot.app, "session", None)      # the Simulator's own app has none: nothing runs off it
    if session is None:
        await pilot.pause()
        return
    deadline = time.monotonic() + deadline_s
    while True:
        await pilot.pause()
        if not session.busy():
            await pilot.pause()
            if not session.busy():
                return
        assert time.monotonic() < deadline, "the app's reader or actor did not answer"
        await pilot.pause(0.01)


async def polled(pilot) -> None:
    """The app's change poll, as its timer would run it, and what it made the screen read."""
    pilot.app.poll()
    await settled(pilot)


async def changed(pilot) -> None:
    """What an action does after it wrote (the screen shown re-reads now), and the re-read painted."""
    pilot.app.session.changed()
    await settled(pilot)


async def open_run(app: TuiAgentApp, pilot, run_id: str) -> RunScreen:
    """Push one run's screen, as Enter on the Runs table would, and let it paint."""
    await settled(pilot)
    screen = RunScreen(run_id)
    app.push_screen(screen)
    await settled(pilot)
    return screen


@asynccontextmanager
async def run_screen(db: Path, run_id: str, size: tuple[int, int] = SIZE):
    """The app on one run's screen: (app, pilot)."""
    async with tui(db, size=size) as (app, pilot):
        await open_run(app, pilot, run_id)
        yield app, pilot


@asynccontextmanager
async def selected(demo: tuple[Path, dict], role: str, size: tuple[int, int] = SIZE, **kwargs):
    """The demo app with the run that plays `role` selected on the Runs screen: (app, pilot, run_id)."""
    db, roles = demo
    async with tui(db, size=size, **kwargs) as (app, pilot):
        await select(pilot, roles[role])
        yield app, pilot, roles[role]


@asynccontextmanager
async def opened(demo: tuple[Path, dict], role: str, size: tuple[int, int] = SIZE):
    """The demo app on the screen of the run that plays `role`: (app, pilot, run_id)."""
    db, roles = demo
    async with run_screen(db, roles[role], size=size) as (app, pilot):
        yield app, pilot, roles[role]


def screen_of(app) -> RunsScreen:
    """The Runs screen, asserting it is the one shown."""
    assert isinstance(app.screen, RunsScreen), app.screen
    return app.screen


def shown_ids(app) -> list[str]:
    """The run ids in the Runs table, top to bottom."""
    table = screen_of(app).query_one("DataTable")
    return [key.value for key in table.rows]


async def select(pilot, run_id: str) -> None:
    """Move the Runs table's cursor to `run_id` with the keys a person would use."""
    screen = screen_of(pilot.app)
    for _ in range(len(shown_ids(pilot.app)) * 2):
        if screen.selected_id() == run_id:
            break
        index = shown_ids(pilot.app).index(run_id)
        await pilot.press("j" if index > screen.query_one("DataTable").cursor_row else "k")
    assert screen.selected_id() == run_id
    await settled(pilot)


def rendered(app) -> list[str]:
    """What the current screen sends the terminal, line by line, as text: the characters of every segment its
    compositor renders (Textual's own colours and cursor moves are styles and controls, not characters)."""
    return ["".join(segment.text for segment in line) for line in app.screen._compositor.render_strips()]


def strip(app) -> str:
    """The Runs screen's situation strip, as text."""
    return str(screen_of(app).query_one("#situation").content)


async def key(pilot, name: str) -> None:
    """Press a key in a Pilot test and let the app settle (its reads and actions answered)."""
    await pilot.press(name)
    await settled(pilot)


async def click(pilot, selector: str) -> None:
    await pilot.click(selector)
    await settled(pilot)


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process: `T` when it is stopped."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@contextmanager
def paused_worker(*args: str, pause_at: str) -> Iterator[subprocess.Popen]:
    """`tui-agent ARGS worker --once ...` run until it stops itself at `pause_at` (TUI_AGENT_PAUSE_AT);
    the caller continues it with SIGCONT. Killed on the way out if it is still alive."""
    worker = subprocess.Popen([sys.executable, "-m", "tui_agent", *args], cwd=ROOT, text=True,
                              env={**os.environ, "TUI_AGENT_PAUSE_AT": pause_at},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while process_state(worker.pid) != "T" and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert process_state(worker.pid) == "T", "the worker did not stop itself"
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def until(what: str, check, deadline_s: float = 20, every_s: float = 0.02, why=lambda: ""):
    """Poll `check` until it returns something truthy; fail naming `what` (and `why()`) at the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what} {why()}"
        time.sleep(every_s)


def recorded_toasts(app, into: list[str] | None = None) -> list[str]:
    """Every toast the app shows from now on, in order, appended to `into` (or a new list); the app still
    shows them."""
    toasts = [] if into is None else into
    notify = app.notify
    app.notify = lambda message, *args, **kwargs: (toasts.append(message), notify(message, *args, **kwargs))
    return toasts


def timeline_rows(store, run_id: str) -> tuple[dict, list[dict]]:
    """A small run's view and every row of its timeline (one page)."""
    view = run_view(store, run_id)
    return view, timeline_page(store, view["run"], limit=10_000)


def timeline_of(store, run_id: str, rows: list[dict] | None = None) -> list[TimelineItem]:
    """A small run's whole timeline as the run screen builds it (`rows`: its timeline_rows, changed by a test)."""
    view, read = timeline_rows(store, run_id)
    return timeline_items(view, read if rows is None else rows, beside(store, view["run"], 0, None))


def on_sqlite(store) -> bool:
    """Whether the store is SQLite's (a test of something only SQLite's file has: its transactions' shape, its
    query plans)."""
    return isinstance(store.path, Path)


def dump(db) -> list[str]:
    """Everything the database holds, read without writing (a SQLite file's bytes may move with a checkpoint;
    a PostgreSQL database's rows are listed table by table, sorted, as iterdump writes them)."""
    if isinstance(db, Path):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return list(conn.iterdump())
        finally:
            conn.close()
    store = open_store(db, create=False)
    try:
        tables = [name for (name,) in store.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1")]
        return [f'INSERT INTO "{table}" VALUES{tuple(row)!r}' for table in tables   # iterdump's shape
                for row in sorted(store.conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)]
    finally:
        store.close()


def portable(value, data_dir: str):
    """A report with where the database keeps its artifacts (its own data folder, or artifact: for a table's rows)
    written as <data>/: what legitimately differs between two copies of a run."""
    text = json.dumps(value, sort_keys=True).replace('"artifact:', '"<data>/')
    return json.loads(text.replace(json.dumps(data_dir)[1:-1], "<data>"))


def data_dir(database: Path | str) -> Path:
    """The data folder of the database at `database` (a SQLite file, or a PostgreSQL URL), as its store names it:
    where agents keep their outbox, fetch log and keys (beside the file on SQLite, per machine under
    XDG_DATA_HOME on PostgreSQL)."""
    store = open_store(database)
    try:
        return store.data_dir
    finally:
        store.close()


def short_lease(database: Path | str, sqlite_s: float, postgres_s: float = 1) -> str:
    """The `--lease` of a worker a test kills or pauses: `sqlite_s` on SQLite, where the next worker's clock is moved
    past it (`taken_over`); a short one on PostgreSQL, where the server's clock judges it and the test waits it out."""
    return f"{sqlite_s if isinstance(database, Path) else postgres_s:g}"


def taken_over(database: Path | str, run_id: str, ahead_s: float = 10) -> dict[str, str]:
    """The environment of a worker that is to take `run_id` over from a dead or paused one, once its lease is over.
    SQLite's lease clock is the process's: a clock `ahead_s` ahead. PostgreSQL's is the server's, which no process
    moves: the process's own clock, returned once the lease has really ended by the server's clock (waited for here;
    a test keeps it short with `short_lease`)."""
    if isinstance(database, Path):
        return {"TUI_AGENT_NOW": later(ahead_s)}
    store = open_store(database, create=False)
    try:
        until(f"the lease of {run_id} to end by the server's clock",
              lambda: (get_run(store, run_id)["lease_expires_at"] or 0) <= db_clock(store.conn), deadline_s=30,
              every_s=0.05, why=lambda: get_run(store, run_id))
    finally:
        store.close()
    return {}


def at_once(work: Callable[[], Any], count: int) -> list[Any]:
    """`work()` in `count` threads released together (a barrier), as racing processes open a database; returns
    what each returned, and fails the test with what any of them raised."""
    barrier = threading.Barrier(count)
    results: list[Any] = []
    errors: list[BaseException] = []

    def one() -> None:
        barrier.wait()
        try:
            results.append(work())
        except Exception as e:   # reported below, in the test's own thread
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [], errors
    return results


class Recording:
    """A store connection that notes each statement it runs (and runs it)."""

    def __init__(self, conn):
        self.conn, self.statements = conn, []

    def execute(self, sql, params=()):
        self.statements.append((sql, params))
        return self.conn.execute(sql, params)



def slowed(store, delay_s: float = 0.3) -> None:
    """Each statement `store` runs from now on takes `delay_s` longer, in the thread that runs it: a database
    far away (SQLite's trace callback, which runs before each statement)."""
    store.conn.set_trace_callback(lambda statement: time.sleep(delay_s))
