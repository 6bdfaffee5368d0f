"""The runner calls you (issue 23): a run that comes to need a person is recorded once, in the transaction of the
transition, whoever made it; processes with `--notify` deliver each event exactly once between them (real
processes racing); `watch --json` prints them as they happen; a run left waiting too long is reminded once however
many processes look; and text from agents reaches the command's stdin verbatim, never a shell, and the desktop
only as one line with what a terminal would act on made visible."""

from __future__ import annotations

import ast
import json
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from fixtures import notify_agents
from helpers import ROOT, later, ok, registry_of, start_and_work, until, work

from tui_agent import operate
from tui_agent.runtime.clock import iso, now
from tui_agent.services import notify
from tui_agent.store import notices, open_store
from tui_agent.store.events import last_event
from tui_agent.store.runs import events_for, get_run

AGENTS = ["--agents", "notify_agents"]
REGISTRY = registry_of(notify_agents.ASKING, notify_agents.PARKING, notify_agents.NAPPING, notify_agents.SPENDING)
PACKAGE = ROOT / "tui_agent"


def recorder(folder: Path, name: str = "recorder", then: str = "") -> tuple[Path, Path]:
    """A --notify command that appends its stdin to `<name>.jsonl` (one event per line), then runs the Python
    lines `then`; (script, output)."""
    script, out = folder / f"{name}.py", folder / f"{name}.jsonl"
    script.write_text(f"#!{sys.executable}\nimport sys\ndata = sys.stdin.buffer.read()\n"
                      f"with open(sys.argv[1], 'ab') as f:\n    f.write(data)\n{then}")
    script.chmod(0o755)
    return script, out


