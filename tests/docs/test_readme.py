"""The README's promises (issue 41): at most 250 lines; a first agent that runs offline as printed, through the
installed console script, from a folder of its own; no command that assumes a package index has tui-agent; the
test command is what CI runs; its keys are the TUI page's."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

from helpers import ROOT, console_script

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = ROOT / "docs"


def _block_after(text: str, heading: str, language: str = "") -> str:
    """The first fenced code block after `heading` (of that language, if one is given)."""
    section = text.split(f"\n{heading}\n", 1)[1]
    return re.search(rf"```{language}\n(.*?)```", section, re.DOTALL).group(1)


def _first_agent() -> tuple[str, list[str]]:
    """The first agent's code and the one command the README gives to run it."""
    code = _block_after(README, "## A first agent", "python")
    after_code = README.split(code, 1)[1]
    (command,) = _block_after(after_code, "Run it from the folder that holds it:").strip().splitlines()
    return code, shlex.split(command)


def _show(db: Path, run_id: str, cwd: Path, env: dict) -> dict:
    shown = subprocess.run([console_script(), "--db", str(db), "show", run_id, "--json"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=60, check=True)
    return json.loads(shown.stdout)


def test_the_first_agent_runs_offline_as_printed_from_a_folder_of_its_own(tmp_path):
    code, command = _first_agent()
    assert len(code.strip().splitlines()) <= 35, "about 30 lines"
    assert command[0] == "tui-agent" and "--agents" in command, command
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / command[command.index("--agents") + 1]).write_text(code, encoding="utf-8")
    db = tmp_path / "own" / "runs.db"
    # a user's shell: no PYTHONPATH pointing into the checkout, and a key that must not be used (the endpoint is
    # dead): the command as printed is offline by itself
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(ANTHROPIC_API_KEY="sk-ant-must-not-be-used", ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    done = subprocess.run([console_script(), "--db", str(db), *command[1:]], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id, status = done.stdout.splitlines()[0].split()[:2]
    assert status == "succeeded", done.stdout

    report = _show(db, run_id, folder, env)
    kinds = [entry["kind"] for entry in report["journal"]]
    assert kinds.count("step") == 1 and kinds.count("tool") == 1 and kinds.count("effect") == 1, kinds
    assert kinds.count("model") >= 2, "ctx.model, then the loop's turns"
    assert any("/" in entry["name"] and entry["kind"] == "tool" for entry in report["journal"]), "inside the loop"
    (effect,) = report["effects"]
    assert effect["state"] == "confirmed" and effect["attempts"] == 1, effect
    assert effect["has_lookup"] and effect["key"], effect
    published = Path(effect["result"])
    assert published.is_file() and published.is_relative_to(db.parent), published   # its own data folder
    assert {c["provider"] for c in report["model_calls"]} == {"scripted"}, report["model_calls"]


def test_the_readme_has_at_most_250_lines():
    assert len(README.splitlines()) <= 250


_TUI_AGENT_SPEC = re.compile(r"tui[-_]agent(\[[^\]]*\])?([<>=!~].*)?")   # the name, its extras, a version
_INSTALLERS = re.compile(r"\b(?:pip3?|pipx|uv tool|uv pip|uv)\s+(?:install|add|run)\b(?P<args>[^`#\n&;|]*)"
                         r"|\buvx\b(?P<uvx>[^`#\n&;|]*)")


def _installs_from_an_index(line: str) -> bool:
    """A command in `line` that installs tui-agent by name, which only a package index could answer."""
    for found in _INSTALLERS.finditer(line):
        args = found.group("args") or found.group("uvx") or ""
        try:
            words = shlex.split(args)
        except ValueError:   # prose around the command, with an apostrophe
            words = args.split()
        if any(_TUI_AGENT_SPEC.fullmatch(word.strip("'\"")) for word in words if not word.startswith("-")):
            return True
    return False


def test_no_readme_command_installs_tui_agent_from_a_package_index():
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            assert not _installs_from_an_index(line), f"{page.relative_to(ROOT)}:{number}: {line}"
    assert "uv tool install ." in README and "pipx install ." in README, "the daily-use install is from the clone"
    for tried in ("pip install 'tui-agent[postgres]'", "pipx install tui-agent", "uv tool install tui_agent",
                  "uvx tui-agent", ".venv/bin/pip install -U tui-agent", "pip install tui-agent==0.1.0"):
        assert _installs_from_an_index(tried), tried
    for fine in ("pip install -e '.[postgres]'", "uv tool install .", "pipx install --force '.[postgres]'",
                 "pip install -e . && tui-agent demo",
                 "install the otel extra: pip install -e '.[otel]' in tui-agent's checkout"):
        assert not _installs_from_an_index(fine), fine


def _fresh_machine_commands(text: str, heading: str) -> list[str]:
    return [line.split("#")[0].strip() for line in _block_after(text, heading).strip().splitlines()]


def test_the_readme_test_command_is_what_ci_runs():
    demo, tests = _fresh_machine_commands(README, "## On a fresh machine")
    assert ".venv/bin/mkdocs build --strict" in tests and tests.endswith(".venv/bin/python -m pytest"), tests
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    runs = [line for line in ci if not line.lstrip().startswith("#") and ("pytest" in line or "mkdocs" in line)]
    assert runs == [tests], "CI runs exactly the README's test command, as one line, and nothing else of its own"
    assert ci.index('cd "$(dirname "$0")/.."') < ci.index(tests), "from the checkout root"
    assert "/site/" in (ROOT / ".gitignore").read_text().splitlines(), "the built site is not committed"
    page = DOCS / "getting-started.md"
    assert _fresh_machine_commands(page.read_text(encoding="utf-8"), "## On a fresh machine\n\nFrom the checkout:") \
        == [demo, tests], "getting-started.md gives the README's commands"


def _keys(table: str) -> set[str]:
    rows = [row for row in table.splitlines() if row.startswith("|")][2:]
    cells = [cell for row in rows for cell in row.strip("|").split("|")]
    return {key for cell in cells[0::2] for key in re.findall(r"`([^`]+)`", cell)}


def test_the_readme_keys_are_keys_of_the_tui_page():
    readme = _keys(README.split("## The terminal UI", 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0])
    page = (DOCS / "tui.md").read_text(encoding="utf-8")
    every = _keys(page.split("## Keys", 1)[1].split("\n\n|", 1)[1].split("\n\n", 1)[0])
    assert len(readme) >= 15, readme
    assert readme <= every, readme - every
