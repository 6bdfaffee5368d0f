"""The import rule of docs/architecture.md section 4 (Layers and the import rule): the engine, services/
included, never imports textual, neither directly nor through the TUI's own modules (`app`, `messages`,
`screens`, `widgets`), by an absolute import or a relative one (`from ..screens import runs`, `from . import x`)."""

import ast
import importlib
import re
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGE = ROOT / "tui_agent"
# Every entry must exist: a renamed or deleted one fails the test instead of silently checking less.
ENGINE = ["runtime", "store", "services", "models", "agents", "sim", "operate.py", "report.py", "states.py",
          "format.py", "testing.py", "safe_text.py", "filters.py"]
TUI = ["textual", "tui_agent.app", "tui_agent.messages", "tui_agent.screens", "tui_agent.session",
       "tui_agent.widgets"]


def engine_files(package: Path = PACKAGE, parts: list[str] = ENGINE) -> list[Path]:
    """The Python files of the engine; a listed package or module that does not exist is an error."""
    files = []
    for part in parts:
        path = package / part
        found = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        if not found:
            raise FileNotFoundError(f"ENGINE lists {part}, but {path} holds no Python file: update ENGINE")
        files += found
    return files


def imported_modules(path: Path, package: Path = PACKAGE):
    """Every module `path` imports, relative imports resolved against its place in `package`: in
    tui_agent/store/x.py, `from ..screens import runs` gives tui_agent.screens and tui_agent.screens.runs."""
    here = path.relative_to(package.parent).with_suffix("").parts[:-1]   # the file's own package
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(here[:len(here) - node.level + 1]) if node.level else []
            module = ".".join(base + (node.module.split(".") if node.module else []))
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def offenders(files: list[Path], package: Path = PACKAGE) -> list[str]:
    return sorted({f"{f.relative_to(package)}: {name}" for f in files for name in imported_modules(f, package)
                   if any(name == tui or name.startswith(tui + ".") for tui in TUI)})


def test_the_engine_never_imports_textual_or_the_tui():
    assert offenders(engine_files()) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    package = root / "tui_agent"
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_the_checker_sees_absolute_and_relative_imports_of_the_tui(tmp_path):
    package = _tree(tmp_path, {
        "__init__.py": "",
        "store/__init__.py": "from . import runs\n",
        "store/runs.py": "import os\nfrom ..screens import runs\n",
        "runtime/__init__.py": "",
        "runtime/loop.py": "from .. import widgets\nfrom . import waits\nfrom .waits import sleep\n",
        "runtime/waits.py": "from tui_agent.store.runs import claim_run\n",
        "operate.py": "import textual.app as app\n",
        "report.py": "from textual import on\nfrom .messages import DataChanged\n",
        "states.py": "from .runtime import loop\n",
    })
    found = offenders(engine_files(package, ["runtime", "store", "operate.py", "report.py", "states.py"]), package)
    assert found == [
        "operate.py: textual.app",
        "report.py: textual",
        "report.py: textual.on",
        "report.py: tui_agent.messages",
        "report.py: tui_agent.messages.DataChanged",
        "runtime/loop.py: tui_agent.widgets",
        "store/runs.py: tui_agent.screens",
        "store/runs.py: tui_agent.screens.runs",
    ]


def test_a_listed_package_that_does_not_exist_fails_loudly(tmp_path):
    package = _tree(tmp_path, {"runtime/loop.py": ""})
    with pytest.raises(FileNotFoundError, match="ENGINE lists sim"):
        engine_files(package, ["runtime", "sim"])
    with pytest.raises(FileNotFoundError, match="ENGINE lists empty"):
        (package / "empty").mkdir()
        engine_files(package, ["empty"])


# What screens and widgets take from the store: its reads, each by name (docs/architecture.md section 4). Their
# writes go through operate.py, as the command line's do.
SCREEN_READS = {
    "tui_agent.store": {"Store"},                                   # the type a session hands them
    "tui_agent.store.approvals": {"pending"},
    "tui_agent.store.effects": {"effects_page", "in_doubt"},
    "tui_agent.store.events": {"events_page", "last_event", "last_event_like"},
    "tui_agent.store.journal": {"checkpoint_for", "cost_window"},
    "tui_agent.store.rows": {"EffectRow", "RunRow"},                # the types of rows the reads return
    "tui_agent.store.runs": {"RunNotFound", "counts", "data_version", "each_run", "get_run", "recorded_positions"},
    "tui_agent.store.schedules": {"listing", "recent_runs", "schedule_events"},
    "tui_agent.store.workers": {"knows", "workers_listing"},
}
# The verbs a store function that writes is named by (its first word): `add_event`, `claim_run`, `settle_run`.
WRITE_VERBS = {"add", "set", "write", "insert", "update", "delete", "claim", "settle", "record", "mark", "remove",
               "save", "release", "renew", "create", "drop", "put", "cancel", "decide", "prune", "take", "hand"}


