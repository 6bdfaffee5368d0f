"""Hostile input at the door, and hostile values already in the store (docs/reliability.md, "When input or the
environment is bad"): text that is not Unicode (a lone surrogate, as JavaScript's JSON.stringify writes for a
string cut in half, or a byte of the command line that is not UTF-8), JSON nested past Python's recursion limit,
integers past its 4,300-digit limit, and numbers in options past what a column holds. At the door each is one line
and exit 2 with the database unchanged; a value of that class already stored (an older version's, another
program's) fails its one run, or disables its one schedule, and the worker goes on."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import click
import pytest
from helpers import dump, ok, show_json, until, work

from tui_agent import operate
from tui_agent.cli import cli
from tui_agent.cli_types import StoredText, Verbatim
from tui_agent.errors import UserError
from tui_agent.runtime.registry import load_registry
from tui_agent.store import open_store
from tui_agent.store.runs import get_run
from tui_agent.strict_json import MAX_DEPTH, MAX_DIGITS, parse_json

SURROGATE = '{"x": "\\udfff"}'                          # the escape a broken JavaScript string is written as
DEEP = "[" * 1500 + "]" * 1500                          # past Python's recursion limit
HUGE = '{"n": ' + "9" * (MAX_DIGITS + 1) + "}"          # past Python's integer-digits limit
NOT_UTF8 = "\udcff"    # a str with this character is passed to the process as the byte 0xff (os.fsencode)
TOO_BIG = "9" * 25     # no column holds it
JSON_SAID = {SURROGATE: "a lone surrogate (\\udfff) at $.x", DEEP: "nested deeper than 200 levels",
             HUGE: "an integer of more than 4,300 digits"}
JSON_KIND = {SURROGATE: "surrogate", DEEP: "deep", HUGE: "huge"}
RUN, WAITING = "{run}", "{waiting}"   # the seeded runs' ids (one finished, one waiting for approval), put in


def _one_line(done: subprocess.CompletedProcess, code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tui-agent: "), done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


def _json_cases():
    for text in (SURROGATE, DEEP, HUGE):
        kind, said = JSON_KIND[text], JSON_SAID[text]
        yield pytest.param(["start", "hello", "--input", text], said, None, kind == "surrogate", id=f"start-{kind}")
        yield pytest.param(["run", "hello", "--input", text], said, None, kind == "deep", id=f"run-{kind}")
        yield pytest.param(["schedule", "add", "p", "--agent", "hello", "--cron", "0 2 * * *", "--input", text],
                           said, None, kind == "huge", id=f"schedule-add-{kind}")
        yield pytest.param(["fork", RUN, "--edit", "0", "--result", text], said, None, False, id=f"fork-result-{kind}")
        yield pytest.param(["fork", RUN, "--edit", "0"], said, text, kind == "surrogate", id=f"fork-editor-{kind}")
        yield pytest.param(["reconcile", RUN, "send", "--happened", "--result", text], said, None, False,
                           id=f"reconcile-result-{kind}")


CASES = [
    *_json_cases(),
    # bytes of the command line that are not UTF-8, in every kind of text that is stored or looked up
    pytest.param(["start", "hello", "--input", '{"x": "' + NOT_UTF8 + '"}'], "a byte that is not UTF-8 (0xff",
                 None, False, id="input-byte"),
    pytest.param(["start", "hello", "--key", f"k{NOT_UTF8}"], "'--key': it holds a byte that is not UTF-8 (0xff",
                 None, False, id="key-byte"),
    pytest.param(["start", f"hello{NOT_UTF8}"], "'AGENT': it holds a byte", None, False, id="agent-byte"),
    pytest.param(["start", "hello", "--model", f"scripted:{NOT_UTF8}.json"], "'--model': it holds a byte", None,
                 False, id="model-path-byte"),
    pytest.param(["approve", WAITING, "--note", f"ok{NOT_UTF8}"], "'--note': it holds a byte that is not UTF-8",
                 None, True, id="note-byte"),
    pytest.param(["cancel", WAITING, "--note", NOT_UTF8], "'--note': it holds a byte", None, False,
                 id="cancel-note-byte"),
    pytest.param(["cancel", f"r-{NOT_UTF8}"], "'RUN': it holds a byte that is not UTF-8 (0xff at character 3)",
                 None, False, id="run-id-byte"),
    pytest.param(["show", f"r-{NOT_UTF8}"], "'RUN': it holds a byte", None, False, id="show-byte"),
    pytest.param(["diff", RUN, f"r-{NOT_UTF8}"], "'B': it holds a byte", None, False, id="diff-byte"),
    pytest.param(["schedule", "add", f"p{NOT_UTF8}", "--agent", "hello", "--cron", "0 2 * * *"], "'NAME': it holds",
                 None, False, id="schedule-name-byte"),
    pytest.param(["schedule", "add", "p", "--agent", "hello", "--cron", "0 2 * * *", "--tz", f"UTC{NOT_UTF8}"],
                 "'--tz': it holds a byte", None, False, id="schedule-tz-byte"),
    pytest.param(["worker", "--once", "--name", f"w{NOT_UTF8}"], "'--name': it holds a byte", None, False,
                 id="worker-name-byte"),
    # numbers in options past what a column holds, or not finite
    pytest.param(["watch", "--after", TOO_BIG], f"'--after': {TOO_BIG} is not in the range 0<=x<=", None, True,
                 id="watch-after"),
    pytest.param(["fork", RUN, "--edit", TOO_BIG], "'--edit': 9999", None, False, id="fork-edit-n"),
    pytest.param(["fork", RUN, "--edit", "9" * 5000], "'--edit': a value of 5,000 characters is not in the range",
                 None, False, id="fork-edit-5000-digits"),
    pytest.param(["fork", RUN, "--from-step", TOO_BIG], "'--from-step': 9999", None, False, id="fork-from-step"),
    pytest.param(["worker", "--once", "--concurrency", TOO_BIG], "'--concurrency': 9999", None, False,
                 id="concurrency"),
    pytest.param(["replay", "--agent", "hello", "--last", TOO_BIG], "'--last': 9999", None, False, id="replay-last"),
    pytest.param(["worker", "--once", "--lease", "nan"], "'--lease': nan is not in the range", None, False,
                 id="lease-nan"),
    pytest.param(["schedule", "add", "p", "--agent", "hello", "--cron", "0 2 * * *", "--grace", "1e400"],
                 "'--grace': inf is not in the range", None, False, id="schedule-grace-inf"),
]


def _seed(database) -> dict[str, str]:
    """A finished hello run and a nightly-report run waiting for its approval, the database left closed: the
    placeholders of their ids, with the ids."""
    store, registry = open_store(database), load_registry()
    try:
        finished, _ = operate.start(store, registry, agent_name="hello", request={})
        work(store, registry, finished)
        waiting, _ = operate.start(store, registry, agent_name="nightly-report", request={"approve": True})
        assert work(store, registry, waiting).reason == "approval"
    finally:
        store.close()
    return {RUN: finished, WAITING: waiting}


@pytest.fixture(scope="module")
def sqlite_template(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The seeded SQLite database, made once: its folder and its runs' ids (a case takes a copy)."""
    folder = tmp_path_factory.mktemp("hostile-template")
    with pytest.MonkeyPatch.context() as env:   # module scope: not yet inside a test's `isolated`
        env.setenv("XDG_DATA_HOME", str(folder / "xdg"))
        return folder, _seed(folder / "runs.db")


