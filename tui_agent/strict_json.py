"""JSON that a person types, read strictly, and JSON for scripts, written strictly.

Python's json reads NaN, Infinity and 1e999 (as inf) and writes them back as bare NaN and Infinity,
which no other JSON reader accepts. The CLI and the TUI both read through `parse_json`, so a
request or result holding one is refused where it is typed, by one rule, never stored.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import UserError

EXAMPLE = "pass an object such as '{\"name\": \"Ada\"}'"
RESULT_EXAMPLE = "pass what the service returned, such as '{\"message_id\": \"<...>\"}'"  # an effect's result


class _NotFinite(ValueError):
    pass


def _refuse(token: str) -> float:
    raise _NotFinite(token)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 is valid JSON text but no float holds it
        raise _NotFinite(text)
    return value


def parse_json(text: str, source: str, more: str = "", example: str = EXAMPLE) -> Any:
    """`text` as JSON, or a one-line UserError naming `source` that says what to type instead (`example`)."""
    try:
        return json.loads(text, parse_constant=_refuse, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise UserError(f"{source} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                        f"{example}{more}") from None
    except _NotFinite as e:
        raise UserError(f"{source} holds {e}, which is not a finite number; use a number such as 1.5, "
                        "or null") from None


def finite(value: Any) -> Any:
    """`value` with every NaN and infinity replaced by None, for strict output of rows stored before
    input was read strictly (they may hold them; JSON has no way to write them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
