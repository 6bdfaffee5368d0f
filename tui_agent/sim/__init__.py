"""Crash it yourself: the nightly-report job on the real runtime, with a crash where you choose."""

from .settings import BOUNDARIES, CHOICES, CRASH_AT, LESSONS, SOURCES, Lesson, Settings

_SCENARIO = ("Outcome", "Row", "Scenario", "Stop", "simulate")


def __getattr__(name: str):
    """Load the scenario, and the runtime and agents it runs, when it is first asked for.

    The CLI reads the settings for its options at every start, and a start should not pay for the simulator."""
    if name in _SCENARIO:
        from . import scenario
        return getattr(scenario, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BOUNDARIES", "CHOICES", "CRASH_AT", "LESSONS", "SOURCES", "Lesson", "Outcome", "Row", "Scenario",
           "Settings", "Stop", "simulate"]