def _seeded(database, request) -> dict[str, str]:
    if not isinstance(database, Path):
        return _seed(database)
    folder, ids = request.getfixturevalue("sqlite_template")
    shutil.copy(folder / "runs.db", database)
    shutil.copytree(folder / "runs.data", database.with_name("runs.data"))
    return ids


def _state(database) -> object:
    """The whole database: a SQLite file byte for byte (with its -wal, if any), a server's rows table by table."""
    if isinstance(database, Path):
        wal = database.with_name(database.name + "-wal")
        return database.read_bytes(), wal.read_bytes() if wal.exists() else None
    return dump(database)


@pytest.mark.postgres_case(on_both=True)
@pytest.mark.parametrize(("args", "said", "edited", "on_both"), CASES)
def test_hostile_input_is_one_line_exit_2_and_changes_nothing(tui_agent, database, tmp_path, request, args, said,
                                                             edited, on_both):
    ids = _seeded(database, request)
    env = {"VISUAL": "", "EDITOR": "false"}
    if edited is not None:   # the editor saves the hostile text in place of the recorded result
        source = tmp_path / "edited.json"
        source.write_text(edited)
        env["EDITOR"] = f"cp {shlex.quote(str(source))}"
    before = _state(database)
    line = _one_line(tui_agent(*[ids.get(a, a) for a in args], env=env), 2)
    assert said in line, line
    assert _state(database) == before
    if args[:2] == ["schedule", "add"]:
        assert ok(tui_agent("schedule", "ls", "--json")).stdout.strip() == "[]", "no schedule was added"


