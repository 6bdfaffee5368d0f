"""Colour means state (docs/architecture.md sections 3.1 and 9): the one place that turns a status and
reason into a mark, a label and the theme variable it is painted with."""

from __future__ import annotations

from rich.text import Text

from ..states import Reason, RunStatus, needs_person
from .theme import OFFLINE, Palette, style

MARKS: dict[str, str] = {RunStatus.QUEUED: "○", RunStatus.RUNNING: "●", RunStatus.WAITING: "◔", RunStatus.PARKED: "■",
         RunStatus.SUCCEEDED: "✓", RunStatus.FAILED: "✗", RunStatus.CANCELLED: "–"}
STATUSES = tuple(MARKS)     # every status a run can have, in the order a run goes through them
NEEDS_YOU = "text-warning"  # waiting on a person; never $accent, which is $warning in Textual's own themes
TONES: dict[str, str] = {RunStatus.QUEUED: "foreground", RunStatus.RUNNING: "text-primary",
         RunStatus.WAITING: "text-secondary", RunStatus.PARKED: "text-muted", RunStatus.SUCCEEDED: "text-success",
         RunStatus.FAILED: "text-error", RunStatus.CANCELLED: "foreground-muted"}
BOLD = {RunStatus.RUNNING, RunStatus.FAILED}
QUIET = (Reason.CHECK_PASSED, Reason.NEW, Reason.PERSON)   # the usual reason: the status alone says it


def _asks(status: str, reason: str | None) -> bool:
    """Waiting on a person rather than on time: its own tone and mark (a parked run keeps parked's)."""
    return status == RunStatus.WAITING and needs_person(status, reason)


def tone_of(status: str, reason: str | None) -> str:
    """The theme variable a run in this state is painted with."""
    return NEEDS_YOU if _asks(status, reason) else TONES.get(status, "foreground")


def bold_of(status: str, reason: str | None) -> bool:
    """Running, failed and waiting on a person stand out from the rest of their colour's states."""
    return _asks(status, reason) or status in BOLD


def style_of(status: str, reason: str | None, colours: Palette = OFFLINE) -> str:
    return style(colours, tone_of(status, reason), bold=bold_of(status, reason))


def mark_of(status: str, reason: str | None) -> str:
    return "◐" if _asks(status, reason) else MARKS.get(status, "?")


def label_of(status: str, reason: str | None) -> str:
    if _asks(status, reason):
        return f"needs you: {reason}"
    shown = reason if reason and reason not in QUIET or status == RunStatus.PARKED else None
    return f"{status}: {shown}" if shown else status


def badge(status: str, reason: str | None, colours: Palette = OFFLINE) -> Text:
    return Text(f"{mark_of(status, reason)} {label_of(status, reason)}", style=style_of(status, reason, colours))
