"""Which runs to show: the words of the TUI's filter (`/`) and of the CLI's `--where`, parsed by `parse`.

The words are `status:`, `agent:`, `since:`, `until:`, `cost>:`, `cost<:` and text (`parse` says each);
a word with an unknown colon is refused, and `parse` raises FilterError (a usage error) saying what is wrong.
An age stays relative to each refresh. store/runs.py's runs_page reads a Filter through indexes.
Why: docs/operating.md, "Finding runs"; docs/architecture.md, section 5 (Storage)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .errors import UserError
from .states import RunStatus

STATUSES = tuple(s.value for s in RunStatus)
_AGE = re.compile(r"^(?P<count>\d{1,6})(?P<unit>[smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_WORDS = re.compile(r'"([^"]*)"?|(\S+)')          # a quoted word (to its closing quote, or the end), or a plain one
_KEYED = re.compile(r"^(?P<key>[A-Za-z_]+[<>]?):(?P<value>.*)$")
WORDS_SAID = "status:, agent:, since:, until:, cost>:, cost<:"


class FilterError(UserError):
    """Filter words that cannot be read; the message says which and how to write them."""


@dataclass(frozen=True)
class Filter:
    """What a filter selects; the empty Filter selects every run. `since` and `until` are kept as given (an age
    or an ISO date or instant), read against the clock only when runs are read (`instants`)."""

    statuses: tuple[str, ...] = ()
    agent: str | None = None
    since: str | None = None
    until: str | None = None
    cost_above: float | None = None
    cost_below: float | None = None
    words: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self != Filter()

    def __str__(self) -> str:
        """The filter as words `parse` reads back to the same Filter, in a fixed order."""
        said = [f"status:{','.join(self.statuses)}" if self.statuses else "",
                f"agent:{self.agent}" if self.agent else "",
                f"since:{self.since}" if self.since else "", f"until:{self.until}" if self.until else "",
                f"cost>:{self.cost_above:g}" if self.cost_above is not None else "",
                f"cost<:{self.cost_below:g}" if self.cost_below is not None else "",
                *(f'"{word}"' if ":" in word or not word.strip() else word for word in self.words)]
        return " ".join(word for word in said if word)

    def instants(self, at: float) -> tuple[float | None, float | None]:
        """(since, until) as epoch seconds, ages counted back from `at`."""
        return (None if self.since is None else instant(self.since, at),
                None if self.until is None else instant(self.until, at))


def parse(text: str) -> Filter:
    """The Filter that `text`'s words say, or FilterError when a word cannot be read.

        from tui_agent.filters import parse
        where = parse("status:waiting agent:nightly-report since:3d cost>:0.10 outage")
        rows = store.runs.runs_page(store, where=where)     # a page of the runs it selects, newest first

    The words, in any order (each at most once, except text):

    - `status:STATUS[,STATUS...]`: runs with one of these statuses
    - `agent:NAME`: runs of this agent (its exact name)
    - `since:WHEN`, `until:WHEN`: runs created at or after WHEN, or before it. WHEN is an age back from now (`30m`,
      `2h`, `3d`, `2w`) or an ISO date or instant (`2026-11-29`, `2026-11-29T14:00`), in local time unless it names
      its zone (`...Z`, `+01:00`); a date alone is its midnight, so `since:2026-11-01 until:2026-12-01` is November
    - `cost>:USD`, `cost<:USD`: runs whose budget counted more (less) than USD (a `$` may lead): the cost of their
      answered model calls and the worst case of their calls in flight (a call still being answered counts its
      reservation until its reply replaces it)
    - any other word: text that the run's id, agent, reason or request holds (case aside); every word must be found.
      A word with a colon that is not one of the above is refused (a misspelt `agnet:` would match nothing); put
      such text in double quotes (`"error:"`).

    An age stays relative: a filter kept open for an hour shows the runs of the hour before each refresh. The
    FilterError is a usage error (one line, exit 2) saying what is wrong and what the words are. The store reads
    a Filter through indexes (store/runs.py, runs_page): the status, agent and time words select through one,
    cost and text are checked on the runs those select."""
    found: dict[str, Any] = {}   # each reader's own type, as its Filter field takes it
    words: list[str] = []
    for quoted in _WORDS.finditer(text):
        word = quoted.group(2)
        if word is None:                  # in double quotes: text, whatever it holds
            words.append(quoted.group(1))
            continue
        keyed = _KEYED.match(word)
        if keyed is None:
            words.append(word)
            continue
        key, value = keyed["key"].lower(), keyed["value"]
        if key not in _READERS:
            raise FilterError(f"{key}: in {word} is not a filter word (they are {WORDS_SAID} and text); to find "
                              f"text with a colon, put it in double quotes: \"{word}\"")
        if key in found:
            raise FilterError(f"{key}: is given twice ({word} is the second); give it once")
        if not value:
            raise FilterError(f"{word} needs a value, such as {_EXAMPLES[key]}")
        found[key] = _READERS[key](value, word)
    return Filter(words=tuple(words), **{_FIELDS[key]: value for key, value in found.items()})


def options(statuses: tuple[str, ...] = (), agent: str | None = None, since: str | None = None,
            until: str | None = None, text: str | None = None) -> Filter:
    """The Filter of the CLI's options, `ls --status --agent --since --until --text`, checked as the words are.

    `text` is split into words at white space; a colon in it is text."""
    checked: dict[str, Any] = {"since": since and _when(since, f"--since {since}"),
                               "until": until and _when(until, f"--until {until}")}
    return replace(Filter(statuses=statuses, agent=agent or None, words=tuple((text or "").split())), **checked)


def instant(when: str, at: float, said: str | None = None) -> float:
    """WHEN as epoch seconds, or FilterError naming `said` when it is not a time.

    WHEN is an age such as `3d`, counted back from `at`, or an ISO date or instant, local unless zoned. `said`
    is where WHEN was given, as in `--since 3x`."""
    age = _AGE.match(when)
    if age:
        return at - int(age["count"]) * _UNIT_S[age["unit"]]
    try:
        moment = datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{said or when} is not a time: give an age back from now (30m, 2h, 3d, 2w) or an ISO "
                          "date or instant (2026-11-29, 2026-11-29T14:00)") from None
    return (moment.astimezone() if moment.tzinfo is None else moment).timestamp()


def parse_span(text: str, said: str) -> float:
    """An age such as `30m`, `12h`, `3d` or `2w` as seconds.

    When it is not one, it raises FilterError naming `said`, where it was given (`--older-than`)."""
    age = _AGE.match(text.strip())
    if age is None:
        raise FilterError(f"{said} {text!r} is not a span of time; give a number and a unit, as in 30m, 2h, 3d or 2w")
    return int(age["count"]) * _UNIT_S[age["unit"]]


def _when(value: str, word: str) -> str:
    instant(value, 0.0, word)
    return value


def _statuses(value: str, word: str) -> tuple[str, ...]:
    named = tuple(dict.fromkeys(name.strip().lower() for name in value.split(",") if name.strip()))
    unknown = [name for name in named if name not in STATUSES]
    if unknown or not named:
        raise FilterError(f"{', '.join(unknown) or value} is not a status (statuses are: {', '.join(STATUSES)})")
    return named


def _usd(value: str, word: str) -> float:
    try:
        amount = float(value.removeprefix("$"))
    except ValueError:
        amount = float("nan")
    if not 0 <= amount < 1e12:     # NaN fails both
        raise FilterError(f"{word} is not an amount of dollars: give one such as 0.10 or $2")
    return amount


def _agent(value: str, word: str) -> str:
    return value


_READERS = {"status": _statuses, "agent": _agent, "since": _when, "until": _when, "cost>": _usd, "cost<": _usd}
_FIELDS = {"status": "statuses", "agent": "agent", "since": "since", "until": "until", "cost>": "cost_above",
           "cost<": "cost_below"}
_EXAMPLES = {"status": "status:waiting", "agent": "agent:nightly-report", "since": "since:3d",
             "until": "until:2026-11-29", "cost>": "cost>:0.10", "cost<": "cost<:0.01"}
