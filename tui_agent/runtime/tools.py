"""Tools a model may call inside a durable agent loop: a function plus the JSON Schema the model is
shown, and a check of the model's input against it before the call, so a malformed call becomes a
message the model can act on rather than a crash in the function or a wrong key in the effect ledger."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

SUPPLIED = frozenset({"ctx", "key", "token"})   # filled in by the runtime, never by the model
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", NoneType: "null"}
_ARG_LINE = re.compile(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")


@dataclass(frozen=True, eq=False)
class Tool:
    """A function the model may call in `ctx.agent_loop`, with the JSON Schema its input must fit.

    Make one with `@tool`, which derives the schema and the description from the function. A Tool still works
    as the plain function when called. A mistake in its options raises TypeError when it is made, not mid-run.

    Args:
        name: The name the model calls it by.
        description: What the model is told the tool does. It must not be empty.
        input_schema: The JSON Schema the model's input is checked against before the call.
        fn: The function, called with the model's input as keyword arguments.
        effect: Send each call through the effect ledger, at most once per key, as `ctx.effect` does.
        key: For an effect tool, a function of the validated input that returns the idempotency key.
        lookup: For an effect tool, `ctx.effect`'s `lookup`.
        dedupe_ttl_s: For an effect tool, `ctx.effect`'s `dedupe_ttl_s`.
        lookup_ttl_s: For an effect tool, `ctx.effect`'s `lookup_ttl_s`.
        service: For an effect tool, `ctx.effect`'s `service`.
    """

    name: str
    description: str
    input_schema: dict
    fn: Callable[..., Any]
    effect: bool = False
    key: Callable[[dict], str] | None = None
    lookup: Callable[..., Any] | None = None
    dedupe_ttl_s: float | None = None
    lookup_ttl_s: float | None = None
    service: str | None = None

    def __post_init__(self) -> None:
        """Refuse at decoration time what would otherwise surface mid-run, after the model has called."""
        if not self.description:
            raise TypeError(f"tool {self.name!r} has no description: give it a docstring or description=")
        if self.effect and self.key is None:
            raise TypeError(f"tool {self.name!r}: effect=True needs key=, "
                            "a function of the validated args giving the idempotency key")
        if not self.effect:
            options = ("key", "lookup", "dedupe_ttl_s", "lookup_ttl_s", "service")
            stray = [k for k in options if getattr(self, k) is not None]
            if stray:
                raise TypeError(f"tool {self.name!r}: {', '.join(stray)} apply only to effect tools (effect=True)")
            if self.supplied & {"key", "token"}:
                raise TypeError(f"tool {self.name!r}: only effect tools are given key and token; "
                                "rename the parameter")

    @property
    def supplied(self) -> frozenset[str]:
        """The runtime's values the function takes by parameter name, out of `ctx`, `key` and `token`."""
        return SUPPLIED & set(inspect.signature(self.fn).parameters)

    def param(self) -> dict:
        """Return the tool's definition for the Messages API's `tools` list."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def validate(self, args: Any) -> list[str]:
        """Check the model's input against `input_schema`, returning one line per problem sorted by path.

        An empty list means the input fits.
        """
        if not isinstance(args, dict):
            return [f"(root): expected object, got {_show(args)}"]
        errors: list[tuple[tuple, str]] = []
        _check(args, self.input_schema, (), errors)
        errors.sort(key=lambda e: e[0])   # siblings share a parent, so a path never compares str with int
        return [f"{'/'.join(map(str, path)) or '(root)'}: {message}" for path, message in errors]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, so a decorated function still works as one in tests and plain code."""
        return self.fn(*args, **kwargs)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         schema: dict | None = None, effect: bool = False, key: Callable[[dict], str] | None = None,
         lookup: Callable[..., Any] | None = None, dedupe_ttl_s: float | None = None,
         lookup_ttl_s: float | None = None, service: str | None = None) -> Tool | Callable[[Callable], Tool]:
    """Make a `Tool` of a function, used bare as `@tool` or with options as `@tool(effect=True, key=...)`.

    The function's docstring gives the description, and its `Args:` entries describe the parameters. The
    signature gives the input schema. Each parameter must be passable by keyword and have a type hint JSON can
    carry: str, int, float, bool, None, list, dict with str keys, Literal, or an Optional of one of them. A
    parameter without a default is required, and the model may send no other. The parameters `ctx`, `key` and
    `token` are filled in by the runtime, never by the model. Only an effect tool may take `key` and `token`.

    Args:
        fn: The function, when used bare.
        name: The tool's name, in place of the function's.
        description: The description, in place of the docstring's.
        schema: The input schema, in place of the one the signature implies.
        effect: Send each call through the effect ledger. Requires `key`.
        key: A function of the validated input that returns the idempotency key.
        lookup: Asks the service whether the effect with a key happened, as `ctx.effect`'s `lookup`.
        dedupe_ttl_s: How long the service ignores a repeated key, as in `ctx.effect`.
        lookup_ttl_s: How long `lookup` can tell, as in `ctx.effect`.
        service: The service's name, as in `ctx.effect`.

    Returns:
        The Tool, or a decorator that makes one when options are given.

    Raises:
        TypeError: The function or the options cannot make a tool the model could call.
    """
    def make(fn: Callable[..., Any]) -> Tool:
        summary, arg_docs = _parse_doc(fn.__doc__ or "")
        tool_name = name or fn.__name__
        input_schema = schema if schema is not None else _signature_schema(tool_name, fn, arg_docs)
        return Tool(tool_name, description or summary, input_schema, fn, effect, key, lookup,
                    dedupe_ttl_s, lookup_ttl_s, service)
    return make if fn is None else make(fn)


