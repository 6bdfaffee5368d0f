"""Short random ids for runs and workers; tests seed them so snapshots are stable."""

from __future__ import annotations

import random
import secrets

_seeded: random.Random | None = None


def token(nbytes: int) -> str:
    return secrets.token_hex(nbytes) if _seeded is None else _seeded.randbytes(nbytes).hex()


def seed(value: int | None) -> None:
    """Make ids repeatable from `value` (None: random again)."""
    global _seeded
    _seeded = None if value is None else random.Random(value)
