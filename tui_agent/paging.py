"""A bounded, movable slice of a long ordered list, read a keyset page at a time: what a screen holds of a run's
timeline, events or ledger, so that opening, scrolling or jumping costs a page however long the run is."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

# fetch(after, limit, newest_first): up to `limit` rows after the cursor `after` in the list's order (before it,
# newest first, when `newest_first`), from the list's start (or end) when `after` is None.
Fetch = Callable[[Any, int, bool], list]


def every(fetch: Fetch, key: Callable[[Any], Hashable], page: int = 500) -> Iterator:
    """Every row of the list, read a page at a time: memory does not grow with the list."""
    after = None
    while True:
        rows = fetch(after, page, False)
        yield from rows
        if len(rows) < page:
            return
        after = key(rows[-1])


@dataclass
class Window:
    fetch: Fetch
    key: Callable[[Any], Hashable]        # a row's cursor
    page: int = 100
    keep: int = 3                         # pages held at most: moving on drops the far end
    rows: list = field(default_factory=list)
    at_start: bool = True                 # nothing before rows[0]
    at_end: bool = True                   # nothing after rows[-1]

    def first(self) -> None:
        self.rows = self.fetch(None, self.page, False)
        self.at_start, self.at_end = True, len(self.rows) < self.page

    def last(self) -> None:
        self.rows = self.fetch(None, self.page, True)[::-1]
        self.at_start, self.at_end = len(self.rows) < self.page, True

    def around(self, key: Hashable) -> None:
        """A page with the row at `key` (or the first one after it) a third of the way down."""
        before = self.fetch(key, self.page // 3, True)[::-1]
        rest = self.fetch(self.key(before[-1]) if before else None, self.page - len(before), False)
        self.rows = before + rest
        self.at_start = len(before) < self.page // 3
        self.at_end = len(rest) < self.page - len(before)

    def forward(self) -> int:
        """Read the next page onto the end; how many rows came."""
        if self.at_end or not self.rows:
            return 0
        new = self.fetch(self.key(self.rows[-1]), self.page, False)
        self.at_end = len(new) < self.page
        self.rows += new
        dropped = max(0, len(self.rows) - self.page * self.keep)
        if dropped:
            self.rows, self.at_start = self.rows[dropped:], False
        return len(new)

    def backward(self) -> int:
        """Read the page before onto the start; how many rows came."""
        if self.at_start or not self.rows:
            return 0
        new = self.fetch(self.key(self.rows[0]), self.page, True)[::-1]
        self.at_start = len(new) < self.page
        self.rows = new + self.rows
        dropped = max(0, len(self.rows) - self.page * self.keep)
        if dropped:
            self.rows, self.at_end = self.rows[:-dropped], False
        return len(new)

    def refresh(self) -> None:
        """Read the same stretch again (rows change in place as a run moves on); at the end, what came since
        too, the oldest dropped past `keep` pages."""
        if not self.rows:
            self.last() if self.at_end else self.first()
            return
        before = None if self.at_start else self.fetch(self.key(self.rows[0]), 1, True)
        anchor = self.key(before[0]) if before else None
        wanted = len(self.rows) + (self.page if self.at_end else 0)
        rows = self.fetch(anchor, wanted, False)
        if self.at_end:
            self.at_end = len(rows) < wanted
            dropped = max(0, len(rows) - self.page * self.keep)
            if dropped:
                rows, self.at_start = rows[dropped:], False
        self.rows = rows

    def index_of(self, key: Hashable) -> int | None:
        return next((i for i, row in enumerate(self.rows) if self.key(row) == key), None)