def _parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into the description and the `Args:` entries, so one docstring
    serves both the reader of the code and the model."""
    lines = inspect.cleandoc(doc).splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), len(lines))
    params: dict[str, str] = {}
    base, current = 0, None
    for line in lines[start + 1:]:
        text = line.strip()
        if not text:
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:   # the next section (Returns:, Raises:, ...)
            break
        base = base or indent
        entry = _ARG_LINE.fullmatch(text)
        if indent <= base and entry:
            current = entry[1]
            params[current] = entry[2]
        elif current:
            params[current] += " " + text
    return " ".join(" ".join(lines[:start]).split()), {k: " ".join(v.split()) for k, v in params.items()}


def _signature_schema(tool_name: str, fn: Callable[..., Any], arg_docs: dict[str, str]) -> dict:
    """The input schema the function's own signature implies; the model may send nothing else."""
    properties: dict[str, dict] = {}
    required: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise TypeError(f"tool {tool_name!r}: parameter {p.name!r} must be passable by keyword "
                            "(no *args, **kwargs or positional-only)")
        if p.name in SUPPLIED:
            continue
        hint = Any if p.annotation is p.empty else p.annotation
        if isinstance(hint, str):   # postponed; resolved one by one, as `ctx: Context` may be TYPE_CHECKING-only
            hint = eval(hint, fn.__globals__)
        try:
            prop = _hint_schema(hint)
        except TypeError:
            raise TypeError(f"tool {tool_name!r}: parameter {p.name!r} has a type hint tools do not support: "
                            f"{inspect.formatannotation(hint)}") from None
        if p.name in arg_docs:
            prop["description"] = arg_docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        elif type(p.default) in _SCALARS:
            prop["default"] = p.default
        properties[p.name] = prop
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _hint_schema(hint: Any) -> dict:
    """JSON Schema for one type hint; a bare TypeError for anything else (the caller names the parameter)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return {}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if list in (hint, origin):
        return {"type": "array", **({"items": _hint_schema(args[0])} if args else {})}
    if dict in (hint, origin):
        if args and args[0] is not str:   # JSON object keys are strings
            raise TypeError
        return {"type": "object", **({"additionalProperties": _hint_schema(args[1])} if args else {})}
    if origin is Literal and all(type(a) in _SCALARS for a in args):
        types = sorted({_SCALARS[type(a)] for a in args})
        return {"type": types[0] if len(types) == 1 else types, "enum": list(args)}
    if origin in (Union, UnionType) and len(args) == 2 and NoneType in args:
        return _hint_schema(next(a for a in args if a is not NoneType))
    raise TypeError


def _check(value: Any, schema: dict, path: tuple, errors: list[tuple[tuple, str]]) -> None:
    """Collect every violation under `path`; a value of the wrong type is not checked further."""
    def fail(message: str) -> None:
        errors.append((path, message))

    wanted = schema.get("type")
    if wanted is not None:
        wanted = [wanted] if isinstance(wanted, str) else wanted
        if not any(_is(value, t) for t in wanted):
            fail(f"expected {' or '.join(wanted)}, got {_show(value)}")
            return
    if "enum" in schema and not any(_equal(value, e) for e in schema["enum"]):
        fail(f"expected one of {json.dumps(schema['enum'])}, got {_show(value)}")
    bounds = _bounds(value)
    if bounds:
        low, high, size, unit = bounds
        if low in schema and size < schema[low]:
            fail(f"expected at least {schema[low]}{unit}, got {size}")
        if high in schema and size > schema[high]:
            fail(f"expected at most {schema[high]}{unit}, got {size}")
    if isinstance(value, dict):
        _check_object(value, schema, path, errors)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _check(item, schema["items"], path + (i,), errors)


def _check_object(value: dict, schema: dict, path: tuple, errors: list[tuple[tuple, str]]) -> None:
    properties, extra = schema.get("properties", {}), schema.get("additionalProperties", True)
    errors.extend((path, f"missing required property {json.dumps(name)}")
                  for name in schema.get("required", []) if name not in value)
    for name, item in value.items():
        if name in properties:
            _check(item, properties[name], path + (name,), errors)
        elif extra is False:
            errors.append((path, f"unexpected property {json.dumps(name)}"))
        elif isinstance(extra, dict):
            _check(item, extra, path + (name,), errors)


def _bounds(value: Any) -> tuple[str, str, float, str] | None:
    """The min/max keywords that apply to this kind of value, and what they measure."""
    if _is(value, "number"):
        return "minimum", "maximum", value, ""
    if isinstance(value, str):
        return "minLength", "maxLength", len(value), " characters"
    if isinstance(value, list):
        return "minItems", "maxItems", len(value), " items"
    return None


def _is(value: Any, json_type: str) -> bool:
    """JSON's types, not Python's: True is not 1, and 3.0 is a number but not an integer."""
    if isinstance(value, bool):
        return json_type == "boolean"
    if json_type == "number":
        return isinstance(value, (int, float))
    return isinstance(value, {"string": str, "integer": int, "boolean": bool, "array": list,
                              "object": dict, "null": NoneType}[json_type])


def _equal(a: Any, b: Any) -> bool:
    """Python's == with True and 1 kept apart, as JSON keeps them."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _show(value: Any) -> str:
    """A value as the model sent it: its JSON kind, and for a scalar the value itself, cut short."""
    kind = next((t for t in ("boolean", "number", "string", "null", "array", "object") if _is(value, t)), None)
    if kind in ("boolean", "number", "string"):
        shown = json.dumps(value)
        return f"{kind} {shown if len(shown) <= 40 else shown[:37] + '...'}"
    return kind or type(value).__name__
