"""What a notice says, and the three ways it reaches a person: `--notify CMD`, the desktop, a line or JSON.

store/notices.py holds the rows. `Attendant` delivers for workers and `tick`; no command runs through a shell.
Free of textual. Why: docs/architecture.md, section 3.2, "How a notice reaches a person".
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EnvironmentStop, UserError
from ..runtime.clock import iso, now
from ..safe_text import one_line, visible
from ..states import Reason, RunStatus, budget_dimension
from ..store import Store, open_store
from ..store import notices as table

if TYPE_CHECKING:
    from ..runtime.heartbeat import Waiting

NOTIFY_TIMEOUT_S = 10.0        # a --notify command still running after this is killed (the notice stays delivered)
PASS_S = 30.0                  # a pass over undelivered notices ends within this (README: "When a run needs you")
REMIND_AFTER_H = 12.0          # --remind-after's default
REMIND_EVERY_S = 5.0           # how often a worker looks for runs due a reminder
POLL_S = 0.5                   # how often a worker looks for undelivered notices
DESKTOP_TIMEOUT_S = 5.0
_STDERR_TAIL = 4096            # bytes of a failed command's stderr read for its last line


def json_line(value: dict) -> str:
    """One line of ASCII JSON: every control character, C1 and bidi ones included, arrives escaped, so a script
    that prints it raw cannot have its terminal driven by a message; decoding gives the text back verbatim."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False)


def command_for(notice: dict) -> str:
    """The tui-agent command that acts on a run in this state."""
    run, status, reason = notice["run_id"], notice["status"], notice["reason"]
    if status == RunStatus.WAITING and reason == Reason.APPROVAL:
        return f"tui-agent approve {run}"
    if status == RunStatus.WAITING and reason == Reason.RECONCILE:
        return f"tui-agent show {run}"        # names the effect in doubt and the reconcile command for it
    dimension = budget_dimension(reason)
    if dimension:
        return f"tui-agent resume {run} --budget {dimension}=VALUE"
    return f"tui-agent resume {run}"


def event(notice: dict) -> dict:
    """The event as --notify's stdin and `watch --json` carry it. `message` is verbatim (JSON escapes it).
    `superseded`: the run no longer needs a person for it (never so on --notify's stdin, which gets only current
    ones)."""
    return {"id": notice["id"], "run_id": notice["run_id"], "agent": notice["agent"], "kind": notice["kind"],
            "status": notice["status"], "reason": notice["reason"], "message": notice["message"],
            "at": iso(notice["at"]), "command": command_for(notice), "superseded": notice["superseded"]}


def headline(notice: dict) -> str:
    needs = "still needs you" if notice["kind"] == table.REMINDER else "needs you"
    return f"{notice['run_id']} ({one_line(notice['agent'], 40)}) {needs}"


def state_of(notice: dict) -> str:
    return f"{notice['status']}: {notice['reason']}" if notice["reason"] else str(notice["status"])


def line(notice: dict) -> str:
    """One line for a terminal: a message cannot move the cursor or change the terminal (safe_text.one_line)."""
    return (f"{iso(notice['at'])}  #{notice['id']}  {headline(notice)}: {one_line(state_of(notice), 60)}: "
            f"{one_line(notice['message'], 300)}  -> {command_for(notice)}")


# -- the desktop ------------------------------------------------------------------------------------------------


def desktop_command(title: str, body: str, platform: str | None = None) -> list[str] | None:
    """The argument list that posts a desktop notification here, or None when this platform has no notifier or
    its program is missing. The text is made one line and clipped, and goes as arguments (never through a shell, nor
    into AppleScript source: osascript reads it from argv)."""
    platform = platform or sys.platform
    title, body = one_line(title, 80) or "tui-agent", one_line(body, 300)
    if platform.startswith("linux"):
        program = shutil.which("notify-send")
        return [program, "--app-name=tui-agent", "--", title, body] if program else None
    if platform == "darwin":
        program = shutil.which("osascript")
        script = ["on run argv", "display notification (item 2 of argv) with title (item 1 of argv)", "end run"]
        return [program, *(a for s in script for a in ("-e", s)), title, body] if program else None
    return None


