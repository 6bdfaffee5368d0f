"""A worker's log file: every line the worker says, stamped with the time, and reading it back (`tui-agent logs`).

`keep` makes this process's stdout and stderr write each line to the file too: claims, each run's end, due
runs of unknown agents, the database waited out, failed heartbeat renewals and every retried attempt (runtime/
retry.py's logger, which `say_retries` sends to stderr). A stream that is the log file already is not written
twice. Nothing here runs per step."""

from __future__ import annotations

import atexit
import codecs
import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, TextIO

from .errors import UserError
from .runtime.clock import now
from .runtime.retry import LOGGER
from .store.base import is_url

POLL_S = 0.2                  # how often `follow` looks for new lines
CHUNK = 64 * 1024


def place(given: str) -> Path:
    """The absolute path `--log` names (its folder as given: `~` expanded, `..` resolved, a symlink kept)."""
    return Path(os.path.abspath(os.path.expanduser(given)))


def keep(path: Path, name: str, database: str | os.PathLike) -> None:
    """From now until the process ends, write every line of stdout and stderr to `path` too, each after the time.

    The file is appended to, and made with mode 0600: a step's error may quote a secret. `--log` naming a file that
    cannot be written, or the database's own file (`database`: a path, or a URL), is the user's mistake: one line."""
    if not is_url(database) and str(path) in {f"{place(os.fspath(database))}{tail}" for tail in ("", "-wal", "-shm")}:
        raise UserError(f"--log {path} is the database's own file; name a log file of its own, such as "
                        f"{Path(database).with_suffix('.log')}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as e:
        raise UserError(f"--log {path}: cannot write there ({e.strerror}); name a file in a folder you can write"
                        ) from None
    log = os.fdopen(fd, "ab", buffering=0)   # one write per line batch, appended whole (O_APPEND)
    stdout, stderr = _Stamped(sys.stdout, log), _Stamped(sys.stderr, log)
    sys.stdout, sys.stderr = stdout, stderr
    stderr.only_to_log(f"{name}: worker started (pid {os.getpid()})")

    def ended() -> None:   # after the command's last line, its one-line error included
        stdout.finish()
        stderr.finish()
        stderr.only_to_log(f"{name}: worker ended (pid {os.getpid()})")

    atexit.register(ended)


def say_retries() -> None:
    """Say on stderr, as one line, every failed attempt of a step that will be retried (runtime/retry.py).

    Each is said once even when a process runs many workers, as the tests' in-process commands do."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(handler, _ToStderr) for handler in logger.handlers):
        logger.addHandler(_ToStderr())
    logger.setLevel(logging.INFO)
    logger.propagate = False


class _ToStderr(logging.Handler):
    """Say a record as the worker's other lines are said, on whatever stderr is now.

    Such a line reads `tui-agent: w-ab12: ...`."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"tui-agent: {record.getMessage()}", file=sys.stderr, flush=True)


def _stamp() -> str:
    return datetime.fromtimestamp(now()).astimezone().isoformat(timespec="seconds")


class _Stamped:
    """A text stream that writes what it is given to `shown` (unless that is the log file itself) and each whole
    line to the log after the time. Threads write at once (the runs' threads, the heartbeat's), and `print` writes a
    line's text and its newline apart: each thread's unfinished line waits in its own buffer."""

    def __init__(self, shown: TextIO, log) -> None:
        self._log = log
        self._shown: TextIO | None = None if _same_file(shown, log) else shown
        self._pending = threading.local()

    def write(self, text: str) -> int:
        if self._shown is not None:
            self._shown.write(text)
        *lines, rest = (getattr(self._pending, "text", "") + text).split("\n")
        self._pending.text = rest
        if lines:
            self._to_log(lines)
        return len(text)

    def writelines(self, lines) -> None:
        for text in lines:
            self.write(text)

    def __getattr__(self, name: str):   # what else a caller asks of a stream (`errors`, `buffer`): the shown one's
        shown = self.__dict__.get("_shown")
        if shown is None:
            raise AttributeError(name)
        return getattr(shown, name)

    def only_to_log(self, line: str) -> None:
        self._to_log([line])

    def _to_log(self, lines: list[str]) -> None:
        stamp = _stamp()
        try:
            self._log.write("".join(f"{stamp} {line}\n" for line in lines).encode("utf-8", "backslashreplace"))
        except OSError:   # a full disk, a removed mount: the log is lost, never the worker
            pass

    def flush(self) -> None:
        if self._shown is not None:
            self._shown.flush()

    def finish(self) -> None:
        """At the exit: this thread's unfinished line, as a line of its own."""
        self.flush()
        if getattr(self._pending, "text", ""):
            self._to_log([self._pending.text])
            self._pending.text = ""

    def isatty(self) -> bool:
        return self._shown is not None and self._shown.isatty()

    def fileno(self) -> int:
        return self._shown.fileno() if self._shown is not None else self._log.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._shown, "encoding", None) or "utf-8"


def _same_file(stream: TextIO, log) -> bool:
    try:
        return os.path.samestat(os.fstat(stream.fileno()), os.fstat(log.fileno()))
    except (AttributeError, OSError, ValueError):   # no descriptor (a test's capture), or a closed one
        return False


def follow(log: BinaryIO, write: Callable[[str], None], ended: Callable[[], bool], stop: threading.Event,
           keep_on: bool) -> None:
    """Write the text of the open `log`, and with `keep_on` every line added after, as `tail -f` does.

    The text is decoded as UTF-8, a broken character replaced. Following goes on until `stop` is set or `ended()`
    says the worker has stopped (then after what it wrote last). A log cut short (truncated) is read again from
    its start; one renamed (rotated away) is still the file the worker writes to, and is followed on."""
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
    while True:
        chunk = log.read(CHUNK)
        if chunk:
            write(decode(chunk))
            continue
        if not keep_on:
            break
        if ended():
            write(decode(log.read()))
            break
        if stop.wait(POLL_S):
            break
        if os.fstat(log.fileno()).st_size < log.tell():
            log.seek(0)
    write(decode(b"", final=True))
