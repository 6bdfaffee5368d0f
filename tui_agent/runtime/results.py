"""Step results as JSON: small ones inline in the journal, large ones as files in the
run's artifact folder with the journal holding the path."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

ARTIFACT_THRESHOLD = 32 * 1024  # bytes of JSON; above this a result is written to a file


class ResultNotJSON(TypeError):
    pass


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def encode(value: Any, what: str) -> str:
    try:
        return _ENCODE(value)
    except (TypeError, ValueError) as e:
        raise ResultNotJSON(f"{what} returned a value that is not JSON-serialisable ({e}); "
                            "return dicts, lists, strings, numbers, booleans or None") from None


def decode(data_dir: Path, result: str | None, artifact: str | None) -> Any:
    if artifact is not None:
        return json.loads((data_dir / artifact).read_text(encoding="utf-8"))
    return None if result is None else json.loads(result)


def place(data_dir: Path, artifact_dir: str, label: str, encoded: str) -> tuple[None, str]:
    """Write a large result durably to the run's artifact folder; returns (None, its relative path)."""
    relative = f"{artifact_dir}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)}.json"
    target = data_dir / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(encoded)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    return None, relative
