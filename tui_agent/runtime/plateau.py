"""No-progress detection: the same progress value reported `repeats` times in a row, or the same
failure fingerprint `failures` times in a row, is a plateau. Reports are journaled, so a resumed
run rebuilds the same streaks by replay and counts on from where it was."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .outcomes import ACTIONS


@dataclass(frozen=True)
class Plateau:
    """When a run that reports its progress counts as stuck, and what then happens to it.

    The run reports with `ctx.progress` and `ctx.failure`. Reports are journaled, so a resumed run rebuilds
    the same streaks and counts on from where it was. After a plateau the streak starts over. An agent without
    a `plateau` of its own gets `DEFAULT_PLATEAU`, which is 5 equal progress reports or 3 equal failures, then
    escalate. `Plateau(repeats=None, failures=None)` opts out.

    Args:
        repeats: How many equal values `ctx.progress` reports in a row make a plateau. None means no limit.
        failures: How many equal fingerprints `ctx.failure` reports in a row make a plateau. None means no limit.
        action: What a plateau does. `escalate` makes the run wait for a person, `park` parks it, and `stop`
            fails it. Any other value raises ValueError.
    """

    repeats: int | None = 3
    failures: int | None = 3
    action: str = "escalate"   # escalate: wait for a person; park; stop: the run fails

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"plateau action must be one of {', '.join(ACTIONS)}, not {self.action!r}")


# What an agent that reports progress or failures without a `plateau` of its own gets: the same progress
# value 5 times in a row, or the same failure 3 times in a row, and the run waits for a person. An agent
# opts out with `plateau=Plateau(repeats=None, failures=None)`.
DEFAULT_PLATEAU = Plateau(repeats=5, failures=3, action="escalate")


def fingerprint(error: BaseException | str) -> str:
    """Exception type plus message with digits removed: 'timeout after 31s' and '... 45s' are one failure."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return re.sub(r"\d+", "", text)


_NOTHING = object()


class PlateauDetector:
    def __init__(self, plateau: Plateau) -> None:
        self.plateau = plateau
        self._value: Any = _NOTHING
        self._same = 0
        self._fingerprint: str | None = None
        self._fails = 0

    def progress(self, value: Any) -> str | None:
        """Feed one report; a description when it completes a plateau (the streak then starts over)."""
        self._same = self._same + 1 if value == self._value else 1
        self._value = value
        if self.plateau.repeats and self._same >= self.plateau.repeats:
            self._same = 0
            return f"progress stayed at {value!r} for {self.plateau.repeats} reports"
        return None

    def failure(self, print_: str) -> str | None:
        self._fails = self._fails + 1 if print_ == self._fingerprint else 1
        self._fingerprint = print_
        if self.plateau.failures and self._fails >= self.plateau.failures:
            self._fails = 0
            return f"the same failure {self.plateau.failures} times in a row: {print_}"
        return None