def test_json_is_refused_past_the_documented_limits_and_taken_up_to_them():
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "--input") is not None
    assert parse_json('{"n": -' + "9" * MAX_DIGITS + "}", "--input")["n"] < 0
    assert parse_json('{"face": "\\ud83d\\ude00"}', "--input") == {"face": "\U0001F600"}, "a pair is a character"
    for text, said in ((f"{'[' * (MAX_DEPTH + 1)}{']' * (MAX_DEPTH + 1)}", "nested deeper than 200 levels"),
                       ('{"n": ' + "9" * (MAX_DIGITS + 1) + "}", "an integer of more than 4,300 digits"),
                       ('{"a": [{"\\udc00": 1}]}', 'a lone surrogate in the key "\\udc00" at $.a[0]'),
                       ('{"a b": ["x", "\\ud800"]}', 'a lone surrogate (\\ud800) at $["a b"][1]')):
        with pytest.raises(UserError) as refused:
            parse_json(text, "--input")
        assert said in str(refused.value), refused.value


def _parameters(group: click.Group, path: str = "tui-agent"):
    for name, command in group.commands.items():
        for param in command.params:
            yield f"{path} {name} {param.name}", param
        if isinstance(command, click.Group):
            yield from _parameters(command, f"{path} {name}")


def test_every_option_and_argument_has_a_type_that_says_what_it_may_hold():
    """Text is TEXT (checked) or VERBATIM (a path, a URL, a command, JSON|@FILE), numbers bounded: click's
    plain STRING, INT and FLOAT would let a new option take what no column holds."""
    allowed = (StoredText, Verbatim, click.Path, click.Choice, click.IntRange, click.FloatRange)
    plain = [(where, param.type) for where, param in [*_parameters(cli), *(("tui-agent", p) for p in cli.params)]
             if not getattr(param, "is_flag", False)
             and (not isinstance(param.type, allowed) or type(param.type) in (click.IntRange, click.FloatRange))]
    assert plain == []


def test_a_path_may_hold_any_bytes_the_file_system_allows(tui_agent, tmp_path):
    folder = tmp_path / f"d{NOT_UTF8}"   # a byte that is not UTF-8 in every path given
    folder.mkdir()
    db = folder / f"runs{NOT_UTF8}.db"
    request = folder / f"in{NOT_UTF8}.json"
    request.write_text('{"name": "Ada"}')
    module = folder / "bytes_agents.py"
    module.write_text("from tui_agent import Agent\n\nADA = Agent(name='ada', run=lambda ctx, request: {})\n")
    assert "ada" in ok(tui_agent("--db", str(db), "--agents", str(module), "agents")).stdout
    run_id = ok(tui_agent("--db", str(db), "start", "hello", "--input", f"@{request}")).stdout.strip()
    assert f"{run_id} succeeded" in ok(tui_agent("--db", str(db), "worker", "--once")).stdout
    store = open_store(db)
    try:
        assert json.loads(get_run(store, run_id)["result"])["greeting"] == "Hello, Ada!"
    finally:
        store.close()


# -- values already in the store ---------------------------------------------------------------------------------

