"""Colour means state (DESIGN.md section 3): one place turns a status and reason into a badge."""

from __future__ import annotations

from rich.text import Text

from ..report import needs_person

NEEDS_YOU = "bold #ffb000"
MARKS = {"queued": "○", "running": "●", "waiting": "◔", "parked": "■", "succeeded": "✓", "failed": "✗",
         "cancelled": "–"}
STATUSES = tuple(MARKS)     # every status a run can have, in the order a run goes through them


def style_of(status: str, reason: str | None) -> str:
    if needs_person(status, reason) and status == "waiting":
        return NEEDS_YOU
    return {"running": "bold #4aa3ff", "waiting": "#3cc6c6", "parked": "#8a8a8a", "succeeded": "#4ec94e",
            "failed": "bold #ff5f5f", "cancelled": "dim"}.get(status, "")


def mark_of(status: str, reason: str | None) -> str:
    if needs_person(status, reason) and status == "waiting":
        return "◐"
    return MARKS.get(status, "?")


def label_of(status: str, reason: str | None) -> str:
    if needs_person(status, reason) and status == "waiting":
        return f"needs you: {reason}"
    shown = reason if reason and reason not in ("check_passed", "new", "person") or status == "parked" else None
    return f"{status}: {shown}" if shown else status


def badge(status: str, reason: str | None) -> Text:
    return Text(f"{mark_of(status, reason)} {label_of(status, reason)}", style=style_of(status, reason))
