"""The Simulator's panes as Rich text: settings with their keys, a worker's timeline, the outcome counts.
Every state has a sign as well as a colour (a projector washes colours out)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ..sim import Row, Stop
from ..sim.explain import Prediction
from ..sim.settings import LABELS, SETTING_NAMES, Settings
from .theme import Palette, style

KEYS = {"saving": "S", "key": "K", "service": "V", "after_crash": "A", "crash_at": "C", "restart_after": "W"}
# fate -> (sign, theme colour, words after the step)
FATES = {
    "done": ("✓", "text-success", ""),
    "again": ("↻", "text-warning", "again"),
    "recorded": ("↷", "foreground-muted", "recorded"),
    "crashed": ("✗", "text-error", "crashed"),
    "sent": ("✉", "text-primary", "sent"),
    "deduplicated": ("✉", "text-success", "sent again: deduplicated"),
    "looked-up": ("?", "text-secondary", "looked up"),
    "waits": ("◐", "text-warning", "waits for a person"),
    "decided": ("☑", "text-secondary", "a person decided"),
}
COUNT_LABELS = (("fetches", "fetches", 3), ("model_calls", "model calls", 1), ("reports_written", "reports", 1),
                ("send_requests", "send requests", None), ("emails_received", "emails got", 1),
                ("lookups", "lookups", None))


def settings_grid(settings: Settings, colours: Palette) -> Table:
    """Three settings to a row, each its key, name and choice, with the choice in words under it."""
    grid = Table.grid(expand=True, padding=(0, 1))
    for _ in range(3):
        grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    cells = []
    for name in SETTING_NAMES:
        cell = Text()
        cell.append(f"{KEYS[name]} ", style=style(colours, "text-primary", bold=True))
        cell.append(f"{LABELS[name]} ")
        cell.append(getattr(settings, name), style="bold")
        cell.append(f"\n  {settings.describe(name)}", style=style(colours, "foreground-muted"))
        cells.append(cell)
    for row in range(0, len(cells), 3):
        grid.add_row(*cells[row:row + 3])
    return grid


def timeline_text(rows: tuple[Row, ...], stop: Stop | None, colours: Palette, waiting_to_start: str = "") -> Text:
    """One line per row (a sign, the step, its fate in words) and where the worker stands now, if it does."""
    text = Text()
    for row in rows:
        sign, tone, words = FATES[row.fate]
        detail = row.detail
        if row.fate == "crashed":
            line, detail = f"{sign} crashed: {row.detail}", ""
        elif row.fate == "decided":
            line, detail = f"{sign} a person: {row.detail}", ""
        elif row.fate == "waits":
            line, detail = f"{sign} {words}", ""     # why it waits is said in the Why pane
        elif row.step == "send":
            line = f"{sign} {words}"
            detail = "" if row.fate == "deduplicated" else detail   # the same key as the send it repeats
        else:
            line = f"{sign} {row.step}" + (f" {words}" if words else "")
        text.append(line, style=style(colours, tone))
        if detail:
            text.append(f" · {detail}", style=style(colours, "foreground-muted"))
        text.append("\n")
    if stop is not None:
        text.append(f"▸ {stop.label}\n", style=style(colours, "text-primary", bold=True))
    elif not rows and waiting_to_start:
        text.append(waiting_to_start, style=style(colours, "foreground-muted"))
    return text.rstrip() or text


def is_bad(name: str, value: int, finished: bool) -> bool:
    """A count the job should not have: work done twice, a second email, or none once it has ended."""
    limit = dict((n, most) for n, _, most in COUNT_LABELS)[name]
    if name == "emails_received" and finished:
        return value != 1
    return limit is not None and value > limit


def outcome_text(counts: dict[str, int], colours: Palette, finished: bool, ending: str = "",
                 prediction: Prediction | None = None) -> Text:
    """The counts, a wrong one in red and marked `!`; with a prediction, what the learner said beside it."""
    text = Text()
    for name, label, _ in COUNT_LABELS:
        value = counts[name]
        bad = is_bad(name, value, finished)
        text.append(f"{label:<14}{value:>2}", style=style(colours, "text-error", bold=True) if bad else "")
        text.append(" !\n" if bad else "\n", style=style(colours, "text-error", bold=True))
    if prediction is not None:
        text.append("you said\n", style="bold")
        for label, said, value in (("emails got", prediction.emails, counts["emails_received"]),
                                   ("fetches", prediction.fetches, counts["fetches"])):
            right = said == value or not finished
            text.append(f"{label:<14}{said:>2}" + ("" if not finished else " ✓" if said == value else " ✗") + "\n",
                        style=style(colours, "text-success" if right else "text-warning"))
    if ending:
        text.append(ending, style="bold")
    return text.rstrip() or text