BAD_TEXT = {"surrogate": SURROGATE, "deep": DEEP, "huge": HUGE}
WHY = {"surrogate": "it holds a lone surrogate (\\udfff) at $.x", "deep": "it is nested too deeply to be read",
       "huge": "it holds an integer of more than 4,300 digits", "bytes": "it holds bytes that are not UTF-8 text"}


def _write(store, sql: str, value) -> None:
    with store.write() as conn:
        conn.execute(sql, value)


def _seed_bad_values(database) -> dict:
    """As an older tui-agent or another program could have left it: runs whose request, budget or recorded result
    cannot be read, schedules whose input cannot be read (each kind), a good run and a good schedule, all due."""
    store, registry = open_store(database), load_registry()
    on_sqlite = isinstance(database, Path)
    kinds = [*BAD_TEXT, *(["bytes"] if on_sqlite else [])]   # a server refuses bytes that are not UTF-8
    raw = {kind: (text, "?") for kind, text in BAD_TEXT.items()} | {"bytes": (b'{"x": "\xff"}', "CAST(? AS TEXT)")}
    seeded = {"runs": {}, "schedules": {}}
    try:
        for kind in kinds:
            value, cast = raw[kind]
            run_id, _ = operate.start(store, registry, agent_name="hello", request={"name": kind})
            _write(store, f"UPDATE runs SET request = {cast} WHERE id = ?", (value, run_id))
            seeded["runs"][run_id] = f"runs.request cannot be read: {WHY[kind]}"
            operate.schedule_add(store, registry, name=f"bad-{kind}", agent="hello", cron="* * * * *")
            _write(store, f"UPDATE schedules SET input = {cast} WHERE name = ?", (value, f"bad-{kind}"))
            seeded["schedules"][f"bad-{kind}"] = f"schedules.input cannot be read: {WHY[kind]}"
        budget_run, _ = operate.start(store, registry, agent_name="hello", request={})
        _write(store, "UPDATE runs SET budget = ? WHERE id = ?", (HUGE, budget_run))
        seeded["runs"][budget_run] = f"runs.budget cannot be read: {WHY['huge']}"
        finished, _ = operate.start(store, registry, agent_name="hello", request={})
        work(store, registry, finished)
        replaying = operate.fork(store, finished, 2)     # its worker replays #0 and #1 from the journal
        for table in ("journal_rows", "journal_tail"):   # the view `journal` is the two
            _write(store, f"UPDATE {table} SET result = ? WHERE run_id = ? AND position = 0", (DEEP, replaying))
        seeded["runs"][replaying] = f"journal.result of #0 'greet' cannot be read: {WHY['deep']}"
        seeded["good_run"] = operate.start(store, registry, agent_name="hello", request={"name": "Bob"})[0]
        operate.schedule_add(store, registry, name="good", agent="hello", cron="* * * * *")
        with store.write() as conn:   # all due now, with a fire inside the last two minutes
            conn.execute("UPDATE schedules SET counts_from = ?, next_fire_at = 0", (time.time() - 120,))
    finally:
        store.close()
    return seeded