def received(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# -- recorded once, in the transition's transaction, whoever made it ----------------------------------------------


def test_every_transition_into_needing_a_person_records_one_notice_and_no_other_does(store):
    asking = start_and_work(store, REGISTRY, "asking", {"question": "ship it?"})
    parking = start_and_work(store, REGISTRY, "parking", {"why": "no compiler"})
    spending = start_and_work(store, REGISTRY, "spending", {})
    napping = start_and_work(store, REGISTRY, "napping", {})
    queued, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    assert [asking.status, parking.status, spending.status, napping.status] == ["waiting", "parked", "waiting",
                                                                                 "waiting"]
    operate.park(store, napping.run_id, "later")      # waiting: sleep (no person) -> parked: person
    operate.park(store, queued)                        # queued -> parked
    operate.approve(store, asking.run_id)              # -> queued: nobody is needed
    assert work(store, REGISTRY, asking.run_id).status == "succeeded"

    made = notices.after(store, 0)
    assert [(n["run_id"], n["status"], n["reason"]) for n in made] == [
        (asking.run_id, "waiting", "approval"), (parking.run_id, "parked", "environment"),
        (spending.run_id, "waiting", "budget:steps"), (napping.run_id, "parked", "person"),
        (queued, "parked", "person")]
    for n in made:   # the message is the transition's own event's
        assert n["kind"] == "needs_person" and n["notified_at"] is None
        assert n["message"] in {e["message"] for e in _events(store, n["run_id"])}
    assert "ship it?" in made[0]["message"] and "no compiler" in made[1]["message"]
    assert made[3]["message"] == "parked by " + made[3]["message"].removeprefix("parked by ")
    # a person parking a run that already waits for one is a new state: one more notice
    operate.park(store, spending.run_id)
    assert [(n["status"], n["reason"]) for n in notices.of_run(store, spending.run_id)] == [
        ("waiting", "budget:steps"), ("parked", "person")]


def _events(store, run_id):
    return list(store.query("SELECT message FROM events WHERE run_id = ?", (run_id,)))


def test_a_refused_transition_records_nothing(store):
    """The notice is inside the transition's transaction: a park refused as stale leaves no notice."""
    run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    operate.park(store, run_id)
    with pytest.raises(Exception, match="parked already"):
        operate.park(store, run_id)
    assert len(notices.of_run(store, run_id)) == 1


def _set_part_writes_status(text: str) -> bool:
    match = re.search(r"UPDATE runs SET (.*?)(?: WHERE|$)", text, re.S)
    return bool(match) and ("status" in match.group(1) or "{" in match.group(1))


def test_every_status_write_is_one_the_notices_know():
    """All status writes of runs go through these four functions; a settle (settle_run's, and the deadline
    watcher's hand-on, whose statements _settling makes) and park (through _transition) are the ones that can make
    a run need a person, and they record a notice (_settle_in); settle_run batches only a settle that needs no
    person. A new one fails here until it does too."""
    writers = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            texts = []
            for node in ast.walk(fn):
                if isinstance(node, ast.JoinedStr):
                    texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    texts.append(node.value)
            if any(_set_part_writes_status(t) for t in texts):
                writers.add(f"{path.relative_to(PACKAGE)}:{fn.name}")
    assert writers == {"store/runs.py:_take", "store/runs.py:_settling", "store/runs.py:_transition",
                       "store/workers.py:release"}
    source = (PACKAGE / "store" / "runs.py").read_text()
    body = {name: source.split(f"def {name}(", 1)[1].split("\ndef ", 1)[0] for name in ("_settle_in", "park",
                                                                                     "settle", "settle_run")}
    for name in ("_settle_in", "park"):
        assert "record_notice(conn" in body[name], name
    assert "_settle_in(conn" in body["settle"]
    assert "person = needs_person(status, reason)" in body["settle_run"] and "_settle_in(conn" in body["settle_run"]


# -- --notify: delivered once, by one process, wherever the event was made ----------------------------------------


def test_events_from_a_cli_park_and_from_workers_are_delivered_once_by_two_notifying_workers(invoke, spawn,
                                                                                                tmp_path):
    script, out = recorder(tmp_path)
    db = Path(os.environ["TUI_AGENT_DB"])
    asking = [invoke(*AGENTS, "start", "asking", "--input", json.dumps({"question": f"q{i}?"})).stdout.strip()
              for i in range(4)]
    napping = [invoke(*AGENTS, "start", "napping", "--input", "{}").stdout.strip() for _ in range(4)]
    workers = [spawn(*AGENTS, "worker", "--name", name, "--notify", f"{script} {out}", label=name)
               for name in ("w-1", "w-2")]
    for run_id in napping:   # whether a worker claimed it first or not, the park is one transition
        done = invoke("park", run_id)
        assert done.exit_code == 0, done.output
    until("every event delivered", lambda: len(received(out)) >= 8,
          why=lambda: [(tmp_path / f"{w.label}.err").read_text() for w in workers])
    for w in workers:    # a while longer: a second delivery of anything would show now
        assert w.poll() is None
    until("the workers to look again", lambda: rows(db, "SELECT count(*) FROM notices")[0][0] == 8)
    threading.Event().wait(1.5)
    for w in workers:
        w.send_signal(signal.SIGTERM)
        w.wait(timeout=30)
        assert w.returncode == 0, (tmp_path / f"{w.label}.err").read_text()

    got = received(out)
    recorded = rows(db, "SELECT id, run_id, status, reason, notified_by FROM notices ORDER BY id")
    assert sorted(e["id"] for e in got) == [r[0] for r in recorded]          # each once, none lost
    assert {r[4] for r in recorded} <= {"w-1", "w-2"}
    by_run = {e["run_id"]: e for e in got}
    assert set(by_run) == set(asking) | set(napping)
    for run_id in asking:
        assert (by_run[run_id]["status"], by_run[run_id]["reason"]) == ("waiting", "approval")
        assert by_run[run_id]["command"] == f"tui-agent approve {run_id}"
    for run_id in napping:
        assert (by_run[run_id]["status"], by_run[run_id]["reason"]) == ("parked", "person")
        assert by_run[run_id]["command"] == f"tui-agent resume {run_id}"
        assert by_run[run_id]["agent"] == "napping" and by_run[run_id]["kind"] == "needs_person"
    for e in got:
        assert set(e) == {"id", "run_id", "agent", "kind", "status", "reason", "message", "at", "command", "superseded"}
        assert e["superseded"] is False     # a command gets only calls still current
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["at"])


