"""The config file: the settings a person keeps in config.toml, which a flag or an environment variable overrides.

`read` turns `path()` into click's `default_map`, so click resolves every option in one order: the command
line, the environment variable, the file, the built-in default. A bad key or value is refused with its line
(exit 2) by every command but `config` and `doctor`. The TUI's chosen theme is in `state_path()`.
Why: docs/configuration.md ("Which value wins", "The keys", "A bad file", "The theme you choose in the TUI")."""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import platformdirs
from click.core import ParameterSource

from .errors import UserError
from .operate import parse_budget
from .runtime.registry import Registry
from .store.db import default_path

APP = "tui-agent"
SHARED = ("model", "lease", "notify")   # top-level keys that set the option of that name on every command
NEVER = ("yes", "force")                # options a file may not set
AGENT_KEYS = ("model", "budget")        # what an [agent.NAME] table may set
# Textual's built-in themes (textual.theme.BUILTIN_THEMES, which a test compares): importing textual to check a
# file's `theme` would add 0.3 s to every command
THEMES = ("textual-dark", "textual-light", "nord", "gruvbox", "catppuccin-mocha", "dracula", "tokyo-night", "monokai",
          "flexoki", "catppuccin-latte", "catppuccin-frappe", "catppuccin-macchiato", "solarized-light",
          "solarized-dark", "rose-pine", "rose-pine-moon", "rose-pine-dawn", "atom-one-dark", "atom-one-light",
          "ansi-dark", "ansi-light")


def path() -> Path:
    """Where the config file is, whether or not it exists."""
    return platformdirs.user_config_path(APP) / "config.toml"


def state_path() -> Path:
    """The file the TUI keeps what a person chose in it (the theme): not a file a person edits."""
    return platformdirs.user_state_path(APP) / "state.json"


