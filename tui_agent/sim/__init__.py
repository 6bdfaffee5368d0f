"""Crash it yourself: the nightly-report job on the real runtime, with a crash where you choose."""

from .scenario import Outcome, Row, Scenario, Stop, simulate
from .settings import BOUNDARIES, CHOICES, CRASH_AT, LESSONS, SOURCES, Lesson, Settings

__all__ = ["BOUNDARIES", "CHOICES", "CRASH_AT", "LESSONS", "SOURCES", "Lesson", "Outcome", "Row", "Scenario",
           "Settings", "Stop", "simulate"]
