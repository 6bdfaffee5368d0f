"""The filter words that choose runs, as the TUI's filter box and the CLI's `--where` take them:
`status:queued agent:hello since:3d until:2026-01-05 nightly`. `parse(text)` reads them into a `Filter`;
`matching(store, filter)` reads the runs it selects, newest first, a page at a time.

The words: `status:STATUS`, `agent:NAME` (the agent's exact name), `since:WHEN` and `until:WHEN` (when the run
was made: WHEN is an ISO date, read as local midnight, an ISO instant, or a span back from now such as `30m`,
`2h`, `3d`, `2w`), and any other words, which match the start of a run's id or a part of its agent or reason."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime

from .errors import UserError
from .runtime.clock import now, parse_instant
from .states import RunStatus
from .store import Store
from .store.runs import runs_page

_SPAN = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
STATUSES = tuple(status.value for status in RunStatus)
PAGE = 500


def parse_span(text: str, what: str) -> float:
    """`30m`, `2h`, `3d`, `2w` as seconds; `what` names where the text came from in the refusal."""
    found = _SPAN.fullmatch(text.strip())
    if found is None:
        raise UserError(f"{what} {text!r} is not a span of time; give a number and a unit, as in 30m, 2h, 3d or 2w")
    return float(found.group(1)) * _UNIT_S[found.group(2)]


def parse_when(text: str, what: str, at: float | None = None) -> float:
    """An instant as epoch seconds: an ISO date (local midnight), an ISO instant, or a span back from `at` (now)."""
    text = text.strip()
    if _SPAN.fullmatch(text):
        return (now() if at is None else at) - parse_span(text, what)
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day).timestamp()
        return parse_instant(text)
    except ValueError:
        raise UserError(f"{what} {text!r} is not a time; give an ISO date (2026-01-05), an instant "
                        "(2026-01-05T09:00:00Z) or a span back from now (30m, 2h, 3d)") from None


@dataclass(frozen=True)
class Filter:
    """What the words select; a field left None selects every run. `text` is the words that are not filter words."""

    status: str | None = None
    agent: str | None = None
    since: float | None = None
    until: float | None = None
    text: str | None = None
    words: str = ""          # the words as given, to say what a filter was

    def problem(self) -> str | None:
        """Why the filter can select no run at all (a status that does not exist), or None."""
        if self.status is not None and self.status not in STATUSES:
            return f"{self.status} is not a status (statuses are: {', '.join(STATUSES)})"
        return None

    def query(self) -> dict:
        """runs_page's arguments for this filter."""
        return {"status": self.status, "agent": self.agent, "since": self.since, "until": self.until,
                "text": self.text}

    def __bool__(self) -> bool:
        return any(value is not None for value in self.query().values())


def parse(text: str) -> Filter:
    """The filter `text`'s words make (see the module); a WHEN that cannot be read is a UserError."""
    fields: dict = {}
    rest = []
    for word in text.split():
        name, colon, value = word.partition(":")
        if colon and name in ("status", "agent"):
            fields[name] = value or None
        elif colon and name in ("since", "until") and value:
            fields[name] = parse_when(value, f"{name}:")
        else:
            rest.append(word)
    return Filter(**fields, text=" ".join(rest) or None, words=" ".join(text.split()))


def matching(store: Store, chosen: Filter) -> Iterator[dict]:
    """Every run the filter selects, newest first, read a page at a time by the runs page's keyset cursor."""
    before = None
    while True:
        page = runs_page(store, limit=PAGE, before=before, **chosen.query())
        yield from page
        if len(page) < PAGE:
            return
        before = (page[-1]["created_at"], page[-1]["id"])