def test_two_connections_claiming_at_the_same_instant_never_share_a_notice(store):
    """The claim in isolation, many times over: two connections released together by a barrier each claim;
    what they took is disjoint and complete."""
    from tui_agent.store import open_store

    for round_ in range(15):
        for _ in range(5):
            run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
            operate.park(store, run_id)
        barrier, taken, failed = threading.Barrier(2), [[], []], []

        def claim(i):
            other = open_store(store.path)
            try:
                barrier.wait()
                taken[i] = [n["id"] for n in notices.claim(other, f"p{i}", now())]
            except Exception as e:  # noqa: BLE001 - shown by the assertion below
                failed.append(e)
            finally:
                other.close()

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failed == []
        assert not set(taken[0]) & set(taken[1]), round_
        assert sorted(taken[0] + taken[1]) == list(range(round_ * 5 + 1, round_ * 5 + 6))


def test_a_failing_command_is_one_line_and_its_event_stays_delivered(store, tmp_path):
    failing = tmp_path / "failing.py"
    failing.write_text(f"#!{sys.executable}\nimport sys\nsys.stdin.read()\nprint('the hook is down', file=sys.stderr)"
                       "\nsys.exit(3)\n")
    failing.chmod(0o755)
    run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    operate.park(store, run_id)
    said: list[str] = []
    attendant = notify.Attendant("w-x", notify.parse_command(str(failing)), log=said.append)
    assert [n["run_id"] for n in attendant.attend(store)] == [run_id]
    assert said == [f"tui-agent: w-x: --notify failing.py failed for notice #1 ({run_id}): exit 3: the hook is down;"
                    " it stays delivered"]
    assert notices.of_run(store, run_id)[0]["notified_by"] == "w-x"
    assert attendant.attend(store) == [] and len(said) == 1                  # not tried again


