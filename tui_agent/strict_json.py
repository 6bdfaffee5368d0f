"""JSON that a person types, read strictly; JSON for scripts, written strictly; JSON the store holds, read safely.

The CLI and the TUI read typed JSON through `parse_json`, and `check_value` holds a value made in Python to the
same rule: no NaN or Infinity, no text that is not Unicode, nothing deeper than MAX_DEPTH, no integer of more
than MAX_DIGITS digits, so nothing is stored that would break whoever reads it. `read_stored` reads what an
older version or another program stored. Why: docs/reliability.md, "When input or the environment is bad"."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .errors import Unreadable, UserError

EXAMPLE = "pass an object such as '{\"name\": \"Ada\"}'"
RESULT_EXAMPLE = "pass what the service returned, such as '{\"message_id\": \"<...>\"}'"  # an effect's result
MAX_DEPTH = 200          # arrays and objects inside each other
MAX_DIGITS = 4300        # Python's default int_max_str_digits: what any Python reads back
_TOO_LONG = 10 ** MAX_DIGITS
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")   # how a surrogate gets into JSON text as an escape


class _NotFinite(ValueError):
    pass


class _TooManyDigits(ValueError):
    pass


def _refuse(token: str) -> float:
    raise _NotFinite(token)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 is valid JSON text but no float holds it
        raise _NotFinite(text)
    return value


def _bounded_int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_DIGITS:
        raise _TooManyDigits(text)
    return int(text)


def text_problem(text: str) -> str | None:
    """What makes `text` something that cannot be stored as text, or None.

    That is a byte that is not UTF-8, or a lone surrogate. A command line's bytes that are not UTF-8 are handed
    over by Python as surrogate escapes, U+DC80 to U+DCFF."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code, at = ord(found.group()), found.start() + 1
    if 0xDC80 <= code <= 0xDCFF:
        return f"a byte that is not UTF-8 (0x{code - 0xDC00:02x} at character {at})"
    return f"a lone surrogate (\\u{code:04x} at character {at}), half of a character"


def _path(parts: tuple) -> str:
    """Where in a JSON value: `$`, `$.name`, `$.items[3]`, `$["a b"]`."""
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" if part.isidentifier()
                         else f"[{json.dumps(part)}]" for part in parts)


SURROGATE_ADVICE = "remove it, or write the whole character"
DIGITS_ADVICE = "put a number that long in a string"
DEPTH_ADVICE = "flatten it"


