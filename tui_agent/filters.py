"""Which runs to show, and from when: WHEN, an age back from now or an ISO date or instant (`spend --since`).

WHEN is an age back from now (`30m`, `2h`, `3d`, `2w`) or an ISO date or instant (`2026-11-29`,
`2026-11-29T14:00`), in local time unless it names its zone (`...Z`, `+01:00`); a date alone is its midnight.
`instant` raises FilterError (a usage error: one line, exit 2) saying how to write it."""

from __future__ import annotations

import re
from datetime import datetime

from .errors import UserError

_AGE = re.compile(r"^(?P<count>\d{1,6})(?P<unit>[smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class FilterError(UserError):
    """Filter words that cannot be read; the message says which and how to write them."""


def instant(when: str, at: float, said: str | None = None) -> float:
    """WHEN (an age such as `3d`, or an ISO date or instant, local unless zoned) as epoch seconds, ages counted
    back from `at`; FilterError naming `said` (where WHEN was given: `--since 3x`) when it is neither."""
    age = _AGE.match(when)
    if age:
        return at - int(age["count"]) * _UNIT_S[age["unit"]]
    try:
        moment = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{said or when} is not a time: give an age back from now (30m, 2h, 3d, 2w) or an ISO "
                          "date or instant (2026-11-29, 2026-11-29T14:00)") from None
    return (moment.astimezone() if moment.tzinfo is None else moment).timestamp()