def desktop(title: str, body: str, *, platform: str | None = None, background: bool = True) -> bool:
    """Post a desktop notification if this platform has a notifier; False (and nothing else) when it has not.
    Any failure of the program is ignored: the bell and the TUI's own toast still say it."""
    argv = desktop_command(title, body, platform)
    if argv is None:
        return False

    def send() -> None:
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=DESKTOP_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError):
            pass

    if background:
        threading.Thread(target=send, name="desktop-notify", daemon=True).start()
    else:
        send()
    return True


def notify_desktop(notice: dict, **kwargs) -> bool:
    return desktop(f"tui-agent: {headline(notice)}", f"{state_of(notice)}: {notice['message']}", **kwargs)


# -- the --notify command ---------------------------------------------------------------------------------------


def parse_command(text: str) -> list[str]:
    """`--notify CMD` split once, as a shell would split words, into an argument list run without a shell."""
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise UserError(f"--notify {text!r}: {e}; quote it as one argument, "
                        "such as --notify 'notify-me --to ops'") from None
    if not argv:
        raise UserError("--notify is empty; give a command, such as --notify 'notify-me --to ops'")
    program = argv[0]
    found = shutil.which(program) if os.sep not in program else (program if os.access(program, os.X_OK) else None)
    if not found:
        raise UserError(f"--notify: no program {program!r} found (not on PATH, or not executable)")
    return argv


def run_command(argv: list[str], payload: dict, timeout_s: float = NOTIFY_TIMEOUT_S) -> str | None:
    """Run the command once with the event as JSON on stdin (and nothing else from it: no argument, no
    variable), for at most `timeout_s`, then kill its process group. None when it exited 0, else why not, in one
    line. Its stdin and stderr are files, not pipes, and only its own exit is waited for: a child it leaves
    behind holding them (in a session of its own, out of reach of the kill) cannot hold the caller up."""
    try:
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stderr:
            stdin.write((json_line(payload) + "\n").encode())
            stdin.flush()
            stdin.seek(0)
            proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=stderr,
                                    start_new_session=True)   # ctrl+c at the worker's terminal does not cut it short
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
                proc.wait()
                return f"still running after {timeout_s:g}s; killed"
            if proc.returncode == 0:
                return None
            size = os.fstat(stderr.fileno()).st_size   # its last words; a child may still be writing after them
            err = os.pread(stderr.fileno(), _STDERR_TAIL, max(0, size - _STDERR_TAIL))
    except OSError as e:
        return f"could not start: {e.strerror or e}"
    said = one_line(err.decode(errors="replace").strip().splitlines()[-1], 160) if err.strip() else ""
    return f"exit {proc.returncode}" + (f": {said}" if said else "")


def _stderr_line(text: str) -> None:
    print(visible(text), file=sys.stderr, flush=True)