def test_a_command_that_hangs_is_killed_after_its_timeout(store, tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    slow.chmod(0o755)
    run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    operate.park(store, run_id)
    said: list[str] = []
    started = now()
    notify.Attendant("w-x", [str(slow)], timeout_s=0.5, log=said.append).attend(store)
    assert now() - started < 10
    assert len(said) == 1 and "still running after 0.5s; killed" in said[0]


def parked(count: int) -> list[str]:
    """`count` runs parked, each one notice to deliver, in the database TUI_AGENT_DB names; their ids."""
    store = open_store(os.environ["TUI_AGENT_DB"])
    try:
        made = [operate.start(store, REGISTRY, agent_name="napping", request={})[0] for _ in range(count)]
        for run_id in made:
            operate.park(store, run_id)
        return made
    finally:
        store.close()


def test_a_worker_stopped_with_notices_claimed_hands_back_the_unsent_and_the_next_sends_each_once(spawn, tui_agent,
                                                                                                   tmp_path):
    slow, out = recorder(tmp_path, "slow", then="import time\ntime.sleep(3)\n")
    fast, out_next = recorder(tmp_path, "fast")
    db = Path(os.environ["TUI_AGENT_DB"])
    parked(10)
    worker = spawn("worker", "--name", "w-1", "--notify", f"{slow} {out}", label="w-1")
    until("the first notice sent", lambda: received(out), why=lambda: (tmp_path / "w-1.err").read_text())
    assert rows(db, "SELECT count(*) FROM notices WHERE notified_by = 'w-1'") == [(10,)]   # one claim took all ten
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
    said = (tmp_path / "w-1.err").read_text()
    assert worker.returncode == 0, said
    sent = [e["id"] for e in received(out)]
    assert sent and len(sent) < 10
    assert f"tui-agent: w-1: notices: {10 - len(sent)} handed back undelivered (stopping); the next worker or tick " \
           "delivers them" in said
    assert rows(db, "SELECT id FROM notices WHERE notified_at IS NULL ORDER BY id") == \
        [(i,) for i in range(1, 11) if i not in sent]

    ok(tui_agent("worker", "--once", "--name", "w-2", "--notify", f"{fast} {out_next}"))
    sent_next = [e["id"] for e in received(out_next)]
    assert sorted(sent + sent_next) == list(range(1, 11))                    # each once, none lost
    assert rows(db, "SELECT id, notified_by FROM notices ORDER BY id") == \
        [(i, "w-1" if i in sent else "w-2") for i in range(1, 11)]


def test_a_command_whose_child_holds_its_stderr_is_cut_at_10_s_and_the_next_notice_goes(tui_agent, tmp_path):
    """Notice 1's command exits at once and notice 2's hangs, each leaving a child in a session of its own that
    holds its stderr open (out of reach of a kill of the command's group): the first is delivered without a wait,
    the second cut at the 10 s bound, and notice 3 goes."""
    pids, out = tmp_path / "children.txt", tmp_path / "sent.jsonl"
    script = tmp_path / "leaves-a-child.py"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, subprocess, sys, time
        event = json.loads(sys.stdin.read())
        if event["id"] < 3:
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{child.pid}}\\n")
            if event["id"] == 2:
                time.sleep(120)
        with open({str(out)!r}, "a") as f:
            f.write(json.dumps(event) + "\\n")
        """))
    script.chmod(0o755)
    run_ids = parked(3)
    try:
        done = ok(tui_agent("worker", "--once", "--name", "w-c", "--notify", str(script)))
    finally:
        for pid in pids.read_text().split() if pids.exists() else []:
            os.kill(int(pid), signal.SIGKILL)
    assert [e["id"] for e in received(out)] == [1, 3]
    failed = [line for line in done.stderr.splitlines() if "--notify" in line]
    assert failed == [f"tui-agent: w-c: --notify leaves-a-child.py failed for notice #2 "
                      f"({run_ids[1]}): still running after 10s; killed; it stays delivered"]


def test_a_last_pass_over_commands_that_hang_ends_within_its_bound_and_hands_back_the_rest(store, tmp_path):
    """`worker --once` and `tick` deliver in a last pass bounded as a whole (notify.PASS_S, 30 s, for commands cut
    at 10 s each): here scaled down, 0.5 s a command and 1.25 s a pass, eight commands that hang (4 s one after
    another) end within the bound, and what it did not start goes to the next pass, each once."""
    hanging = tmp_path / "hanging.py"
    hanging.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    hanging.chmod(0o755)
    for _ in range(8):
        run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
        operate.park(store, run_id)
    said: list[str] = []
    attendant = notify.Attendant("w-x", [str(hanging)], timeout_s=0.5, pass_s=1.25, log=said.append)
    started = time.monotonic()
    attendant.last_pass(store)
    took = time.monotonic() - started
    killed = [line for line in said if line.endswith("still running after 0.5s; killed; it stays delivered")]
    assert 1 <= len(killed) <= 2 and took < attendant.pass_s + attendant.timeout_s, (took, said)
    assert said[len(killed):] == [f"tui-agent: w-x: notices: {8 - len(killed)} handed back undelivered (this pass's "
                                  "1.25s is up); the next worker or tick delivers them"]
    script, out = recorder(tmp_path)
    notify.Attendant("w-y", notify.parse_command(f"{script} {out}"), log=said.append).last_pass(store)
    assert [e["id"] for e in received(out)] == list(range(len(killed) + 1, 9))


def test_notify_names_a_program_that_exists(invoke, tmp_path):
    done = invoke("worker", "--once", "--notify", str(tmp_path / "no-such-hook"))
    assert done.exit_code == 2 and "--notify: no program" in done.output
    done = invoke("tick", "--notify", "'unclosed")
    assert done.exit_code == 2 and "--notify" in done.output


# -- watch --------------------------------------------------------------------------------------------------------


def _lines(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for text in stream:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_watch_json_prints_each_event_as_another_process_makes_it(invoke, tui_agent, tmp_path):
    before, _ = invoke(*AGENTS, "start", "napping", "--input", "{}").stdout.strip(), None
    assert invoke("park", before).exit_code == 0     # before watch started: not shown
    parked = invoke(*AGENTS, "start", "napping", "--input", "{}").stdout.strip()
    asking = invoke(*AGENTS, "start", "asking", "--input", json.dumps({"question": "merge?"})).stdout.strip()
    watch = subprocess.Popen([sys.executable, "-m", "tui_agent", "watch", "--json"], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert "watching" in watch.stderr.readline()      # its cursor is set
        lines = _lines(watch.stdout)
        done = tui_agent("park", parked, "--note", "lunch")
        assert done.returncode == 0, done.stderr
        first = json.loads(lines.get(timeout=20))
        assert first["run_id"] == parked and first["kind"] == "needs_person"
        assert (first["status"], first["reason"], first["agent"]) == ("parked", "person", "napping")
        assert "lunch" in first["message"] and first["command"] == f"tui-agent resume {parked}"
        done = tui_agent(*AGENTS, "worker", "--once")
        assert done.returncode == 0, done.stderr
        second = json.loads(lines.get(timeout=20))
        assert (second["run_id"], second["status"], second["reason"]) == (asking, "waiting", "approval")
        assert second["id"] > first["id"] and "merge?" in second["message"]
        assert lines.empty()
        watch.send_signal(signal.SIGINT)                 # ctrl+c: exit 0, quietly
        assert watch.wait(timeout=10) == 0
        assert lines.get(timeout=5) is None
        assert watch.stderr.read() == ""
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()


def test_watch_after_an_id_and_plain_lines(invoke, store):
    run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    operate.park(store, run_id, "see \x1b]0;owned\x07 here")
    line = notify.line(notices.after(store, 0)[0])
    assert "\x1b" not in line and "\x07" not in line and "see \\x1b]0;owned\\x07 here" in line
    assert f"{run_id} (napping) needs you: parked: person" in line and line.endswith(f"-> tui-agent resume {run_id}")


# -- a call for help is current -----------------------------------------------------------------------------------


def test_whether_a_notice_is_superseded_is_worked_out_from_its_run_when_it_is_read(store):
    """Current while its run still needs a person for that episode; superseded once it is decided, resumed or
    ended, or a newer episode began (the run parked again); a reminder follows its episode."""
    run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    operate.park(store, run_id)
    assert [n["superseded"] for n in notices.of_run(store, run_id)] == [False]
    notices.remind(store, 0, now() + 1)
    assert [(n["kind"], n["superseded"]) for n in notices.of_run(store, run_id)] == [("needs_person", False),
                                                                                    ("reminder", False)]
    operate.resume(store, run_id)
    assert [n["superseded"] for n in notices.of_run(store, run_id)] == [True, True]
    operate.park(store, run_id)                         # a new episode: the old one stays passed
    assert [n["superseded"] for n in notices.of_run(store, run_id)] == [True, True, False]
    operate.cancel_run(store, run_id)
    assert [n["superseded"] for n in notices.after(store, 0)] == [True, True, True]
    asking = start_and_work(store, REGISTRY, "asking", {"question": "ship?"})
    operate.approve(store, asking.run_id)               # decided: queued, nobody is needed
    assert [n["superseded"] for n in notices.of_run(store, asking.run_id)] == [True]


def test_a_call_for_help_answered_before_it_is_delivered_is_not_delivered_and_watch_json_marks_it(invoke, tui_agent,
                                                                                                   tmp_path):
    script, out = recorder(tmp_path)
    db = Path(os.environ["TUI_AGENT_DB"])
    asking = invoke(*AGENTS, "start", "asking", "--input", json.dumps({"question": "ship it?"})).stdout.strip()
    assert "waiting (approval)" in ok(tui_agent(*AGENTS, "worker", "--once")).stdout   # no --notify: undelivered
    assert invoke("approve", asking).exit_code == 0     # a person answered meanwhile
    napping = invoke(*AGENTS, "start", "napping", "--input", "{}").stdout.strip()
    assert invoke("park", napping).exit_code == 0       # this one still needs a person

    done = ok(tui_agent(*AGENTS, "worker", "--once", "--name", "w-late", "--notify", f"{script} {out}"))
    assert f"{asking} succeeded" in done.stdout
    assert [e["run_id"] for e in received(out)] == [napping]                            # the answered one is skipped
    recorded = rows(db, "SELECT run_id, notified_by, superseded FROM notices ORDER BY id")
    assert recorded == [(asking, "w-late", 1), (napping, "w-late", None)]               # claimed, recorded superseded

    history = [json.loads(line) for line in _watched("--after", "0", "--json", count=2)]
    assert [(e["run_id"], e["superseded"]) for e in history] == [(asking, True), (napping, False)]
    [line] = _watched("--after", "0", count=1)                                          # the lines: current only
    assert f"{napping} (napping) needs you" in line and asking not in line


def _watched(*args: str, count: int) -> list[str]:
    """The first `count` lines `tui-agent watch ARGS` prints (it reads the history at once), then ctrl+c."""
    watch = subprocess.Popen([sys.executable, "-m", "tui_agent", "watch", *args], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines = _lines(watch.stdout)
        got = [lines.get(timeout=20) for _ in range(count)]
        threading.Event().wait(1.5)                     # a few polls more: nothing else is printed
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=10) == 0
        assert lines.get(timeout=5) is None
        return got
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()


# -- reminders ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("round_", range(3))
def test_two_processes_racing_remind_once(invoke, tmp_path, round_):
    script, out = recorder(tmp_path)
    db = Path(os.environ["TUI_AGENT_DB"])
    run_id = invoke(*AGENTS, "start", "napping", "--input", "{}").stdout.strip()
    assert invoke("park", run_id).exit_code == 0

    def ticks(hours: float, count: int) -> None:
        env = {**os.environ, "TUI_AGENT_NOW": later(hours * 3600)}
        procs = [subprocess.Popen([sys.executable, "-m", "tui_agent", "tick", "--remind-after", "12", "--notify",
                                   f"{script} {out}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(count)]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err

    ticks(11, 2)              # not yet: only the park is delivered, once
    assert [(e["run_id"], e["kind"]) for e in received(out)] == [(run_id, "needs_person")]
    ticks(13, 2)              # two at once, past the threshold
    reminders = rows(db, "SELECT id, episode, notified_by FROM notices WHERE kind = 'reminder'")
    assert len(reminders) == 1 and reminders[0][2] is not None
    got = received(out)
    assert [(e["run_id"], e["kind"]) for e in got] == [(run_id, "needs_person"), (run_id, "reminder")]
    assert got[1]["id"] == reminders[0][0] and "still needs a person after 13" in got[1]["message"]
    ticks(14, 1)              # one reminder per episode
    assert len(received(out)) == 2


def test_each_episode_is_reminded_once_and_a_run_that_moved_on_is_not(store, clock):
    run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    other, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    operate.park(store, run_id)
    operate.park(store, other)
    operate.resume(store, other)                      # no longer needs anyone: never reminded
    hours = 3600.0
    assert notices.remind(store, 12 * hours, now() + 11 * hours) == []
    first = notices.remind(store, 12 * hours, now() + 13 * hours)
    assert len(first) == 1 and notices.remind(store, 12 * hours, now() + 20 * hours) == []
    operate.resume(store, run_id)
    operate.park(store, run_id)                       # a new episode
    clock.advance(1)
    assert notices.remind(store, 12 * hours, now() + 11 * hours) == []
    assert len(notices.remind(store, 12 * hours, now() + 13 * hours)) == 1
    kinds = [(n["run_id"], n["kind"]) for n in notices.after(store, 0)]
    assert kinds == [(run_id, "needs_person"), (other, "needs_person"), (run_id, "reminder"),
                     (run_id, "needs_person"), (run_id, "reminder")]
    reminded = [e["message"] for e in events_for(store, run_id) if e["kind"] == "reminder"]
    assert len(reminded) == 2 and all(m.startswith("still needs a person after 13.0 h") for m in reminded)
    assert not [e for e in events_for(store, other) if e["kind"] == "reminder"]


def test_a_run_already_waiting_when_the_database_is_upgraded_is_reminded_not_announced(tmp_path):
    from helpers import database_at_version

    from tui_agent.store import open_store

    db = tmp_path / "old.db"
    database_at_version(db, 8, *[
        "INSERT INTO runs (id, agent, request, status, reason, attempt, fence, generation, created_at, updated_at)"
        f" VALUES ('r-{name}', 'napping', '{{}}', '{status}', '{reason}', 0, 0, 1, 1.0, 100.0)"
        for name, status, reason in (("a", "parked", "person"), ("b", "waiting", "sleep"), ("c", "waiting", "approval"))
    ], "INSERT INTO events (run_id, at, kind, message) VALUES ('r-c', 100.0, 'waiting', 'needs a person: deploy?')")
    store = open_store(db)
    try:
        made = notices.after(store, 0)
        assert [(n["run_id"], n["notified_by"]) for n in made] == [("r-a", "migration"), ("r-c", "migration")]
        assert made[1]["message"] == "needs a person: deploy?"
        assert not notices.any_undelivered(store)
        assert len(notices.remind(store, 12 * 3600, 100.0 + 13 * 3600)) == 2
    finally:
        store.close()


# -- agent text never reaches a shell ------------------------------------------------------------------------------


def test_control_characters_and_shell_metacharacters_reach_stdin_verbatim_and_never_run(tui_agent, tmp_path):
    script, out = recorder(tmp_path)
    traps = [tmp_path / f"pwned-{i}" for i in range(5)]
    question = (f"ok?\x1b[31m red\x07 $(touch {traps[0]}) ; touch {traps[1]} `touch {traps[2]}` | "
                f"touch {traps[3]} && rm -rf {tmp_path}/nothing\n'\"\\ \u202e end")
    assert tui_agent(*AGENTS, "start", "asking", "--input", json.dumps({"question": question})).returncode == 0
    # the command line itself is split once, without a shell: `;` and `touch` become plain arguments
    done = tui_agent(*AGENTS, "worker", "--once", "--notify", f"{script} {out} ; touch {traps[4]}")
    assert done.returncode == 0, done.stderr
    got = received(out)
    assert len(got) == 1 and question in got[0]["message"]
    raw = out.read_text()
    assert raw.count("\n") == 1 and raw.isascii() and "\\u001b[31m" in raw and "\\u202e" in raw  # one ASCII line
    assert not [t for t in traps if t.exists()]
    assert tmp_path.exists()


def test_the_desktop_notification_is_an_argument_list_of_clean_clipped_text(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "notify-send"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(tmp_path / 'args.json')!r}, 'w')"
                    ".write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    trap = tmp_path / "pwned"
    message = f"deploy\x1b[2J\x1b]0;title\x07 $(touch {trap}) `touch {trap}`;\r\n\u202e{'x' * 1000}"
    notice = {"id": 1, "run_id": "r-1234abcd", "agent": "ask\x1b[5ming", "kind": "needs_person", "status": "waiting",
              "reason": "approval", "message": message, "at": now()}
    assert notify.notify_desktop(notice, platform="linux", background=False)
    args = json.loads((tmp_path / "args.json").read_text())
    assert args[:2] == ["--app-name=tui-agent", "--"]
    title, body = args[2:]
    assert title == "tui-agent: r-1234abcd (ask\\x1b[5ming) needs you"
    assert body.startswith(f"waiting: approval: deploy\\x1b[2J\\x1b]0;title\\x07 $(touch {trap}) `touch {trap}`;\\r "
                           "\\u202exxx")
    assert len(body) <= 300 and body.endswith("…")
    assert not any(ord(c) < 32 or 0x7f <= ord(c) < 0xa0 or c == "\u202e" for c in title + body)
    assert not trap.exists()
    mac = notify.desktop_command("t", "$(x)", platform="darwin")
    assert mac is None     # no osascript on this PATH: skipped


def test_a_missing_notify_send_is_skipped_silently(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PATH", str(tmp_path))           # nothing there
    assert notify.desktop("title", "body", platform="linux", background=False) is False
    assert notify.desktop("title", "body", platform="win32", background=False) is False
    assert capfd.readouterr() == ("", "")


def test_the_event_json_names_the_command_that_acts_on_it():
    base = {"id": 7, "run_id": "r-1", "agent": "a", "kind": "needs_person", "message": "m", "at": 0.0,
            "superseded": False}
    cases = {("waiting", "approval"): "tui-agent approve r-1", ("waiting", "reconcile"): "tui-agent show r-1",
             ("waiting", "budget:cost_usd"): "tui-agent resume r-1 --budget cost_usd=VALUE",
             ("waiting", "plateau"): "tui-agent resume r-1", ("parked", "code_changed"): "tui-agent resume r-1"}
    for (status, reason), command in cases.items():
        made = notify.event({**base, "status": status, "reason": reason})
        assert made == {**base, "status": status, "reason": reason, "at": iso(0.0), "command": command}


def test_the_last_event_is_the_notice_message(store):
    """The notice message is what the person would read as the run's last event."""
    run = start_and_work(store, REGISTRY, "parking", {"why": "disk full"})
    assert notices.of_run(store, run.run_id)[0]["message"] == last_event(store.conn, run.run_id)["message"]
    assert get_run(store, run.run_id)["status"] == "parked"