def is_write(name: str) -> bool:
    """Whether a store name reads as a write: its first word is one of WRITE_VERBS (`recorded_positions` is not)."""
    return name.split("_")[0].lower() in WRITE_VERBS


def store_imports(path: Path, package: Path = PACKAGE) -> set[tuple[str, str]]:
    """The (module, name) pairs a file imports from tui_agent.store and its modules, relative imports resolved;
    `import tui_agent.store.x` gives (module, "*"), the whole module."""
    here = path.relative_to(package.parent).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = list(here[:len(here) - node.level + 1]) if node.level else []
            module = ".".join(base + (node.module.split(".") if node.module else []))
            if module == "tui_agent.store" or module.startswith("tui_agent.store."):
                found.update((module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update((alias.name, "*") for alias in node.names if alias.name.startswith("tui_agent.store"))
    return found


def store_refusals(files: list[Path], package: Path = PACKAGE, reads: dict = SCREEN_READS) -> list[str]:
    """Every name `files` take from the store that is a write by its name, or is not one of `reads`."""
    refused = set()
    for path in files:
        for module, name in store_imports(path, package):
            why = "a write" if is_write(name) else None if name in reads.get(module, ()) else "not in SCREEN_READS"
            if why:
                refused.add(f"{path.relative_to(package)}: {module}.{name} ({why})")
    return sorted(refused)


def test_screens_and_widgets_call_the_stores_reads_and_write_through_operate():
    """docs/architecture.md section 4: a screen may call the store's read functions, never its writes, which go
    through operate.py; a new read is added to SCREEN_READS by name, and an entry no file imports fails too."""
    files = engine_files(PACKAGE, ["screens", "widgets"])
    assert store_refusals(files) == []
    assert not [name for names in SCREEN_READS.values() for name in names if is_write(name)]
    taken = {pair for path in files for pair in store_imports(path)}
    listed = {(module, name) for module, names in SCREEN_READS.items() for name in names}
    assert taken == listed, sorted(listed - taken)
    for module, name in listed:
        assert hasattr(importlib.import_module(module), name), f"SCREEN_READS names {module}.{name}, which is gone"


def test_the_read_check_refuses_a_planted_write(tmp_path):
    package = _tree(tmp_path, {
        "screens/run.py": "from ..store.runs import claim_run, get_run\nfrom ..store import runs\n",
        "widgets/events.py": "import tui_agent.store.events\nfrom tui_agent.store.events import add_event\n",
        "widgets/ok.py": "from ..store.runs import recorded_positions\nfrom ..report import run_view\n",
    })
    files = engine_files(package, ["screens", "widgets"])
    reads = {"tui_agent.store.runs": {"get_run", "recorded_positions"}, "tui_agent.store.events": {"add_event"}}
    assert store_refusals(files, package, reads) == [
        "screens/run.py: tui_agent.store.runs (not in SCREEN_READS)",
        "screens/run.py: tui_agent.store.runs.claim_run (a write)",
        "widgets/events.py: tui_agent.store.events.* (not in SCREEN_READS)",
        "widgets/events.py: tui_agent.store.events.add_event (a write)",
    ]


def test_screens_and_widgets_never_import_the_app():
    """Screens and widgets get the session (tui_agent/session.py), never the App: no import of app.py, not
    even one under TYPE_CHECKING (the walk sees every import statement, in any block)."""
    assert app_importers(engine_files(PACKAGE, ["screens", "widgets"])) == []


def app_importers(files: list[Path], package: Path = PACKAGE) -> list[str]:
    return sorted({f"{f.relative_to(package)}: {name}" for f in files for name in imported_modules(f, package)
                   if name == "tui_agent.app" or name.startswith("tui_agent.app.")})


def test_the_app_check_sees_type_checking_imports(tmp_path):
    package = _tree(tmp_path, {
        "screens/run_actions.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..app import TuiAgentApp\n",
        "widgets/footer.py": "from .. import app\n",
    })
    assert app_importers(engine_files(package, ["screens", "widgets"]), package) == ["screens/run_actions.py: tui_agent.app", "screens/run_actions.py: tui_agent.app.TuiAgentApp",
                     "widgets/footer.py: tui_agent.app"]


# The modules that may touch what `Context` keeps private: the class itself and the journal recorder it owns.
CONTEXT_INSIDE = ["runtime/context.py", "runtime/journal.py"]


def context_privates(package: Path = PACKAGE) -> set[str]:
    """The private names of `Context`: its `_methods` and every `self._x` its methods assign."""
    tree = ast.parse((package / "runtime" / "context.py").read_text())
    [context] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Context"]
    names = set()
    for node in ast.walk(context):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("_") and not node.name.startswith("__"):
            names.add(node.name)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
              and node.value.id == "self" and node.attr.startswith("_")):
            names.add(node.attr)
    return names


def _is_context(node: ast.expr, annotated: set[str]) -> bool:
    """An expression that holds a Context by the code's own conventions: `ctx`, `context`, `x.ctx`, or a name
    annotated `Context`."""
    if isinstance(node, ast.Name):
        return node.id in ("ctx", "context") or node.id in annotated
    return isinstance(node, ast.Attribute) and node.attr in ("ctx", "context")


def _annotated_context(tree: ast.AST) -> set[str]:
    """The names a module annotates as a Context (`x: Context`, `x: Context | None`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            hint, name = node.annotation, node.arg
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            hint, name = node.annotation, node.target.id
        else:
            continue
        if "Context" in {n.id for n in ast.walk(hint) if isinstance(n, ast.Name)} | (
                {hint.value} if isinstance(hint, ast.Constant) else set()):
            names.add(name)
    return names


def context_reach(files: list[Path], package: Path = PACKAGE) -> list[str]:
    """Every `x._name` outside CONTEXT_INSIDE on what is a Context: a private attribute of `ctx` (and the other
    Context names of _is_context), or one of Context's own private names on `self` in a subclass of Context, or
    defined there to override it."""
    privates = context_privates(package)
    found = set()
    for path in files:
        where = path.relative_to(package).as_posix()
        if where in CONTEXT_INSIDE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        annotated = _annotated_context(tree)
        subclasses = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                      and any(ast.unparse(base).split(".")[-1] == "Context" for base in node.bases)]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and _is_context(node.value, annotated)):
                found.add(f"{where}: {ast.unparse(node)}")
        for cls in subclasses:
            for node in ast.walk(cls):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                        and node.attr in privates):
                    found.add(f"{where}: {ast.unparse(node)} (in {cls.name}, a Context)")
                elif isinstance(node, ast.FunctionDef) and node.name in privates:
                    found.add(f"{where}: def {node.name} (in {cls.name}, a Context)")
    return sorted(found)


def test_only_the_context_and_its_recorder_touch_what_the_context_keeps_private():
    """The journal's private state is the recorder's (runtime/journal.py): effects, waits, loops, commands, the
    worker and the replay cassette go through it or through Context's public calls."""
    for inside in CONTEXT_INSIDE:
        assert (PACKAGE / inside).is_file(), f"CONTEXT_INSIDE lists {inside}, which does not exist"
    assert {"_journal", "_store", "_step"} <= context_privates()
    assert context_reach(sorted(PACKAGE.rglob("*.py"))) == []


def test_the_context_check_sees_every_way_of_reaching_in(tmp_path):
    package = _tree(tmp_path, {
        "runtime/context.py": ("class Context:\n    def __init__(self):\n        self._store = 1\n"
                               "        self.public = 2\n    def _next(self):\n        return self._store\n"),
        "runtime/journal.py": "def fine(ctx):\n    return ctx._store\n",
        "runtime/effects.py": ("class _Effect:\n    def attempt(self):\n        return self.ctx._next()\n\n"
                               "def perform(ctx):\n    return ctx._store, ctx.public\n"),
        "runtime/worker.py": ("from .context import Context\n\ndef turn(run: Context | None, other):\n"
                              "    return run._store, other._store\n"),
        "replay.py": ("from .runtime import context\n\nclass _Cassette(context.Context):\n"
                      "    def _next(self):\n        return self._store, self._own\n"),
    })
    assert context_reach(sorted(package.rglob("*.py")), package) == [
        "replay.py: def _next (in _Cassette, a Context)",
        "replay.py: self._store (in _Cassette, a Context)",
        "runtime/effects.py: ctx._store",
        "runtime/effects.py: self.ctx._next",
        "runtime/worker.py: run._store",
    ]


# What the command line takes from the store itself, each for a reason; every write it makes goes through
# operate.py, or runtime/here.work_here for `run` (docs/architecture.md section 4).
CLI_FROM_STORE = {
    "tui_agent.store": {"DatabaseError", "Store", "default_path", "open_store",   # opening one, its errors
                        "artifacts", "notices",    # artifact and watch read them, db init says where artifacts go
                        "prune"},                  # prune's statuses, db vacuum's free space: reads
    "tui_agent.store.base": {"on_server"},     # which dialect (db vacuum, where the data folder is)
    "tui_agent.store.copying": {"copy_database", "open_source", "target_for_copy"},   # copy: writes a new target
    "tui_agent.store.exports": {"export_runs", "open_export"},   # export writes a new file; import's check reads
    "tui_agent.store.doctor": {"Diagnosis", "diagnose"},   # doctor: read only, never creates a file
    "tui_agent.store.environment": {"stop_for"},   # a read's database error said in one line
    "tui_agent.store.host": {"process_alive"},     # logs -f: whether the worker's process is still there
    "tui_agent.store.runs": {"each_run", "get_run", "resolve_run", "run_exists"},   # reads
    "tui_agent.store.schema": {"SCHEMA_VERSION"},
    "tui_agent.store.workers": {"find_worker"},    # logs: a worker's row by name or pid
}


def test_the_cli_takes_from_the_store_only_its_reads_and_its_opening():
    """A write the command line makes goes through operate.py: a new import from the store is refused until it
    is added to CLI_FROM_STORE with its reason, and an entry no file imports any more fails too."""
    taken = {pair for path in (PACKAGE / "cli").glob("*.py") for pair in store_imports(path)}
    allowed = {(module, name) for module, names in CLI_FROM_STORE.items() for name in names}
    assert taken == allowed, (sorted(taken - allowed), sorted(allowed - taken))


# An SQL statement as the code writes them: keywords in capitals (docs/architecture.md section 4: SQL lives in
# store/). Prose that names a statement's verb in lower case ("select a step") is not one.
SQL = re.compile(r"\bSELECT\b[\s\S]*?\bFROM\b|\bINSERT\s+(?:OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b"
                 r"|\bDELETE\s+FROM\b|\bCREATE\s+(?:TABLE|INDEX|TRIGGER)\b|\bPRAGMA\s+\w+")


def sql_outside_the_store(files: list[Path], package: Path = PACKAGE) -> list[str]:
    """Every string constant (an f-string's literal parts included) in a module outside store/ that holds an SQL
    statement, as `path:line: the statement's start`."""
    found = set()
    for path in files:
        where = path.relative_to(package)
        if where.parts[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.JoinedStr):
                text = "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if statement := SQL.search(text):
                found.add(f"{where.as_posix()}:{node.lineno}: {' '.join(statement.group().split())[:40]}")
    return sorted(found)


def test_sql_statements_live_only_in_the_store():
    """Code outside store/ asks the store's functions (operate.resume's budget: runs.set_budget; the worker's new
    code version: runs.set_code_version; the simulator's ledger trace: store/sim_ledger.py)."""
    assert sql_outside_the_store(sorted(PACKAGE.rglob("*.py"))) == []


def test_the_sql_check_sees_plain_and_formatted_statements(tmp_path):
    package = _tree(tmp_path, {
        "store/runs.py": 'def get(conn):\n    return conn.execute("SELECT * FROM runs")\n',
        "operate.py": ('def resume(conn, run, f):\n    conn.execute("UPDATE runs SET budget = ? WHERE id = ?", run)\n'
                       '    conn.execute(f"DELETE FROM {f} WHERE id = 1")\n'
                       '    return "select a step, then insert into the timeline: prose, not SQL"\n'),
        "sim/scenario.py": ('TRACE = """\nCREATE TRIGGER t AFTER INSERT ON effects BEGIN\n'
                            '    INSERT INTO trace (state)\n    VALUES (NEW.state); END;\n"""\n'
                            'QUERY = ("SELECT seq, state "\n         "FROM trace")\n'),
    })
    assert sql_outside_the_store(sorted(package.rglob("*.py")), package) == [
        "operate.py:2: UPDATE runs SET",
        "operate.py:3: DELETE FROM",
        "sim/scenario.py:1: CREATE TRIGGER",
        "sim/scenario.py:6: SELECT seq, state FROM",
    ]
