"""The agents, the editor script and the journal reads that the edit-and-fork tests share
(tests/engine/test_edit_fork.py, tests/tui/test_tui_edit_fork.py)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from tui_agent import Agent
from tui_agent.services import editing


class Counter:
    """How many times each step's function really ran."""

    def __init__(self):
        self.calls: dict[str, int] = {}

    def __call__(self, name, value):
        self.calls[name] = self.calls.get(name, 0) + 1
        return value


def decider(counter: Counter, replies: list[str]) -> Agent:
    """fetch (a step), decide (a model reply, scripted), act on what the reply says."""

    def run(ctx, request):
        fetched = ctx.step("fetch", counter, "fetch", {"rows": 3})
        reply = ctx.model("decide", messages=[{"role": "user", "content": f"{fetched['rows']} rows: ship?"}],
                          max_tokens=32)
        said = reply["content"][0]["text"]
        return {"did": ctx.step("act", counter, "act", f"acted on {said!r}")}

    def script(messages, max_tokens, index):
        replies.append(index)
        return "ship it"

    return Agent(name="decider", run=run, script=script)


def planner(counter: Counter) -> Agent:
    """A plan step whose result says how many files to do, then one step per file."""

    def run(ctx, request):
        ctx.step("setup", counter, "setup", "ok")
        plan = ctx.step("plan", counter, "plan", {"files": 2})
        done = [ctx.step(f"file {i}", counter, f"file {i}", i) for i in range(plan["files"])]
        return {"done": done}

    return Agent(name="planner", run=run)


def journal_rows(store, run_id: str) -> list[dict]:
    """The run's journal entries in order, with what an edit changes (result, artifact, attempts, cost, edited)."""
    cursor = store.conn.execute("SELECT position, name, kind, result, artifact, attempts, cost_usd, edited"
                                " FROM journal WHERE run_id = ? ORDER BY generation, position", (run_id,))
    return [dict(zip([d[0] for d in cursor.description], row)) for row in cursor]


EDITOR = """#!{python}
import json, os, stat, sys
record, action, path = sys.argv[1], sys.argv[2], sys.argv[-1]
folder = os.path.dirname(path)
with open(path, encoding="utf-8") as f:
    text = f.read()
seen = {{"path": path, "name": os.path.basename(path), "mode": stat.S_IMODE(os.stat(path).st_mode),
        "folder_mode": stat.S_IMODE(os.stat(folder).st_mode), "text": text, "args": len(sys.argv)}}
with open(record, "w", encoding="utf-8") as f:
    json.dump(seen, f)
open(os.path.join(folder, ".swap"), "w").write("a swap file an editor leaves beside it")
if action == "fail":
    sys.exit(3)
if action != "keep":
    with open(action, encoding="utf-8") as f:
        new = f.read()
    os.replace(path, path + "~")       # saved as many editors do: a new file renamed into place
    with open(path + ".new", "w", encoding="utf-8") as f:
        f.write(new)
    os.rename(path + ".new", path)
"""


def make_editor(folder: Path, action: str) -> tuple[str, Path]:
    """An editor script (under a folder with a space in its name, so $EDITOR must be split with its quotes):
    it records what it was given (path, mode, folder mode, text) and then keeps the file, fails (exit 3), or
    writes the text of the file `action` names. Returns ($EDITOR, the record's path)."""
    where = folder / "my editor"
    where.mkdir(parents=True, exist_ok=True)
    script = where / "edit.py"
    script.write_text(EDITOR.format(python=sys.executable))
    script.chmod(0o755)
    record = where / "seen.json"
    return f"{shlex.quote(str(script))} {shlex.quote(str(record))} {shlex.quote(action)}", record


def replacement(folder: Path, text: str) -> str:
    """A file holding `text`, for make_editor's `action`: the path of what the editor writes."""
    path = folder / f"replacement-{abs(hash(text))}.json"
    path.write_text(text)
    return str(path)


def leftovers(tmp: Path) -> list[str]:
    """The names of the private folders editing.py left in `tmp` (none, once an edit is over)."""
    return [p.name for p in tmp.iterdir() if p.name.startswith(editing.PREFIX)]
