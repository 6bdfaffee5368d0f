"""What each option and argument of the command line may hold: TEXT, VERBATIM, Whole and Number.

Every parameter has one of these types (or click's Path, Choice or a flag), so a new one cannot slip past
the rules (tests/processes/test_hostile_input.py checks). Each class says what it refuses, so an option can never hold
what no store can take, nor overflow where it is stored or waited on."""

from __future__ import annotations

import math

import click

from .strict_json import text_problem

COLUMN_MAX = 2 ** 63 - 1          # a SQLite INTEGER, a PostgreSQL bigint
NUMBER_MAX = 1_000_000_000        # seconds, minutes or hours: past any wait a thread can make (threading.TIMEOUT_MAX)


class StoredText(click.ParamType):
    """TEXT: text that is stored as text or looked up in the store (names, keys, notes, run ids, cron, zones).

    It is refused when it holds a byte that is not UTF-8 (Python hands such a byte of the command line over as
    a surrogate escape) or a lone surrogate, which no store can take."""

    name = "text"

    def convert(self, value, param, ctx):
        problem = text_problem(value) if isinstance(value, str) else None
        if problem is not None:
            self.fail(f"it holds {problem}; pass UTF-8 text.", param, ctx)
        return value


class Verbatim(click.ParamType):
    """VERBATIM: taken as given and checked where it is read.

    It is a path, a URL, a module or a command (any bytes the file system allows), or JSON|@FILE (the JSON is
    read by strict_json.parse_json, the file may have any name)."""

    name = "text"


TEXT = StoredText()
VERBATIM = Verbatim()


class Whole(click.IntRange):
    """A whole number from `min` to `max`, `max` being COLUMN_MAX unless given.

    One that is too long is refused before Python is asked to read it: past 4,300 digits it would raise, and
    click would echo every digit."""

    def __init__(self, min: int, max: int = COLUMN_MAX) -> None:   # noqa: A002 - click's own names
        super().__init__(min=min, max=max)

    def convert(self, value, param, ctx):
        text = value.strip() if isinstance(value, str) else ""
        if len(text.lstrip("+-").lstrip("0")) > len(str(self.max)):
            shown = text if len(text) <= 40 else f"a value of {len(text):,} characters"
            self.fail(f"{shown} is not in the range {self._describe_range()}.", param, ctx)
        return super().convert(value, param, ctx)


class Number(click.FloatRange):
    """A finite number from `min` to NUMBER_MAX: click's FloatRange lets NaN through (it compares false with
    every bound) and reads 1e400 as infinity."""

    def __init__(self, min: float) -> None:   # noqa: A002 - click's own name
        super().__init__(min=min, max=NUMBER_MAX)

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not in the range {self._describe_range()}.", param, ctx)
        return number
