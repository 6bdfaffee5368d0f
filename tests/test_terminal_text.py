"""Text that agents, models, tools and stored rows control never drives the terminal (issue 36): a park message,
an error, a step's name and result, a model reply, an effect's key and an approval's question holding OSC (the
window title, OSC 52 which writes the clipboard), a screen clear, a colour, a bidi override, a C1 CSI and a
carriage return are printed by `run`, `worker`, `show` and every other command, on a terminal and into a pipe,
with those characters made visible (safe_text.visible); `--json` escapes them and decodes to the same text."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from fixtures.hostile_agents import HOSTILE
from helpers import ok

from tui_agent import notify
from tui_agent.safe_text import json_text, one_line, visible

# What a terminal acts on, written out here rather than taken from the code under test: C0 but tab and newline,
# DEL, C1, and the bidi controls.
ACTED_ON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SHOWN = "\\x1b]0;pwned-ti"           # the window title's OSC once made visible (a step's name holds this much)
MARKUP = "[red]markup[/red] [link=http://evil.example]link[/link]"
PROGRESS = "\r\x1b[2K"               # the progress line's own rewrite, which only a terminal is sent
AGENTS = ("--agents", "hostile_agents")


def on_a_terminal(*args: str) -> tuple[int, str]:
    """`tui-agent ARGS` with stdout and stderr on a pseudo-terminal: its exit code and what the terminal was sent,
    the terminal's own newline translation (\\r\\n) undone."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "tui_agent", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower)
    os.close(follower)
    sent, deadline = bytearray(), time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if not select.select([leader], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:          # EIO: the process has closed its terminal
                break
            if not chunk:
                break
            sent += chunk
    finally:
        os.close(leader)
    return proc.wait(timeout=10), sent.decode("utf-8").replace("\r\n", "\n")


def assert_inert(output: str, *shown: str) -> None:
    """`output` holds nothing a terminal would act on (bar the progress line's own rewrite) and does hold each of
    `shown`: the text was printed, made visible, not dropped."""
    rest = output.replace(PROGRESS, "")
    assert not ACTED_ON.findall(rest), rest
    for text in shown:
        assert text in rest, (text, rest)


def run_id_in(output: str) -> str:
    return re.search(r"r-[0-9a-f]{8}", output).group()


def test_visible_shows_what_a_terminal_acts_on_and_keeps_lines_and_length():
    assert visible("a\x1b]0;t\x07b\x1b[2Jc\u202ed\x9b2Je\rf\x7f\x00") == \
        "a\\x1b]0;t\\x07b\\x1b[2Jc\\u202ed\\x9b2Je\\rf\\x7f\\x00"
    long = "line one\n\tline two " + "x" * 5000
    assert visible(long) == long                                   # newlines, tabs, every character kept
    assert visible("naïve ✓ 日本 \U0001f600 \\x1b [red]") == "naïve ✓ 日本 \U0001f600 \\x1b [red]"
    assert visible("\udfff") == "\\udfff"                          # printable, where it could not be encoded
    assert one_line("a\x1b[1;31mb\nc\t d\u202e", 200) == "a\\x1b[1;31mb c d\\u202e"
    assert one_line("x" * 50, 10) == "x" * 9 + "…"
    for value in (HOSTILE, {"k": [HOSTILE, "\udfff", 1.5]}):
        text = json_text(value, indent=2)
        assert not ACTED_ON.search(text.replace("\n", "")) and "\u202e" not in text
        assert json.loads(text) == value


@pytest.mark.parametrize("where", ["terminal", "pipe"])
def test_run_worker_and_show_print_no_control_sequence(where, tui_agent, tmp_path):
    """A park message, an error, a step's name and result and an effect's key, each holding HOSTILE: `run`,
    `worker` and `show` print them visibly, on a terminal (whose progress line shows it is one) and into a pipe."""
    db = ("--db", str(tmp_path / "runs.db"), *AGENTS)

    def printed(*args: str) -> tuple[int, str]:
        if where == "terminal":
            return on_a_terminal(*db, *args)
        done = tui_agent(*db, *args)
        return done.returncode, done.stdout + done.stderr

    code, parked = printed("run", "hostile")
    assert code == 1
    assert_inert(parked, "parked (environment): parked: \\x1b]0;pwned-title\\x07\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x1b[31mred"
                         "\\u202eflip\\x9b2J\\rover " + MARKUP)
    assert (PROGRESS in parked) == (where == "terminal")
    code, done = printed("run", "hostile", "--input", '{"end": "done"}')
    assert code == 0
    assert_inert(done, "succeeded")
    result = next(line for line in done.replace(PROGRESS, "\n").splitlines() if line.startswith("{"))
    assert json.loads(result) == {"said": HOSTILE}                # JSON, escaped, decoding to the text itself
    failing = ok(tui_agent(*db, "start", "hostile", "--input", '{"end": "fail"}')).stdout.strip()
    code, worked = printed("worker", "--once")
    assert code == 0
    assert_inert(worked, f"{failing} failed (error): ValueError: \\x1b]0;pwned-title")
    for run_id in (run_id_in(parked), run_id_in(done), failing):
        code, shown = printed("show", run_id)
        assert code == 0
        assert_inert(shown, f"look{SHOWN}", "key:\\x1b]0;pwned-title")
    assert "\\x1b]52;c;cHduZWQ=" in shown and "error     ValueError: \\x1b]0;pwned-title" in shown


def test_json_output_escapes_c1_and_bidi_and_decodes_to_the_same_values(tui_agent, tmp_path):
    db = ("--db", str(tmp_path / "runs.db"), *AGENTS)
    run_id = run_id_in(ok(tui_agent(*db, "run", "hostile", "--input", '{"end": "done"}')).stdout)
    for args in (("show", run_id, "--json"), ("ls", "--json")):
        printed = ok(tui_agent(*db, *args)).stdout
        assert not ACTED_ON.search(printed.replace("\n", "")), printed
    report = json.loads(printed := ok(tui_agent(*db, "show", run_id, "--json")).stdout)
    assert "\\u009b2J" in printed and "\\u202e" in printed and "\\u001b]0;" in printed
    results = {entry["name"]: entry["result"] for entry in report["journal"]}
    assert results[f"look{HOSTILE[:12]}"] == {"text": HOSTILE}
    assert results["ask"]["content"][0]["text"] == HOSTILE         # the model's reply
    assert report["run"]["result"] == {"said": HOSTILE}
    assert report["effects"][0]["key"] == f"key:{HOSTILE[:24]}"


def test_every_command_that_echoes_stored_text_prints_it_visible(tui_agent, tmp_path):
    """Wider than run, worker and show: ls's reasons, workers, schedules, diff, an approval's question and the
    note that answered it, and an artifact's text, with HOSTILE in the rows (some written by another program)."""
    path = tmp_path / "runs.db"
    db = ("--db", str(path), *AGENTS)
    parked = run_id_in(ok(tui_agent(*db, "run", "hostile"), 1).stdout)
    fork = ok(tui_agent(*db, "fork", parked, "--from-step", "1")).stdout.strip()
    asking = ok(tui_agent(*db, "start", "hostile-asking")).stdout.strip()
    big = ok(tui_agent(*db, "start", "hostile", "--input", '{"big": true}')).stdout.strip()
    ok(tui_agent(*db, "worker", "--once"))
    ok(tui_agent(*db, "approve", asking, "--deny", "--note", f"no: {HOSTILE}"))
    ok(tui_agent(*db, "schedule", "add", "nightly", "--agent", "hostile", "--cron", "0 2 * * *"))
    conn = sqlite3.connect(path)            # rows as another program (or an older tui-agent) may have left them
    with conn:
        conn.execute("UPDATE runs SET reason = ? WHERE id = ?", (HOSTILE, fork))
        conn.execute("UPDATE workers SET name = ? || name", (HOSTILE,))
        conn.execute("UPDATE schedules SET model = ?", (HOSTILE,))
    conn.close()
    for args, shown in [(("ls",), f"parked: {SHOWN}"), (("workers", "--all"), SHOWN),
                        (("schedule", "ls"), SHOWN), (("diff", parked, fork, "--all"), f"look{SHOWN}"),
                        (("show", asking), f"go-ahead: {SHOWN}"), (("show", asking), f"no: {SHOWN}")]:
        assert_inert(ok(tui_agent(*db, *args)).stdout, shown)
    entry = next(e for e in json.loads(ok(tui_agent(*db, "show", big, "--json")).stdout)["journal"]
                 if e["name"] == "big")
    code, printed = on_a_terminal(*db, "artifact", entry["artifact"])
    assert code == 0
    assert_inert(printed, "\\u001b]0;pwned-title", "\\u202eflip\\x9b2J")    # raw C1 and bidi in the file, shown
    piped = subprocess.run([sys.executable, "-m", "tui_agent", *db, "artifact", entry["artifact"]], cwd=ROOT,
                           capture_output=True, timeout=60)
    assert json.loads(piped.stdout) == {"text": HOSTILE * 300}     # into a pipe: the bytes as stored


def test_notices_and_desktop_notifications_show_the_message_visible_on_one_line():
    notice = {"id": 1, "run_id": "r-1234abcd", "agent": "ask\x1b[5ming", "kind": "needs_person", "status": "parked",
              "reason": "environment", "message": HOSTILE, "at": 0.0}
    line = notify.line(notice)
    assert_inert(line, "(ask\\x1b[5ming)", "parked: environment: \\x1b]0;pwned-title")
    assert "\n" not in line and notify.event(notice)["message"] == HOSTILE    # the JSON event stays verbatim
