"""The handout: settings x crash points with the counts each execution gave, as a Markdown table."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import replace

from .scenario import Outcome, simulate
from .settings import CHOICES, CRASH_AT, LESSONS, SETTING_NAMES, Settings

COUNTS = (("fetches", "fetches"), ("model_calls", "model calls"), ("reports_written", "reports"),
          ("send_requests", "send requests"), ("emails_received", "emails got"), ("lookups", "lookups"))


def lessons_matrix() -> Iterator[tuple[str, Settings]]:
    """Each lesson's settings with every crash point, the document's steps first.

    Every part of a lesson counts (`3.1`, `3.2`); the simulator's own lessons come after them, marked `(further)`."""
    for lesson in LESSONS:
        for part, phase in enumerate(lesson.phases, 1):
            name = f"{lesson.number}" + (f".{part}" if len(lesson.phases) > 1 else "")
            name += " (further)" if lesson.further else ""
            for point in CRASH_AT:
                yield name, replace(phase.settings, crash_at=point)


def whole_matrix() -> Iterator[tuple[str, Settings]]:
    for values in itertools.product(*(CHOICES[name] for name in SETTING_NAMES)):
        yield "", Settings(**dict(zip(SETTING_NAMES, values)))


def markdown(rows: Iterator[tuple[str, Settings]], progress: Callable[[int], None] = lambda done: None) -> str:
    """The table as Markdown, every row one execution of the scenario.

    No person answers, so a run that waits says so."""
    header = ["lesson", *(name.replace("_", " ") for name in SETTING_NAMES), *(label for _, label in COUNTS), "ends"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for done, (lesson, settings) in enumerate(rows, 1):
        lines.append("| " + " | ".join([lesson or "-", *settings.as_dict().values(), *_cells(simulate(settings))])
                     + " |")
        progress(done)
    return "\n".join(lines) + "\n"


def _cells(outcome: Outcome) -> list[str]:
    ending = "waits" if outcome.waiting else outcome.status
    return [str(outcome.counts[name]) for name, _ in COUNTS] + [ending]