class ConfigError(UserError):
    """The config file cannot be used: `what` names the file, the line and the key, and why; the message adds
    what to do."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}; fix the file (tui-agent config shows what each setting is and where it is set)")
        self.what = what


@dataclass
class Setting:
    """One value read from the file: `key` as a dotted name (`worker.lease`), the `line` it is on."""

    key: str
    value: Any
    line: int | None


@dataclass
class Settings:
    """What the file says: click's `default_map`, each value read (`read`), and the first problem, if any."""

    path: Path
    exists: bool = False
    default_map: dict = field(default_factory=dict)
    read: list[Setting] = field(default_factory=list)
    agents: dict[str, dict[str, Setting]] = field(default_factory=dict)   # [agent.NAME] tables, by agent
    agent_lines: dict[str, int | None] = field(default_factory=dict)            # where each of those tables starts
    problem: ConfigError | None = None

    def get(self, key: str) -> Setting | None:
        return next((s for s in self.read if s.key == key), None)

    def agent_defaults(self, registry: Registry, agent: str, model: str,
                       budget_specs: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """The `model` and `budget_specs` for a new run or schedule of `agent`.

        The model is its table's unless --model was given; its table's budget goes under the command's (of two
        ceilings on one thing, the command's wins). The file's agent tables are checked against `registry` first,
        before anything is written."""
        self.check_agents(registry.names())
        table = self.agents.get(agent, {})
        given = click.get_current_context().get_parameter_source("model") is ParameterSource.COMMANDLINE
        if "model" in table and not given:
            model = table["model"].value
        return model, (*(table["budget"].value if "budget" in table else ()), *budget_specs)

    def check_agents(self, known: list[str]) -> None:
        """A table for an agent no module defines is refused, as any other unknown key: a misspelt name would do
        nothing."""
        for name, line in self.agent_lines.items():
            if name not in known:
                raise self._error(line, f"agent.{name}", "no agent of that name"
                                  + _hint(name, known, f" (known: {', '.join(known) or 'none'})"))

    def _error(self, line: int | None, key: str | None, why: str) -> ConfigError:
        where = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(f"{where}: {key + ': ' if key else ''}{why}")


def read(group: click.Group) -> Settings:
    """The file as the settings of `group`'s commands; a file that does not exist is no settings.

    The file is `path()` (platformdirs' user config folder: $XDG_CONFIG_HOME/tui-agent/config.toml on Linux), and
    `Context.get_parameter_source` says which source a value came from. It holds (docs/configuration.md):

    - the group's options (`db`, `data`, `durability`, `agents`) and `theme` (the TUI's) at the top level;
    - `model`, `lease` and `notify` at the top level, for every command that has that option;
    - a table per command (`[worker]`, `[schedule.add]`) setting any of its options by the flag's name
      (`remind-after`), over a top-level value; `--yes` and `--force` never, as each is one command's decision;
    - `[agent.NAME]` tables: `model` and `budget` for the runs of one agent, over the command's.

    A key the code does not know, or a value of the wrong type or out of range, is refused with its line (exit 2) by
    every command but `config` and `doctor`, which go on with the settings that could be read."""
    settings = Settings(path())
    try:
        data = settings.path.read_bytes()
    except FileNotFoundError:
        return settings
    except OSError as e:
        settings.problem = settings._error(None, None, f"cannot read it ({e.strerror})")
        return settings
    settings.exists = True
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        settings.problem = settings._error(data[:e.start].count(b"\n") + 1, None, "not UTF-8 text; save it as UTF-8")
        return settings
    lines = _Lines(text)
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line, reason = _syntax(str(e), lines)
        settings.problem = settings._error(line, lines.key_on(line), f"not valid TOML ({reason})")
        return settings
    _Reader(group, settings, lines).table(parsed)
    return settings


def _syntax(message: str, lines: _Lines) -> tuple[int | None, str]:
    """A tomllib error as a line and a message, such as (3, "invalid value at column 9").

    That one is from "Invalid value (at line 3, column 9)". An error tomllib places at the end of the document
    (a key given twice, a value cut short) is placed on the key given twice, or the last line."""
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
    end = re.search(r"\s*\(at end of document\)", message)
    at = found or end
    reason = message[:at.start()] + message[at.end():] if at else message
    reason = f"{reason[:1].lower()}{reason[1:]}"
    if found:
        return int(found.group(1)), f"{reason} at column {found.group(2)}"
    return (lines.twice or lines.last) if end else None, reason


class _Lines:
    """The line each key of a TOML text is on (tomllib says only what the keys hold)."""

    _PART = r"""[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*'"""
    _HEADER = re.compile(rf"^\s*\[\[?\s*((?:{_PART})(?:\s*\.\s*(?:{_PART}))*)\s*\]")
    _KEY = re.compile(rf"^\s*((?:{_PART})(?:\s*\.\s*(?:{_PART}))*)\s*=")

    def __init__(self, text: str) -> None:
        self.at: dict[tuple[str, ...], int] = {}
        self.keys: dict[int, str] = {}
        self.twice: int | None = None   # the first line that gives a key given before
        self.last = 0                   # the last line that holds anything
        table: tuple[str, ...] = ()
        in_string = False
        for number, line in enumerate(text.splitlines(), 1):
            quotes = line.count('"""') + line.count("'''")
            if not in_string:
                header, key = self._HEADER.match(line), self._KEY.match(line)
                if header:
                    table = self._parts(header.group(1))
                    for depth in range(1, len(table) + 1):   # [a.b] also opens the table a, on its line
                        self.at.setdefault(table[:depth], number)
                elif key:
                    name = table + self._parts(key.group(1))
                    if name in self.at and self.twice is None:
                        self.twice = number
                    self.at.setdefault(name, number)
                    self.keys[number] = ".".join(name)
            in_string ^= quotes % 2 == 1
            self.last = number if line.strip() else self.last

    def _parts(self, dotted: str) -> tuple[str, ...]:
        return tuple(part.strip("\"'") for part in re.findall(self._PART, dotted))

    def of(self, name: tuple[str, ...]) -> int | None:
        """The line of `name`, or of the nearest table or inline table it is in."""
        while name and name not in self.at:
            name = name[:-1]
        return self.at.get(name)

    def key_on(self, line: int | None) -> str | None:
        return self.keys.get(line) if line else None


class _Reader:
    """Checks each key and value against the commands' options, filling `settings` with every good one.

    The first problem is kept as `settings.problem`; the keys after it are still read, so that `config` and
    `doctor`, which go on with a bad file, show every value the file gives that could be read."""

    def __init__(self, group: click.Group, settings: Settings, lines: _Lines) -> None:
        self.group, self.settings, self.lines = group, settings, lines
        self.failures, self.first_line = 0, 0

    def table(self, data: dict) -> None:
        shared: dict[str, Any] = {}
        for name, value in data.items():
            if name in settable(self.group):   # before the commands: `db` and `agents` are also commands
                self._option(self.group, (name,), value, self.settings.default_map)
            elif name in SHARED:
                shared[name] = value
            elif name == "theme":
                self._theme(value)
            elif name == "agent":
                self._agents(value)
            elif name in self.group.commands:
                self._command(self.group.commands[name], (name,), value, self.settings.default_map)
            else:
                self._option(self.group, (name,), value, self.settings.default_map,
                             also=(*SHARED, "theme", "agent", *self.group.commands))
        for name, value in shared.items():   # after the tables, which they do not override
            self._shared(name, value)

    def _command(self, command: click.Command, key: tuple[str, ...], value: Any, into: dict) -> None:
        if not isinstance(value, dict):
            return self._fail(key, f"must be a table ([{'.'.join(key)}]) of {'.'.join(key)}'s options")
        into = into.setdefault(key[-1], {})
        for name, item in value.items():
            if isinstance(command, click.Group) and name in command.commands:
                self._command(command.commands[name], (*key, name), item, into)
            else:
                also = tuple(command.commands) if isinstance(command, click.Group) else ()
                self._option(command, (*key, name), item, into, also)

    def _option(self, command: click.Command, key: tuple[str, ...], value: Any, into: dict, also=()) -> None:
        options = settable(command)
        param = options.get(key[-1])
        if param is None:
            return self._fail(key, "not a setting" + _hint(key[-1], [*options, *also],
                                                          f" ({'.'.join(key[:-1]) or 'the top level'} takes: "
                                                          f"{', '.join(sorted([*options, *also])) or 'none'})"))
        failures = self.failures
        checked = self._value(param, key, value)
        if self.failures == failures:
            into[param.name] = checked
            self._keep(key, checked)

    def _shared(self, name: str, value: Any) -> None:
        """A top-level `model`, `lease` or `notify`: for each command with that option whose table sets none."""
        having = [(path, command) for path, command in _commands(self.group) if name in settable(command)]
        failures, checked = self.failures, []
        for path, command in having:
            param = settable(command)[name]
            checked.append((path, param, self._value(param, (name,), value,
                                                     f" (for {' '.join(path)})" if len(having) > 1 else "")))
            if self.failures > failures:
                return
        for path, param, one in checked:
            into = self.settings.default_map
            for part in path:
                into = into.setdefault(part, {})
            into.setdefault(param.name, one)
        self._keep((name,), value)

    def _value(self, param: click.Option, key: tuple[str, ...], value: Any, context: str = "") -> Any:
        """`value` as the option's type takes it, or None after keeping the problem."""
        if param.multiple:   # a list, or one value alone
            failures = self.failures
            checked = [self._one(param, key, item, context) for item in (value if isinstance(value, list) else
                                                                        [value])]
            return tuple(checked) if self.failures == failures else None
        return self._one(param, key, value, context)

    def _one(self, param: click.Option, key: tuple[str, ...], value: Any, context: str) -> Any:
        if isinstance(value, str) and not value.strip():
            return self._fail(key, "is empty; give a value, or remove the line for the default")
        want = _kind(param)
        if type(value) not in _KINDS[want]:
            return self._fail(key, f"must be {want}, not {_kind_of(value)} ({_toml(value)})")
        if want == "true or false":
            return value
        try:
            converted = param.type.convert(value, param, None)
        except click.BadParameter as e:
            return self._fail(key, f"{e.message.rstrip('.')}{context}")
        # a path in the file as a shell would read it on the command line: ~ is the home folder
        expands = isinstance(param.type, click.Path) or param.name == "agent_modules"
        return os.path.expanduser(converted) if expands else converted

    def _theme(self, value: Any) -> None:
        if not isinstance(value, str):
            return self._fail(("theme",), f"must be text, not {_kind_of(value)} ({_toml(value)})")
        if value not in THEMES:
            return self._fail(("theme",), f"{value!r} is not a theme" + _hint(value, THEMES,
                                                                              f" (themes: {', '.join(THEMES)})"))
        self._keep(("theme",), value)

    def _agents(self, value: Any) -> None:
        """[agent.NAME] tables: `model` as start's --model takes it, `budget` as its --budget does."""
        if not isinstance(value, dict) or not all(isinstance(table, dict) for table in value.values()):
            return self._fail(("agent",), "must hold a table per agent, as [agent.nightly-report]")
        start = settable(self.group.commands["start"])
        for agent, table in value.items():
            self.settings.agent_lines[agent] = self.lines.of(("agent", agent))
            for name, item in table.items():
                key = ("agent", agent, name)
                if name not in AGENT_KEYS:
                    self._fail(key, "not a setting" + _hint(name, AGENT_KEYS,
                                                            f" (an agent's table takes: {', '.join(AGENT_KEYS)})"))
                    continue
                failures = self.failures
                checked = self._value(start[name], key, item)
                if self.failures > failures:
                    continue
                if name == "budget":
                    try:
                        parse_budget(checked)
                    except UserError as e:
                        self._fail(key, str(e))
                        continue
                self._keep(key, checked)
                self.settings.agents.setdefault(agent, {})[name] = self.settings.read[-1]

    def _keep(self, key: tuple[str, ...], value: Any) -> None:
        self.settings.read.append(Setting(".".join(key), value, self.lines.of(key)))

    def _fail(self, key: tuple[str, ...], why: str) -> None:
        """Count a problem; the one on the file's earliest line is the one said (`lease` is read after tables)."""
        self.failures += 1
        line = self.lines.of(key)
        if self.settings.problem is None or (line or 0) < self.first_line:
            self.settings.problem, self.first_line = self.settings._error(line, ".".join(key), why), line or 0


def settable(command: click.Command) -> dict[str, click.Option]:
    """The options of `command` a file may set, by their flag's name (`remind-after`).

    Not hidden ones, not --yes or --force, and not those that share a value with others (reconcile's --happened,
    --not-done)."""
    options = [p for p in command.params if isinstance(p, click.Option) and p.expose_value and not p.hidden]
    names = [p.name for p in options]
    found = {}
    for param in options:
        flag = next((o[2:] for o in param.opts if o.startswith("--")), None)
        if flag and flag not in NEVER and names.count(param.name) == 1:
            found[flag] = param
    return found


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


_KINDS = {"true or false": (bool,), "a number": (int, float), "a whole number": (int,), "text": (str,)}


def _kind(param: click.Option) -> str:
    if param.is_flag and param.is_bool_flag:
        return "true or false"
    if isinstance(param.type, click.types.IntParamType):
        return "a whole number"
    if isinstance(param.type, click.types.FloatParamType):
        return "a number"
    return "text"


def _kind_of(value: Any) -> str:
    return {bool: "true or false", int: "a number", float: "a number", str: "text", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


def _toml(value: Any) -> str:
    shown = json.dumps(value, default=str, ensure_ascii=False)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _hint(word: str, known, otherwise: str) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else otherwise


def start_theme(file_theme: str | None, available) -> str | None:
    """The theme the TUI opens with, or None for Textual's own default.

    It is the one last chosen in the TUI, unless the file's `theme` changed since that choice (the newer
    decision wins: an edit of the file after a choice in the TUI takes effect); else the file's. A saved theme
    no longer `available` is passed over."""
    chosen = _chosen(file_theme)
    return chosen if chosen in available else file_theme


def _chosen(file_theme: str | None) -> str | None:
    """The theme last chosen in the TUI, if the file's theme is still the one it was chosen over."""
    saved = _state()
    return saved.get("theme") if saved.get("file_theme") == file_theme else None


def save_theme(theme: str, file_theme: str | None) -> None:
    """Keep the theme chosen in the TUI, with the file's theme at that moment (see `start_theme`); written whole
    or not at all."""
    state = state_path()
    state.parent.mkdir(parents=True, exist_ok=True)
    partial = state.with_name(state.name + ".partial")
    partial.write_text(json.dumps({**_state(), "theme": theme, "file_theme": file_theme}) + "\n", encoding="utf-8")
    os.replace(partial, state)


def _state() -> dict:
    """The state file, or nothing when it is missing or unreadable (it only remembers a choice)."""
    try:
        state = json.loads(state_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def effective(group_ctx: click.Context, settings: Settings) -> list[dict]:
    """Each setting in effect and where it came from, as `tui-agent config` lists them.

    First come the group's options as click resolved them, then `model`, `lease`, `notify` and `theme`, then
    every other value the file sets. `from` is
    "flag", "environment", "file", "state" or "default"; `where` names the flag, the variable, or file:LINE."""
    rows = []
    for flag, param in settable(group_ctx.command).items():
        value = group_ctx.params[param.name]
        source = group_ctx.get_parameter_source(param.name)
        if source is ParameterSource.COMMANDLINE:
            rows.append(_row(flag, value, "flag", f"--{flag}"))
        elif source is ParameterSource.ENVIRONMENT:
            rows.append(_row(flag, value, "environment", param.envvar))
        else:
            default = str(default_path()) if flag == "db" and value is None else value
            rows.append(_from_file(settings, flag, value, default))
    assert isinstance(group_ctx.command, click.Group)   # the tui-agent group's context
    for name in SHARED:
        default = next(settable(c)[name].default for _, c in _commands(group_ctx.command) if name in settable(c))
        rows.append(_from_file(settings, name, None, default))
    rows.append(_theme_row(settings))
    listed = {row["key"] for row in rows}
    rows += [_row(s.key, s.value, "file", f"{settings.path}:{s.line}") for s in settings.read if s.key not in listed]
    return rows


def said(row: dict) -> str:
    """Where a row of `effective` came from, in words."""
    return {"flag": f"flag {row['where']}", "environment": f"environment variable {row['where']}",
            "file": row["where"], "state": f"chosen in the TUI ({row['where']})"}.get(row["from"], row["from"])


def _from_file(settings: Settings, key: str, value: Any, default: Any) -> dict:
    found = settings.get(key)
    if found is not None:
        return _row(key, found.value if value is None else value, "file", f"{settings.path}:{found.line}")
    return _row(key, default, "default", None)


def _theme_row(settings: Settings) -> dict:
    from_file = settings.get("theme")
    chosen = _chosen(None if from_file is None else from_file.value)
    if chosen is not None:
        return _row("theme", chosen, "state", str(state_path()))
    if from_file is not None:
        return _row("theme", from_file.value, "file", f"{settings.path}:{from_file.line}")
    return _row("theme", None, "default", None)


def _row(key: str, value: Any, source: str, where: str | Sequence[str] | None) -> dict:
    return {"key": key, "value": list(value) if isinstance(value, tuple) else value, "from": source, "where": where}
