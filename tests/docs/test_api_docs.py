"""The API reference (docs/reference/api.md) and the docstrings it is generated from: every public name is on the
page, and every object the page renders opens its docstring with one plain sentence on one line.

`mkdocs build --strict` (CI) catches a docstring whose `Args:` names a parameter that does not exist; it does not
catch a public name left without a docstring, nor a summary that runs on, which is what these tests are for."""

import importlib
import inspect
import re
from functools import cached_property

import yaml
from helpers import ROOT, registry_of, start_and_work

import tui_agent
from tui_agent.store import open_store

REFERENCE = ROOT / "docs" / "reference" / "api.md"
ERRORS = ["TemporaryError", "NotReachable", "PermanentError", "EffectNotDone", "EffectDeclined", "ParkRun",
          "StaleAttempt"]


def rendered() -> dict[str, object]:
    """Each `::: path` block of the reference page: the path, and its `members` option (None: every public one)."""
    blocks: dict[str, object] = {}
    path, options = None, []
    for line in REFERENCE.read_text().splitlines() + [""]:
        if path is not None and line.startswith("    "):
            options.append(line[4:])
            continue
        if path is not None:
            blocks[path] = ((yaml.safe_load("\n".join(options)) or {}).get("options") or {}).get("members")
            path, options = None, []
        if line.startswith("::: "):
            path = line[4:].strip()
    return blocks


def resolve(path: str) -> object:
    """The object a `::: path` names: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(path)


def public_members(cls: type, members: object) -> dict[str, object]:
    """The methods and properties `cls` itself defines that the page shows: all public ones unless `members`
    lists some (or is false: none)."""
    if members is False:
        return {}
    own = {name: value for name, value in vars(cls).items() if not name.startswith("_")
           and (inspect.isfunction(value) or isinstance(value, (property, cached_property, classmethod, staticmethod)))}
    return own if members is None else {name: own[name] for name in members}


def summary_problem(doc: str | None) -> str | None:
    """What is wrong with a docstring's first line, or None: it must be one sentence, ended by a period, with
    nothing of it on the next line."""
    if not doc or not doc.strip():
        return "has no docstring"
    lines = inspect.cleandoc(doc).splitlines()
    first = lines[0]
    if not first.endswith("."):
        return f"its first line does not end a sentence: {first!r}"
    if re.search(r"[.!?]\s+\S", first):
        return f"its first line holds more than one sentence: {first!r}"
    if len(lines) > 1 and lines[1].strip():
        return f"its first sentence runs on to the next line: {first!r} / {lines[1].strip()!r}"
    return None


def documented_objects() -> dict[str, object]:
    """Every object the reference renders, and each public method and property of the classes among them."""
    found: dict[str, object] = {}
    for path, members in rendered().items():
        obj = resolve(path)
        found[path] = obj
        if inspect.isclass(obj):
            for name, member in public_members(obj, members).items():
                found[f"{path}.{name}"] = member
    return found


def test_every_public_name_of_tui_agent_is_in_the_api_reference():
    on_page = {path.removeprefix("tui_agent.") for path in rendered()}
    missing = [name for name in tui_agent.__all__ if name != "__version__" and name not in on_page]
    assert missing == [], f"add a `::: tui_agent.NAME` block to {REFERENCE.name} for each"


def test_every_object_the_reference_renders_opens_with_one_sentence_on_one_line():
    problems = {path: summary_problem(inspect.getdoc(obj) if isinstance(obj, (property, cached_property))
                                      else obj.__doc__)
                for path, obj in documented_objects().items()}
    assert {path: why for path, why in problems.items() if why} == {}


def test_every_public_method_and_property_of_context_is_documented_in_the_reference():
    documented = documented_objects()
    public = [name for name in dir(tui_agent.Context) if not name.startswith("_")]
    assert public, "Context has public methods"
    assert [name for name in public if f"tui_agent.Context.{name}" not in documented] == []


def test_the_one_sentence_rule_refuses_a_missing_docstring_a_second_sentence_and_a_run_on():
    assert summary_problem(None) == "has no docstring"
    assert "more than one sentence" in summary_problem("Run it. Then stop.")
    assert "does not end" in summary_problem("Run `fn` once and journal\n    its result.")
    assert "runs on" in summary_problem("Run `fn` once.\n    A replay returns its result.")
    assert "does not end" in summary_problem("Plateau(repeats: int | None = 3)")   # a dataclass's own __doc__
    assert summary_problem("Run `fn(*args)` once, as `ctx.step` does.\n\n    Args:\n        fn: It.") is None


def test_the_errors_an_agent_raises_are_exported_from_tui_agent_as_the_runtime_s_own_classes():
    from tui_agent import errors
    from tui_agent.runtime import effects

    namespace: dict = {}
    exec("from tui_agent import *", namespace)
    for name in ERRORS:
        assert name in tui_agent.__all__
        assert namespace[name] is getattr(errors, name, None) or namespace[name] is effects.StaleAttempt


def test_a_parkrun_imported_from_tui_agent_parks_the_run(tmp_path):
    """The export is the class the worker catches: raising it parks the run instead of failing it."""
    def run(ctx, request):
        ctx.step("look", lambda: 1)
        raise tui_agent.ParkRun("the working tree moved")

    store = open_store(tmp_path / "runs.db")
    try:
        start_and_work(store, registry_of(tui_agent.Agent("parks", run)), "parks", {})
        (parked,) = store.conn.execute("SELECT status, reason, error FROM runs").fetchall()
    finally:
        store.close()
    assert tuple(parked)[:2] == ("parked", "environment")
