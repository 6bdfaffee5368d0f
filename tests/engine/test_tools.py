"""Tools: the schema a function's signature and docstring give the model, the decoration-time
refusals, and the validator that turns a malformed call into lines the model can act on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import pytest

from tui_agent.runtime.tools import Tool, tool

if TYPE_CHECKING:
    from tui_agent.runtime.context import Context


@tool
def search(query: str, limit: int, ratio: float, exact: bool, tags: list[str], filters: dict,
           since: str | None = None, until: str | None = None,
           order: Literal["new", "old"] = "new", page: int = 1) -> list:
    """Search the notes.

    Several lines of
    description.

    Args:
        query: what to look for,
            across two lines
        limit (int): at most this many
        order: newest or oldest first

    Returns:
        the notes

    Example:
        order: old
    """
    return []


def test_schema_from_signature_and_args_section():
    assert search.input_schema == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for, across two lines"},
            "limit": {"type": "integer", "description": "at most this many"},
            "ratio": {"type": "number"},
            "exact": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "filters": {"type": "object"},
            "since": {"type": "string", "default": None},
            "until": {"type": "string", "default": None},
            "order": {"type": "string", "enum": ["new", "old"], "description": "newest or oldest first",
                      "default": "new"},
            "page": {"type": "integer", "default": 1},
        },
        "required": ["query", "limit", "ratio", "exact", "tags", "filters"],
        "additionalProperties": False,
    }
    assert search.description == "Search the notes. Several lines of description."


def test_nested_and_untyped_hints():
    @tool
    def f(grid: list[list[int]], scores: dict[str, float], anything, optional_list: list[str] | None):
        """F."""

    assert f.input_schema["properties"] == {
        "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
        "anything": {},
        "optional_list": {"type": "array", "items": {"type": "string"}},
    }
    assert f.input_schema["required"] == ["grid", "scores", "anything", "optional_list"]


def test_bare_and_called_decorator_give_the_same_tool():
    def read_file(path: str, max_lines: int = 200) -> str:
        """Read a text file from the workspace."""
        return f"{path}:{max_lines}"

    bare, called = tool(read_file), tool()(read_file)
    assert isinstance(bare, Tool)
    assert isinstance(called, Tool)
    assert bare.param() == called.param()
    assert bare.name == "read_file"
    assert bare.fn is read_file
    assert called("a.txt", max_lines=3) == "a.txt:3"


def test_explicit_name_description_and_schema_win():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}

    @tool(name="find", description="Find things.", schema=schema)
    def f(**kwargs):
        """Ignored docstring."""

    assert (f.name, f.description, f.input_schema) == ("find", "Find things.", schema)


def test_description_param_keeps_the_args_section():
    @tool(description="Override.")
    def f(path: str):
        """Original.

        Args:
            path: the file
        """

    assert f.description == "Override."
    assert f.input_schema["properties"]["path"] == {"type": "string", "description": "the file"}


def test_runtime_supplied_parameters_are_left_out():
    @tool(effect=True, key=lambda args: f"note:{args['to']}:{args['day']}", dedupe_ttl_s=86400)
    def send_note(ctx, to: str, day: str, body: str, key: str, token: str) -> dict:
        """Send a note."""

    assert list(send_note.input_schema["properties"]) == ["to", "day", "body"]
    assert send_note.input_schema["required"] == ["to", "day", "body"]
    assert send_note.supplied == frozenset({"ctx", "key", "token"})
    assert send_note.key({"to": "ann", "day": "mon"}) == "note:ann:mon"
    assert send_note.dedupe_ttl_s == 86400

    @tool
    def plain(ctx: Context, x: int):   # Context is never imported at run time: its hint is not resolved
        """Plain."""

    assert plain.supplied == frozenset({"ctx"})
    assert plain.input_schema["required"] == ["x"]


def test_missing_description_raises():
    def nodoc(x: int):
        pass

    with pytest.raises(TypeError, match="has no description: give it a docstring or description="):
        tool(nodoc)

    def only_args(x: int):
        """
        Args:
            x: a number
        """

    with pytest.raises(TypeError, match="no description"):
        tool(only_args)


@pytest.mark.parametrize("hint", [set, tuple[int, int], dict[int, str], int | str, int | str | None, Literal[b"x"]])
def test_unsupported_hint_raises_naming_the_parameter(hint):
    def f(fine: int, odd):
        """F."""

    f.__annotations__["odd"] = hint
    with pytest.raises(TypeError, match=r"tool 'f': parameter 'odd' has a type hint tools do not support"):
        tool(f)


def test_unsupported_nested_hint_names_the_whole_hint():
    def f(odd: list[set[int]]):
        """F."""

    with pytest.raises(TypeError, match=r"parameter 'odd' .*: list\[set\[int\]\]$"):
        tool(f)


@pytest.mark.parametrize("signature", ["*args", "**kwargs", "x, /"])
def test_parameters_not_passable_by_keyword_raise(signature):
    namespace: dict = {}
    exec(f'def f({signature}):\n    """F."""', namespace)
    with pytest.raises(TypeError, match="must be passable by keyword"):
        tool(namespace["f"])


def test_effect_without_key_raises():
    with pytest.raises(TypeError, match="effect=True needs key="):
        @tool(effect=True)
        def send(to: str):
            """Send."""


@pytest.mark.parametrize("option", [{"key": lambda a: "k"}, {"lookup": lambda k: None},
                                    {"dedupe_ttl_s": 60}, {"lookup_ttl_s": 60}, {"service": "mail"}])
def test_effect_options_on_a_non_effect_tool_raise(option):
    with pytest.raises(TypeError, match=f"{next(iter(option))} apply only to effect tools"):
        @tool(**option)
        def read(path: str):
            """Read."""


def test_key_or_token_parameter_on_a_non_effect_tool_raises():
    with pytest.raises(TypeError, match="only effect tools are given key and token"):
        @tool
        def get_setting(key: str):
            """Get a setting."""


def test_param_is_the_api_tool_definition():
    @tool
    def read_file(path: str, max_lines: int = 200) -> str:
        """Read a text file from the workspace.

        Args:
            path: the file, relative to the workspace
            max_lines: at most this many lines
        """

    assert read_file.param() == {
        "name": "read_file",
        "description": "Read a text file from the workspace.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file, relative to the workspace"},
                "max_lines": {"type": "integer", "description": "at most this many lines", "default": 200},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    }


def _valid_search(**changes):
    args = {"query": "q", "limit": 3, "ratio": 0.5, "exact": False, "tags": ["a"], "filters": {"x": [1]}}
    return {**args, **changes}


def test_valid_input_gives_no_errors():
    assert search.validate(_valid_search()) == []
    assert search.validate(_valid_search(ratio=2, since="2024", order="old", page=2)) == []


def test_optional_means_may_be_left_out_not_null():
    assert search.validate(_valid_search(since=None)) == ["since: expected string, got null"]


def test_each_kind_of_error_message():
    args = _valid_search(limit="ten", tags=["a", "b", 3], colour="red")
    del args["query"]
    assert search.validate(args) == [
        '(root): missing required property "query"',
        '(root): unexpected property "colour"',
        'limit: expected integer, got string "ten"',
        "tags/2: expected string, got number 3",
    ]


@pytest.mark.parametrize(("field", "value", "error"), [
    ("limit", True, "limit: expected integer, got boolean true"),
    ("limit", 3.0, "limit: expected integer, got number 3.0"),
    ("ratio", False, "ratio: expected number, got boolean false"),
    ("exact", 1, "exact: expected boolean, got number 1"),
    ("tags", "a", 'tags: expected array, got string "a"'),
    ("filters", [], "filters: expected object, got array"),
    ("order", "sideways", 'order: expected one of ["new", "old"], got string "sideways"'),
])
def test_json_types_not_python_types(field, value, error):
    assert search.validate(_valid_search(**{field: value})) == [error]


def test_nested_array_items_paths_sort_numerically():
    @tool
    def f(grid: list[list[int]]):
        """F."""

    grid = [[1], [2, "x"]] + [[0]] * 8 + [[None]]
    assert f.validate({"grid": grid}) == [
        'grid/1/1: expected integer, got string "x"',
        "grid/10/0: expected integer, got null",
    ]


def test_additional_properties_schema():
    @tool
    def f(scores: dict[str, float]):
        """F."""

    assert f.validate({"scores": {"a": 1, "b": "high"}}) == ['scores/b: expected number, got string "high"']


HAND_WRITTEN = {
    "type": "object",
    "properties": {
        "colour": {"enum": ["red", "green", 1]},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "x-unknown": True},
        "ids": {"type": "array", "items": {"type": ["string", "null"]}, "minItems": 1, "maxItems": 2},
        "meta": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
    },
    "required": ["count"],
}


@tool(schema=HAND_WRITTEN)
def hand(**kwargs):
    """Hand-written schema."""


def test_hand_written_schema_valid():
    assert hand.validate({"colour": 1, "count": 10, "name": "ab", "ids": ["x", None], "extra": 1}) == []


def test_hand_written_schema_errors():
    assert hand.validate({"colour": True, "count": 0, "name": "toolong", "ids": [], "meta": {}}) == [
        'colour: expected one of ["red", "green", 1], got boolean true',
        "count: expected at least 1, got 0",
        "ids: expected at least 1 items, got 0",
        'meta: missing required property "id"',
        "name: expected at most 5 characters, got 7",
    ]
    assert hand.validate({"count": 11, "name": "a", "ids": [1, 2, 3]}) == [
        "count: expected at most 10, got 11",
        "ids: expected at most 2 items, got 3",
        "ids/0: expected string or null, got number 1",
        "ids/1: expected string or null, got number 2",
        "ids/2: expected string or null, got number 3",
        "name: expected at least 2 characters, got 1",
    ]


def test_long_strings_are_cut_short_in_messages():
    assert search.validate(_valid_search(limit="x" * 100)) == [f'limit: expected integer, got string "{"x" * 36}...']


@pytest.mark.parametrize(("args", "shown"), [(["a"], "array"), ("a", 'string "a"'), (None, "null")])
def test_non_dict_root_is_one_error(args, shown):
    assert search.validate(args) == [f"(root): expected object, got {shown}"]
