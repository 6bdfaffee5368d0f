"""Text that agents, models, tools and stored rows control never drives the terminal (issue 36): a park message,
an error, a step's name and result, a model reply, an effect's key and an approval's question holding OSC (the
window title, OSC 52 which writes the clipboard), a screen clear, a colour, a bidi override, a C1 CSI and a
carriage return are printed by `run`, `worker`, `show` and every other command, on a terminal and into a pipe,
with those characters made visible (safe_text.visible); `--json` escapes them and decodes to the same text; the
TUI shows them as text on every widget, Rich markup included."""

from __future__ import annotations

import ast
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
from fixtures.hostile_agents import ASKING, HOSTILE, HOSTILE_AGENT
from helpers import ROOT, key, ok, open_run, polled, registry_of, rendered, start_and_work, tui
from helpers import select as select_run
from rich.text import Text
from textual.app import App
from textual.widgets import Static

from tui_agent import operate
from tui_agent.safe_text import json_text, one_line, visible
from tui_agent.services import notify
from tui_agent.store import open_store
from tui_agent.widgets.safe import safe

# What a terminal acts on, written out here rather than taken from the code under test: C0 but tab and newline,
# DEL, C1, and the bidi controls.
ACTED_ON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SHOWN = "\\x1b]0;pwned-ti"           # the window title's OSC once made visible (a step's name holds this much)
MARKUP = "[red]markup[/red] [link=http://evil.example]link[/link]"
TEXTUAL_MARKUP = "[red]markup[/red] [link='http://evil.example']link[/link] [@click=app.quit]click[/]"
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
    assert_inert(parked, "parked (environment): parked: \\x1b]0;pwned-title\\x07\\x1b]52;c;cHduZWQ=\\x07"
                         "\\x1b[2J\\x1b[31mred\\u202eflip\\x9b2J\\rover " + MARKUP)
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


def test_the_cli_prints_through_its_echo_alone():
    """The cli package calls click.echo only inside text.echo, so no command (one added later included) prints raw."""
    def echoes(node: ast.AST) -> list[ast.Call]:
        return [call for call in ast.walk(node) if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute) and call.func.attr == "echo"
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "click"]

    modules = {path.name: ast.parse(path.read_text()) for path in (ROOT / "tui_agent" / "cli").glob("*.py")}
    (echo,) = [node for node in modules["text.py"].body if isinstance(node, ast.FunctionDef) and node.name == "echo"]
    assert [call for tree in modules.values() for call in echoes(tree)] == echoes(echo) != []


def test_notices_and_desktop_notifications_show_the_message_visible_on_one_line():
    notice = {"id": 1, "run_id": "r-1234abcd", "agent": "ask\x1b[5ming", "kind": "needs_person", "status": "parked",
              "reason": "environment", "message": HOSTILE, "at": 0.0, "superseded": False}
    line = notify.line(notice)
    assert_inert(line, "(ask\\x1b[5ming)", "parked: environment: \\x1b]0;pwned-title")
    assert "\n" not in line and notify.event(notice)["message"] == HOSTILE    # the JSON event stays verbatim


# -- the TUI ---------------------------------------------------------------------------------------------------


def test_textuals_renderer_sends_escapes_on_so_widgets_are_given_safe_text():
    """What Textual does with such text on its own (Rich drops BEL, backspace, \\r, VT and FF; ESC, C1 and bidi
    reach the terminal; a str is read as markup), and what `safe` gives a widget instead."""
    import asyncio

    class Shown(App):
        def compose(self):
            yield Static(Text(HOSTILE), id="raw")
            yield Static(TEXTUAL_MARKUP, id="markup")   # (HOSTILE, read as markup, does not parse: the app stops)
            yield Static(safe(HOSTILE), id="safe")

    async def lines() -> list[str]:
        app = Shown()
        async with app.run_test(size=(400, 10)) as pilot:
            await pilot.pause()
            return rendered(app)

    raw, markup, shown = (line.rstrip() for line in asyncio.run(lines())[:3])
    assert "\x1b]0;pwned-title" in raw and "\u202e" in raw and "\x9b" in raw
    assert "\x07" not in raw and "\r" not in raw
    assert markup == "markup link click"                          # read as markup: a colour, a link, an action
    assert_inert(shown, "\\x1b]0;pwned-title\\x07", "\\rover " + MARKUP)


async def test_the_tui_shows_hostile_text_as_text_on_every_widget(db_path):
    """The runs table and its situation strip, the run screen (timeline, every entry in the viewer and as raw
    JSON, events, ledger, checkpoint), the approval modal's question, the diff screen and its picker, and a
    toast: no rendered line holds a character a terminal would act on, no segment is a hyperlink, and the text
    is there, made visible, its markup as written."""
    store = open_store(db_path)
    registry = registry_of(HOSTILE_AGENT, ASKING)
    parked = start_and_work(store, registry, "hostile", {}).run_id
    failed = start_and_work(store, registry, "hostile", {"end": "fail"}).run_id
    asking = start_and_work(store, registry, "hostile-asking", {}).run_id
    fork = operate.fork(store, parked, 1)

    def look(app) -> str:
        """What the screen shows now, asserting it holds nothing a terminal acts on and no hyperlink."""
        for strip in app.screen._compositor.render_strips():
            assert not any(segment.style and segment.style.link for segment in strip), strip
        lines = rendered(app)
        assert not [line for line in lines if ACTED_ON.search(line)], lines
        seen.append(text := "\n".join(lines))
        return text

    seen: list[str] = []
    async with tui(db_path, notifications=True) as (app, pilot):
        app.desktop = lambda notice: None
        for run_id, says in ((parked, "parked (environment)"), (failed, "failed (error): ValueError:"),
                             (asking, "asks (a approves or denies):")):
            await select_run(pilot, run_id)
            assert says in look(app) and (run_id == parked or SHOWN in seen[-1]), seen[-1]   # the situation strip
        await key(pilot, "a")
        assert f"Approve {asking}" in look(app) and "\\x1b[31mred\\u202eflip" in seen[-1]   # its question
        await key(pilot, "escape")
        await open_run(app, pilot, parked)
        await key(pilot, "home")
        for _ in range(len(app.screen.timeline.items)):           # each entry, for people and as raw JSON
            look(app)
            await key(pilot, "v")
            look(app)
            await key(pilot, "v")
            await key(pilot, "down")
        await key(pilot, "escape")
        await open_run(app, pilot, failed)                         # where it stopped, and its last event
        assert "failed: ValueError:" in look(app) and "\\x1b]0;pwned-title\\x1b]52;c;" in seen[-1]
        await key(pilot, "escape")
        await open_run(app, pilot, fork)
        await key(pilot, "d")
        assert "side by side with" in look(app)                    # the picker, the parent first
        await key(pilot, "enter")
        await pilot.pause(0.3)
        assert "Entries" in look(app) and f"look{SHOWN}" in seen[-1]
        await key(pilot, "down")
        look(app)
        start_and_work(store, registry, "hostile", {})             # a run comes to need a person: a toast
        await polled(pilot)
        await pilot.pause(0.3)
        assert "(tui-agent resume r-" in look(app)
    store.close()
    everything = "\n".join(seen)
    for shown in ("\\x1b[2J\\x1b[31mred\\u202eflip\\x9b2J", "[red]markup[/red]", "[link=http://evil.example]",
                  "\\u001b]0;pwned-title", "key:\\x1b]0;pwned-title"):
        assert shown in everything, shown
