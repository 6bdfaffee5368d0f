"""A recorded result opened in the person's own editor, for `tui-agent fork RUN --edit N` and the run screen's `e`.

The file is private (0600 in a 0700 folder removed whatever happens), and the editor runs without a shell. The
TUI runs it inside `app.suspend()`, through the `run` argument.
Why: docs/architecture.md, section 9 (The TUI), "Editing a recorded result".
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import UserError
from ..strict_json import parse_json

PREFIX = "tui-agent-edit-"      # the private folder's name starts so (tests look for leftovers by it)
NO_EDITOR = "no editor to open: set EDITOR (or VISUAL) to one, such as EDITOR=nano, or give --result JSON"

Runner = Callable[[list[str]], int]    # runs the editor's argument list to its end; its exit status


def editor_command(environ: Mapping[str, str] | None = None) -> list[str]:
    """The editor as an argument list: $VISUAL, else $EDITOR (as git and click choose), else `vi` if on PATH."""
    environ = os.environ if environ is None else environ
    for variable in ("VISUAL", "EDITOR"):
        spec = environ.get(variable, "").strip()
        if not spec:
            continue
        try:
            argv = shlex.split(spec)
        except ValueError as e:
            raise UserError(f"${variable} ({spec!r}) does not split into a command ({e}); fix its quotes") from None
        if argv:
            return argv
    vi = shutil.which("vi")
    if vi is None:
        raise UserError(NO_EDITOR)
    return [vi]


def run_plain(argv: list[str]) -> int:
    """The editor on this process's terminal (the CLI's way)."""
    return subprocess.run(argv, check=False).returncode


def file_name(entry: Mapping[str, Any]) -> str:
    """What the editor shows as the file's name: `r-7f3a9c2e-3-summarize.json` (a recorded_entry)."""
    label = f"{entry['run_id']}-{entry['position']}-{entry['name']}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:120] + ".json"


def as_text(result: Any) -> str:
    """A recorded result as the person edits it: indented JSON, non-ASCII left readable."""
    return json.dumps(result, indent=2, ensure_ascii=False) + "\n"


def edit_text(text: str, name: str = "result.json", run: Runner = run_plain,
              command: list[str] | None = None) -> str:
    """`text` in a private file named `name`, opened in the editor (`command`, else `editor_command()`) through
    `run`; the file's text when the editor exits 0. The folder and all in it is removed in every case."""
    argv = editor_command() if command is None else command
    folder = tempfile.mkdtemp(prefix=PREFIX)
    try:
        os.chmod(folder, stat.S_IRWXU)                   # 0700 whatever the umask made of it
        path = os.path.join(folder, os.path.basename(name) or "result.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(text)
        try:
            status = run([*argv, path])
        except FileNotFoundError:
            raise UserError(f"the editor {argv[0]!r} was not found; set EDITOR (or VISUAL) to one on PATH") from None
        except PermissionError:
            raise UserError(f"the editor {argv[0]!r} cannot be run (permission denied); set EDITOR (or VISUAL)"
                            " to another") from None
        if status != 0:
            raise UserError(f"the editor ({shlex.join(argv)}) exited with status {status}; nothing was forked")
        try:
            # by name, not the descriptor above: many editors save by writing a new file and renaming it
            with open(path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            raise UserError("the edited file was deleted in the editor; nothing was forked") from None
        except UnicodeDecodeError as e:
            raise UserError(f"the edited file is not UTF-8 text ({e.reason} at byte {e.start}); "
                            "nothing was forked") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def parse_edited(text: str, source: str = "the edited result") -> Any:
    """The edited text as JSON, read strictly (no NaN or Infinity); a one-line UserError with the line and
    column of what is wrong. An empty file means the person gave up, as git takes an empty commit message."""
    if not text.strip():
        raise UserError(f"{source} is empty; nothing was forked")
    return parse_json(text, source, example="nothing was forked")