class Attendant:
    """What a worker or `tick` does for the person: records a reminder once a run has needed a person for
    `remind_after_s` (None: never), and with `command`, claims undelivered notices and runs it once for each.
    A failing command is one line on stderr; its notice stays delivered (claimed), never retried. A pass stops
    starting commands when asked to stop, and the last pass of `worker --once` or `tick` once another command's
    whole `timeout_s` would not fit in `pass_s`; what it claimed and did not start is handed back."""

    def __init__(self, name: str, command: list[str] | None = None, *, remind_after_s: float | None = None,
                 timeout_s: float = NOTIFY_TIMEOUT_S, pass_s: float = PASS_S,
                 log: Callable[[str], None] = _stderr_line) -> None:
        self.name, self.command, self.remind_after_s = name, command, remind_after_s
        self.timeout_s, self.pass_s, self.log = timeout_s, pass_s, log
        self._reminded_at: float | None = None

    def attend(self, store: Store, *, force: bool = False, stop: threading.Event | None = None,
               within_s: float | None = None) -> list[dict]:
        """One pass: reminders (at most every REMIND_EVERY_S unless `force`), then undelivered notices to the
        command until `stop`, and ending within `within_s` (None: no bound). The notices it delivered (or
        tried to)."""
        started = time.monotonic()
        if self.remind_after_s is not None:
            at = now()
            if force or self._reminded_at is None or at - self._reminded_at >= REMIND_EVERY_S:
                self._reminded_at = at
                if table.reminders_due(store, at - self.remind_after_s):
                    table.remind(store, self.remind_after_s, now())

        def why_not() -> str | None:
            """Why no further command may start in this pass, if none may."""
            if stop is not None and stop.is_set():
                return "stopping"
            if within_s is not None and time.monotonic() - started + self.timeout_s > within_s:
                return f"this pass's {within_s:g}s is up"
            return None

        delivered: list[dict] = []
        while self.command and why_not() is None and table.any_undelivered(store):
            try:
                claimed = table.claim(store, self.name, now())
            except table.ClaimLost:
                continue
            if not claimed:
                break
            batch = [notice for notice in claimed if not notice["superseded"]]   # the others need nobody now
            try:
                while batch and why_not() is None:
                    self.deliver(batch[0])
                    delivered.append(batch.pop(0))
            finally:
                self._hand_back(store, batch, why_not() or "an error")
        return delivered

    def _hand_back(self, store: Store, claimed: list[dict], why: str) -> None:
        """Claimed notices no command was started for, back to undelivered, saying so in one line."""
        if not claimed:
            return
        try:
            table.hand_back(store, claimed)
        except EnvironmentStop as e:   # at most once still holds: they are lost, as after a kill -9
            self.log(f"tui-agent: {self.name}: notices: {len(claimed)} claimed could not be handed back ({e}); "
                     "they will not be delivered")
            return
        self.log(f"tui-agent: {self.name}: notices: {len(claimed)} handed back undelivered ({why}); the next "
                 "worker or tick delivers them")

    def last_pass(self, store: Store, stop: threading.Event | None = None) -> None:
        """`worker --once` and `tick` as they exit: one forced pass; an error is one line, not the command's end
        (its runs were worked; what is left undelivered goes out with the next process)."""
        try:
            self.attend(store, force=True, stop=stop, within_s=self.pass_s)
        except Exception as e:   # noqa: BLE001
            self.log(f"tui-agent: {self.name}: notices: {e}; left for the next worker or tick")

    def deliver(self, notice: dict) -> None:
        assert self.command is not None   # attend delivers only while it has a command
        failed = run_command(self.command, event(notice), self.timeout_s)
        if failed:
            self.log(f"tui-agent: {self.name}: --notify {Path(self.command[0]).name} failed for notice "
                     f"#{notice['id']} ({notice['run_id']}): {failed}; it stays delivered")

    def run(self, db_path: Path, durability: str, stop: threading.Event, every_s: float = POLL_S,
            waiting: Waiting | None = None) -> None:
        """A worker's attending thread, on its own connection, until `stop`: the work loop is never held up by
        a slow command, and on `stop` it finishes the command it is in (within `timeout_s`) and hands back the
        rest. An error (the database busy, say) is one line, said again only when it changes."""
        store = open_store(db_path, durability)
        said = None
        try:
            while not stop.is_set():
                try:
                    self.attend(store, stop=stop)
                    said = None
                except Exception as e:   # noqa: BLE001 - a notifier must not take the worker down
                    # the server away is the worker's one line (`waiting`), said however the passes go
                    if (waiting is None or not waiting.away(e)) and str(e) != said:
                        self.log(f"tui-agent: {self.name}: notices: {e}; trying again")
                    said = str(e)
                stop.wait(every_s)
        finally:
            store.close()
