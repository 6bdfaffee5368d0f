"""Step results as JSON: small ones inline in the journal, large ones as artifacts of the run (a file, or a row of
a server's `artifacts` table: store/artifacts.py decides) with the journal holding their relative path."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..store import artifacts
from ..store.base import Store
from ..strict_json import unreadable

ARTIFACT_THRESHOLD = 32 * 1024  # bytes of JSON; above this a result is kept as an artifact


class ResultNotJSON(TypeError):
    pass


def _encoder() -> Callable[[Any], str]:
    """json's C encoder built once: JSONEncoder.encode builds it anew at every call, two thirds of the cost of
    a small step's result. No circular-reference table: a value that holds itself ends in RecursionError."""
    base = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    make = json.encoder.c_make_encoder   # type: ignore[attr-defined]  # in every json.encoder, not in typeshed
    if make is None:   # a Python without the C accelerator
        return base.encode
    built = make(None, base.default, json.encoder.encode_basestring, None, ":", ",", False, False, False)
    return lambda value: "".join(built(value, 0))


_ENCODE = _encoder()
# What encode wrote, read back without json.loads's checks for text a person typed (a byte-order mark, spaces
# around it, text after it): a third of the time on the step path.
_DECODE = json.JSONDecoder().raw_decode


def encode(value: Any, what: str, name: str | None = None) -> str:
    """`what` (and `name`, quoted) say who returned `value` in the error; they are joined only then, off the
    step path."""
    try:
        return _ENCODE(value)
    except RecursionError:
        what = what if name is None else f"{what} {name!r}"
        raise ResultNotJSON(f"{what} returned a value that holds itself or is nested too deeply to be JSON; "
                            "return dicts, lists, strings, numbers, booleans or None") from None
    except (TypeError, ValueError) as e:
        what = what if name is None else f"{what} {name!r}"
        raise ResultNotJSON(f"{what} returned a value that is not JSON-serialisable ({e}); "
                            "return dicts, lists, strings, numbers, booleans or None") from None


def digest(args: tuple, kwargs: Mapping[str, Any]) -> str:
    """A step's arguments, short, as JSON with sorted keys. A value JSON cannot hold counts by its type's name alone: an
    object's repr may hold its address, which would differ on every run."""
    body = json.dumps([args, kwargs], sort_keys=True, ensure_ascii=False,
                      default=lambda value: f"<{type(value).__qualname__}>")
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def parse(encoded: str) -> Any:
    """A value as encode wrote it."""
    return _DECODE(encoded)[0]


def decode(store: Store, result: str | None, artifact: str | None, field: str = "a recorded result") -> Any:
    """A recorded result, inline or in its artifact; one that an older version or another program wrote and that
    cannot be read raises Unreadable naming `field`."""
    try:
        if artifact is not None:
            return parse(artifacts.load(store, artifact).decode("utf-8"))
        return None if result is None else parse(result)
    except (UnicodeDecodeError, RecursionError, ValueError) as e:
        found = unreadable(e, field)
        if found is None:
            raise
        raise found from None


def place(store: Store, artifact_dir: str, label: str, encoded: str) -> tuple[None, str]:
    """Keep a large result durably with the run's artifacts, before the row that names it commits; returns
    (None, its relative path)."""
    relative = f"{artifact_dir}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)}.json"
    artifacts.save(store, relative, encoded.encode("utf-8"))
    return None, relative
