"""A tiny repository with a four-task plan, and the fake command-line coding agent's script, for the harness tests.

Task k adds `pkg/m{k}.py` with `f()` returning k; `tests/test_m{k}.py` checks it (each task's own check), and
`tests/test_base.py` passes from the start (a test a worker can break: a silent regression)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from helpers import FIXTURES

PY = sys.executable
FAKE = FIXTURES / "fake_coding_agent.py"
TASKS = [f"Add f to pkg/m{k} returning {k}" for k in range(1, 5)]
IDS = [f"add-f-to-pkg-m{k}-returning-{k}" for k in range(1, 5)]
BRANCH = "harness/Four-functions"


def module(k: int) -> str:
    return f"def f():\n    return {k}\n"


def make_repo(root: Path, tasks: int = 4) -> Path:
    repo = root / "repo"
    files = {
        ".gitignore": "__pycache__/\n",
        "PLAN.md": "# Four functions\n\nOne module per task.\n\n" + "".join(
            f"- [ ] {TASKS[k - 1]}\n  check: {shlex.quote(PY)} -m unittest tests.test_m{k}\n"
            for k in range(1, tasks + 1)),
        "PROGRESS.md": "# Progress\n",
        "RULES.md": "# Rules\n",
        "pkg/__init__.py": "",
        "pkg/base.py": "def one():\n    return 1\n",
        "tests/__init__.py": "",
        "tests/test_base.py": "import unittest\n\nfrom pkg.base import one\n\n\nclass Base(unittest.TestCase):\n"
                              "    def test_one(self):\n        self.assertEqual(one(), 1)\n",
        **{f"tests/test_m{k}.py": f"import unittest\n\n\nclass M{k}(unittest.TestCase):\n    def test_f(self):\n"
                                   f"        from pkg.m{k} import f\n        self.assertEqual(f(), {k})\n"
           for k in range(1, tasks + 1)},
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a plan of four tasks")
    return repo


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args], cwd=repo,
                          capture_output=True, text=True, check=True)
    return done.stdout


def script(folder: Path, tasks: dict, default: list | None = None) -> Path:
    """The fake agent's script file (its `starts` log goes beside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "script.json"
    path.write_text(json.dumps({"tasks": tasks, "default": default or [[]]}))
    return path


def doing_each_task(folder: Path, **extra) -> Path:
    """A script that does every task right the first time."""
    return script(folder, {IDS[k - 1]: [[{"write": {f"pkg/m{k}.py": module(k)}}]] for k in range(1, 5)}, **extra)


def request(repo: Path, agent_script: Path, **fields) -> str:
    return json.dumps({"repo": str(repo), "check": [PY, "-m", "unittest"],
                       "worker": {"command": [PY, "-I", "-S", str(FAKE), str(agent_script)]}, **fields})


def snapshot(tree: Path) -> dict[str, bytes]:
    """Every file git would see in a tree (not .git), by path."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=tree,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return {name: (tree / name).read_bytes() for name in listed if name and (tree / name).is_file()}


def trailers(tree: Path, branch: str = BRANCH) -> list[dict]:
    """Each commit the run made on its branch, oldest first: its subject and trailers."""
    log = git(tree, "log", "--reverse", "--format=%s%x00%(trailers:only,unfold)%x01", f"main..{branch}")
    found = []
    for record in filter(None, (r.strip() for r in log.split("\x01"))):
        subject, _, said = record.partition("\x00")
        found.append({"subject": subject, **dict(line.split(": ", 1) for line in said.strip().splitlines())})
    return found