def _assert_each_failed_or_disabled(database, seeded: dict, tui_agent) -> None:
    store = open_store(database)
    try:
        for run_id, said in seeded["runs"].items():
            row = store.conn.execute("SELECT status, reason, error FROM runs WHERE id = ?", (run_id,)).fetchone()
            assert tuple(row[:2]) == ("failed", "error") and said in row[2], (run_id, row)
        good = store.conn.execute("SELECT status FROM runs WHERE id = ?", (seeded["good_run"],)).fetchone()[0]
        assert good == "succeeded", "the worker went on to the next run"
        for name, said in seeded["schedules"].items():
            enabled = store.conn.execute("SELECT enabled FROM schedules WHERE name = ?", (name,)).fetchone()[0]
            events = [m for (m,) in store.conn.execute("SELECT message FROM events WHERE schedule = ? AND kind = ?",
                                                        (name, "disabled"))]
            assert enabled == 0 and len(events) == 1 and said in events[0], (name, enabled, events)
            assert f"tui-agent schedule rm {name}" in events[0]
        fired = [status for (status,) in store.conn.execute(
            "SELECT r.status FROM events e JOIN runs r ON r.id = e.run_id"
            " WHERE e.schedule = 'good' AND e.kind = 'fired' ORDER BY e.id")]
        # the fire that was due when the worker started was worked; a later minute's fire may still be queued
        assert fired and fired[0] == "succeeded", ("the good schedule fired and was worked", fired)
        assert set(fired) <= {"succeeded", "queued", "running"}, fired
    finally:
        store.close()
    disabled = set(seeded["schedules"])
    if "bad-bytes" in disabled:   # a row SQLite cannot hand back as text: `schedule ls` names it, `rm` removes it
        assert "schedules.input cannot be read" in _one_line(tui_agent("schedule", "ls"), 2)
        ok(tui_agent("schedule", "rm", "bad-bytes"))
        disabled.remove("bad-bytes")
    listed = {s["name"]: s for s in json.loads(ok(tui_agent("schedule", "ls", "--json")).stdout)}
    assert {name for name, s in listed.items() if not s["enabled"]} == disabled
    assert [listed[name]["input"] for name in sorted(disabled)] == [None] * len(disabled), "shown as unreadable"


def test_a_worker_that_meets_values_it_cannot_read_fails_those_runs_disables_those_schedules_and_goes_on(
        tui_agent, database):
    seeded = _seed_bad_values(database)
    done = ok(tui_agent("worker", "--once"))
    assert "Traceback" not in done.stderr, done.stderr
    for run_id, said in seeded["runs"].items():
        assert f"{run_id} failed (error): {said}" in done.stdout, done.stdout
    for run_id, said in seeded["runs"].items():   # what failed it can be looked at, the request shown as null
        if said.startswith("runs.request") and ("surrogate" in said or "deeply" in said):
            assert show_json(tui_agent, run_id)["run"]["request"] is None
    _assert_each_failed_or_disabled(database, seeded, tui_agent)


@pytest.mark.sqlite_only   # the same tick as the worker's, and the same serve(once=True)
def test_tick_disables_the_schedules_it_cannot_read_and_fires_the_rest(tui_agent, database):
    seeded = _seed_bad_values(database)
    done = ok(tui_agent("tick", "--work"))
    assert "Traceback" not in done.stderr, done.stderr
    _assert_each_failed_or_disabled(database, seeded, tui_agent)


def test_a_long_running_worker_keeps_running_past_values_it_cannot_read(spawn, tui_agent, database, tmp_path):
    seeded = _seed_bad_values(database)
    worker = spawn("worker", "--lease", "5", label="worker")
    store = open_store(database)
    try:
        until("every seeded run to end", lambda: store.conn.execute(
            "SELECT count(*) FROM runs WHERE status NOT IN ('succeeded', 'failed')").fetchone()[0] == 0
            and store.conn.execute("SELECT count(*) FROM events WHERE kind = 'fired'").fetchone()[0] > 0,
            deadline_s=60, why=lambda: worker.poll())
    finally:
        store.close()
    assert worker.poll() is None, "the worker is still running"
    later = ok(tui_agent("start", "hello")).stdout.strip()
    until("the next run to be worked", lambda: show_json(tui_agent, later)["run"]["status"] == "succeeded",
          deadline_s=30)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert "Traceback" not in (tmp_path / "worker.err").read_text()
    _assert_each_failed_or_disabled(database, seeded, tui_agent)


def test_schedule_fire_on_an_input_it_cannot_read_disables_it_in_one_line(tui_agent, db_path):
    seeded = _seed_bad_values(db_path)
    line = _one_line(tui_agent("schedule", "fire", "bad-surrogate"), 2)
    assert line == ("tui-agent: bad-surrogate: not fired: " + seeded["schedules"]["bad-surrogate"]
                    + ", half of a character; the schedule is disabled")
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT enabled FROM schedules WHERE name = 'bad-surrogate'").fetchone() == (0,)
    finally:
        conn.close()