def value_problem(value: Any, max_depth: int | None = MAX_DEPTH) -> tuple[str, str] | None:
    """What makes `value` JSON that cannot be stored and read back, and what to do instead, or None.

    That is a string or key that is not Unicode, an integer of more than MAX_DIGITS digits, or, with `max_depth`, arrays
    and objects nested deeper. Walked without recursion, so any depth Python built can be looked at."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 0, ())]
    while stack:
        item, depth, parts = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found is not None:
                return (f"a lone surrogate (\\u{ord(found.group()):04x}) at {_path(parts)}, half of a character",
                        SURROGATE_ADVICE)
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -_TOO_LONG < item < _TOO_LONG:
                return f"an integer of more than {MAX_DIGITS:,} digits at {_path(parts)}", DIGITS_ADVICE
        elif isinstance(item, (dict, list, tuple)):
            if max_depth is not None and depth >= max_depth:
                return f"arrays and objects nested deeper than {max_depth} levels", DEPTH_ADVICE
            children = list(item.items()) if isinstance(item, dict) else list(enumerate(item))
            for key, child in reversed(children):   # popped in document order: the first problem is named
                if isinstance(key, str) and _SURROGATE.search(key):
                    return (f"a lone surrogate in the key {json.dumps(key)} at {_path(parts)}, half of a character",
                            SURROGATE_ADVICE)
                stack.append((child, depth + 1, (*parts, key)))
    return None


def _refused(source: str, problem: str, advice: str) -> UserError:
    return UserError(f"{source} holds {problem}, which cannot be stored and read back; {advice}")


def parse_json(text: str, source: str, more: str = "", example: str = EXAMPLE) -> Any:
    """`text` as JSON, or a one-line UserError naming `source` that says what to type instead (`example`).

    Python's json reads NaN, Infinity and 1e999 (as inf) and writes them back as bare NaN and Infinity, which no
    other JSON reader accepts, so a request or result holding one is refused here, where it is typed. So is text
    that is not Unicode (a lone surrogate, such as JavaScript's JSON.stringify writes for a string cut in half, or
    a byte of a command line that is not UTF-8), nesting deeper than MAX_DEPTH (Python's own reader gives up at
    about 1,000 levels, fewer on a deep stack) and integers of more than MAX_DIGITS digits (Python refuses to read
    them)."""
    problem = text_problem(text)
    if problem is not None:
        raise UserError(f"{source} holds {problem}; pass UTF-8 text")
    try:
        value = json.loads(text, parse_constant=_refuse, parse_float=_finite_float, parse_int=_bounded_int)
    except json.JSONDecodeError as e:
        raise UserError(f"{source} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                        f"{example}{more}") from None
    except _NotFinite as e:
        raise UserError(f"{source} holds {e}, which is not a finite number; use a number such as 1.5, "
                        "or null") from None
    except _TooManyDigits:
        raise _refused(source, f"an integer of more than {MAX_DIGITS:,} digits", DIGITS_ADVICE) from None
    except RecursionError:
        raise _refused(source, f"arrays and objects nested deeper than {MAX_DEPTH} levels", DEPTH_ADVICE) from None
    # the walk only when the text could hold what it looks for: a surrogate's escape, or enough brackets
    if _SURROGATE_ESCAPE.search(text) or text.count("[") + text.count("{") > MAX_DEPTH:
        refusal = value_problem(value)
        if refusal is not None:
            raise _refused(source, *refusal)
    return value


def check_value(value: Any, source: str) -> Any:
    """`value`, made in Python and not typed, when it can be stored as JSON and read back.

    Else a one-line UserError naming `source`, by the rule `parse_json` reads typed JSON with."""
    problem = value_problem(value)
    if problem is not None:
        raise _refused(source, *problem)
    return value


def unreadable(error: BaseException, field: str) -> Unreadable | None:
    """What `error` says about a stored value it was raised on, as Unreadable naming `field`, or None.

    `error` was raised while the value was decoded or parsed. The value is unreadable when it is not UTF-8, too
    deep for Python's reader, or holds an integer longer than Python reads (the only ValueError json raises that
    is not a JSONDecodeError). Any other error gives None: a bug stays one."""
    if isinstance(error, UnicodeDecodeError):
        return Unreadable(field, f"it holds bytes that are not UTF-8 text ({error.reason} at byte {error.start})")
    if isinstance(error, RecursionError):
        return Unreadable(field, "it is nested too deeply to be read")
    if isinstance(error, ValueError) and not isinstance(error, json.JSONDecodeError):
        return Unreadable(field, f"it holds an integer of more than {MAX_DIGITS:,} digits")
    return None


def read_stored(text: str, field: str) -> Any:
    """A JSON value the store holds, as written, or Unreadable naming `field` when it cannot be used.

    NaN is read as written, since rows from before input was read strictly hold it. A value cannot be used when
    it is too deep to parse, holds an integer too long, or holds a lone surrogate (no store can take it back:
    every write of it would fail)."""
    try:
        value = json.loads(text, parse_int=_bounded_int)
    except (RecursionError, ValueError) as e:
        found = unreadable(e, field)
        if found is None:
            raise
        raise found from None
    if _SURROGATE_ESCAPE.search(text):
        problem = value_problem(value, max_depth=None)
        if problem is not None:
            raise Unreadable(field, f"it holds {problem[0]}")
    return value


def finite(value: Any) -> Any:
    """`value` with every NaN and infinity replaced by None.

    This is for strict output of rows stored before input was read strictly: they may hold them, and JSON has no
    way to write them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
