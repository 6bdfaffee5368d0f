"""Which agents this process can run: the built-ins, the `tui_agent.agents` entry points,
and every `Agent` at the top level of each `--agents` module (a module name or a .py file)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import UserError
from ..models import kept_replies, provider_for
from ..store.runs import RunFields
from ..strict_json import check_value
from .agent import Agent, run_budget
from .tracebacks import agent_frames, innermost


class Registry:
    def __init__(self) -> None:
        self._agents: dict[str, Agent] = {}
        self.sources: list[str] = []  # the --agents specs as another process, from any folder, can load them

    def add(self, agent: Agent, origin: str) -> None:
        known = self._agents.get(agent.name)
        if known is not None and known is not agent:
            raise UserError(f"two agents are named {agent.name!r} (the second from {origin}); rename one")
        self._agents[agent.name] = agent

    def add_module(self, spec: str) -> int:
        """Register every Agent instance at the top level of `spec` (a module name or a .py file); returns
        how many."""
        module, source = import_agents(spec)
        found = [value for value in vars(module).values() if isinstance(value, Agent)]
        if not found:
            raise UserError(f"--agents {spec}: the module defines no Agent at its top level")
        for agent in found:
            self.add(agent, spec)
        self.sources.append(source)
        return len(found)

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise UserError(f"no agent named {name!r} (known: {known}); see tui-agent agents") from None

    def run_fields(self, agent_name: str, request: Any, model: str = "default",
                   budget: dict[str, float] | None = None, replies: list | None = None) -> RunFields:
        """The columns of a new run of `agent_name`, checked now so a mistake is a usage error, not a failed run.
        Every way a run is made (`start`, `run`, a schedule's fire, `ctx.start_run`, the simulator) comes
        here, so each gets its budget from `run_budget`: the agent's ceilings, `budget` over them, and the
        defaults for the rest; and a `scripted:FILE` model's replies (`script`), read from FILE now unless
        `replies` (a schedule's, kept when it was added) are given."""
        agent = self.get(agent_name)
        if not isinstance(request, dict):
            raise UserError("the input must be a JSON object, such as '{\"name\": \"Ada\"}'")
        check_value(request, "the input")
        replies = kept_replies(model) if replies is None else replies
        provider_for(model, agent.script, replies)
        return {"agent": agent.name, "agent_version": agent.version, "code_version": agent.code_version,
                "request": json.dumps(request, ensure_ascii=False),
                "budget": json.dumps(run_budget(agent.budget, budget)), "model": model,
                "script": None if replies is None else json.dumps(replies, ensure_ascii=False)}

    def __iter__(self):
        return iter(sorted(self._agents.values(), key=lambda a: a.name))

    def names(self) -> list[str]:
        return sorted(self._agents)


def _is_path(spec: str) -> bool:
    """True when `spec` names a file rather than a module. `./my_agents.py` and `agents/x.py` are files; `my_agents` and
    `pkg.agents` are module names."""
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def import_agents(spec: str) -> tuple[ModuleType, str]:
    """Import the module `spec` names and say how another process finds it again. That process may start from any folder
    (a worker the TUI starts): a file, or a module found in the current folder, is given as its absolute path."""
    if _is_path(spec):
        return _import_file(spec), str(Path(spec).resolve())
    module = _import_name(spec)
    return module, _portable(spec, module)


def _import_name(spec: str) -> ModuleType:
    """Import a module name; when it is not found, once more with the current folder on the import path."""
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as e:
        if e.name == spec.partition(".")[0] and _add_cwd():
            return _import_name(spec)
        raise _cannot_import(spec, e, spec) from None
    except ImportError as e:
        raise _cannot_import(spec, e, spec) from None
    except Exception as e:
        raise _raised_on_import(spec, e) from None


def _portable(spec: str, module: ModuleType) -> str:
    """How another process started elsewhere finds the module again. A one-file module found in the current folder is
    given as its path; anything else by its name (installed, or on PYTHONPATH, which that process inherits)."""
    file: str | None = getattr(module, "__file__", None)
    one_file = "." not in spec and not hasattr(module, "__path__")
    if one_file and file and Path(file).resolve().parent == Path.cwd().resolve():
        return str(Path(file).resolve())
    return spec


def _add_cwd() -> bool:
    """Put the current folder first on the import path, as `python -m` would. The console script does not do it. False
    when the folder is there already."""
    cwd = os.getcwd()
    if cwd in sys.path or "" in sys.path:
        return False
    sys.path.insert(0, cwd)
    importlib.invalidate_caches()
    return True


def _cannot_import(spec: str, error: ImportError, module: str) -> UserError:
    """The module `module` (what `spec` names) was not found, or its own code imports a module that is not: the
    second is said as such, where it happens, since naming the file again cures nothing."""
    missing = error.name if isinstance(error, ModuleNotFoundError) else None
    if missing and not f"{module}.".startswith(f"{missing}."):
        where = innermost([f for f in agent_frames(error) if not f["file"].startswith("<")])
        return UserError(f"--agents {spec}: its code imports {missing!r}, which this Python ({sys.executable}) cannot "
                         "find" + (f", at {where}" if where else "") + "; install it there, or fix the import")
    return UserError(f"--agents {spec}: cannot import it ({error}); name a module importable from here, or a "
                     "file such as ./my_agents.py")


def _raised_on_import(spec: str, error: Exception) -> UserError:
    """The module's own code raised while it was imported: one line with where, not a traceback."""
    where = innermost([f for f in agent_frames(error) if not f["file"].startswith("<")])  # not <frozen importlib>
    return UserError(f"--agents {spec}: importing it raised {type(error).__name__}: {error}"
                     + (f" at {where}" if where else "") + "; fix the module, then run the command again")


def _import_file(spec: str) -> ModuleType:
    """A .py file as the module named by its stem, its folder on the import path as for a script, so that it
    can import the modules beside it."""
    path = Path(spec).resolve()
    if not path.is_file():
        why = "not a file" if path.exists() else "no such file"
        raise UserError(f"--agents {spec}: {why}; name a .py file, such as ./my_agents.py, or a module")
    name = path.stem
    known = sys.modules.get(name)
    if known is not None:
        known_file: str | None = getattr(known, "__file__", None)
        if known_file and Path(known_file).resolve() == path:
            return known
        raise UserError(f"--agents {spec}: a module named {name!r} is imported already; rename the file")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:   # a name Python loads no module from: no .py
        raise UserError(f"--agents {spec}: Python cannot load a module from this file; name a .py file, such as "
                        "./my_agents.py, or a module")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except ImportError as e:
        del sys.modules[name]
        raise _cannot_import(spec, e, name) from None
    except Exception as e:
        del sys.modules[name]
        raise _raised_on_import(spec, e) from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def modules_named(specs: tuple[str, ...]) -> list[str]:
    """The modules that `--agents` options (or TUI_AGENT_AGENTS) name: each comma-separated, repeatable."""
    return [m.strip() for spec in specs for m in spec.split(",") if m.strip()]


def load_registry(modules: Iterable[str] = ()) -> Registry:
    # here, not at the top: importing importlib.metadata costs a command's start ~50 ms
    from importlib.metadata import entry_points

    from ..agents import BUILTIN

    registry = Registry()
    for agent in BUILTIN:
        registry.add(agent, "tui_agent.agents")
    for point in entry_points(group="tui_agent.agents"):
        loaded = point.load()
        for agent in loaded if isinstance(loaded, (list, tuple)) else [loaded]:
            registry.add(agent, f"entry point {point.name}")
    for module_name in modules:
        registry.add_module(module_name)
    return registry
