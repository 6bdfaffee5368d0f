"""The Simulator's panes as Rich text: settings with their keys, a worker's timeline (the email's ledger row among
its steps), the outcome counts, the keys that do not fit the footer. Every state has a sign as well as a colour
(a projector washes colours out)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..sim import Row, Stop
from ..sim.explain import Prediction
from ..sim.settings import LABELS, MAIN_SETTINGS, MORE_SETTINGS, Settings
from .theme import Palette, style

KEYS = {"saving": "S", "key": "K", "service": "V", "after_crash": "A", "crash_at": "C", "restart_after": "W"}
# fate -> (sign, theme colour, words after the step)
FATES = {
    "done": ("✓", "text-success", ""),
    "again": ("↻", "text-warning", "again"),
    "recorded": ("↷", "foreground-muted", "skipped"),
    "crashed": ("✗", "text-error", "crashed"),
    "sent": ("✉", "text-primary", "sent"),
    "deduplicated": ("✉", "text-success", "deduplicated"),
    "looked-up": ("?", "text-secondary", "looked up"),
    "waits": ("◐", "text-warning", "waits for a person"),
    "decided": ("☑", "text-secondary", "a person decided"),
    "ledger": ("≡", "text-secondary", ""),
    "found": ("≡", "text-warning", "found"),
}
# The email's states in the effect ledger, in the document's words ("Your code also tracks each action
# through four states"), and the runtime's fifth: a person or the service said it was not done.
LEDGER_STATES = {"intended": "intended", "attempted": "attempted", "unknown": "outcome unknown",
                 "confirmed": "confirmed", "not_done": "not done"}
_UNSHOWN = object()   # no ledger row shown yet in this timeline, so its key is not either
COUNT_LABELS = (("fetches", "fetches", 3), ("model_calls", "model calls", 1), ("reports_written", "reports", 1),
                ("send_requests", "send requests", None), ("emails_received", "emails got", 1),
                ("lookups", "lookups", None))


def _setting(settings: Settings, name: str, colours: Palette, words: bool) -> Text:
    cell = Text()
    cell.append(f"{KEYS[name]} ", style=style(colours, "text-primary", bold=True))
    cell.append(f"{LABELS[name]} ")
    cell.append(getattr(settings, name), style="bold")
    if words:
        cell.append(f"\n  {settings.describe(name)}", style=style(colours, "foreground-muted"))
    return cell


def settings_strip(settings: Settings, colours: Palette) -> Group:
    """The document's first settings, each as its key, name and choice, with the choice in words under it.

    Then come what the document calls More settings, on a line of their own."""
    grid = Table.grid(expand=True, padding=(0, 1))
    for _ in MAIN_SETTINGS:
        grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    grid.add_row(*(_setting(settings, name, colours, True) for name in MAIN_SETTINGS))
    more = Text("More settings ", style="bold", no_wrap=True, overflow="ellipsis")
    for name in MORE_SETTINGS:
        more.append("  ")
        more.append_text(_setting(settings, name, colours, False))
    return Group(grid, more)


def _key(key: str | None) -> str:
    return key or "no key"


def timeline_text(rows: tuple[Row, ...], stop: Stop | None, colours: Palette, waiting_to_start: str = "") -> Text:
    """One line per row (a sign, the step, its fate in words) and where the worker stands now, if it does. The
    email's ledger row shows each state it moves to, with its key where the key first shows or changes (worker
    2 finds the row worker 1 left, key and all). Lines fit a timeline 25 columns wide, as at 80 columns."""
    text = Text()
    shown_key: object = _UNSHOWN
    for row in rows:
        sign, tone, words = FATES[row.fate]
        detail = row.detail
        if row.fate in ("ledger", "found"):
            line = f"{sign} {words or row.step} {LEDGER_STATES.get(row.detail, row.detail)}"
            detail = "" if row.key == shown_key or row.fate == "found" else _key(row.key)
            shown_key = row.key
        elif row.fate == "crashed":
            line, detail = f"{sign} crashed: {row.detail}", ""
        elif row.fate == "decided":
            line, detail = f"{sign} a person: {row.detail}", ""
        elif row.fate == "waits":
            line, detail = f"{sign} {words}", ""     # why it waits is said in the Why pane
        elif row.step == "send":
            line, detail = f"{sign} {words}", detail.removeprefix("key ")
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
    text.rstrip()
    return text


def is_bad(name: str, value: int, finished: bool) -> bool:
    """A count the job should not have: work done twice, a second email, or none once it has ended."""
    limit = dict((n, most) for n, _, most in COUNT_LABELS)[name]
    if name == "emails_received" and finished:
        return value != 1
    return limit is not None and value > limit


def outcome_text(counts: dict[str, int], colours: Palette, finished: bool,
                 prediction: Prediction | None = None) -> Text:
    """The counts, a wrong one in red and marked `!`; with a prediction, what the learner said under them,
    marked right or wrong once the execution has ended."""
    text = Text()
    for name, label, _ in COUNT_LABELS:
        value = counts[name]
        bad = is_bad(name, value, finished)
        text.append(f"{label:<14}{value:>2}", style=style(colours, "text-error", bold=True) if bad else "")
        text.append(" !\n" if bad else "\n", style=style(colours, "text-error", bold=True))
    if prediction is not None:
        for said, value, one, many in ((prediction.emails, counts["emails_received"], "email", "emails"),
                                       (prediction.fetches, counts["fetches"], "fetch", "fetches")):
            mark = "" if not finished else " ✓" if said == value else " ✗"
            tone = "text-success" if said == value or not finished else "text-warning"
            text.append(f"said {said} {one if said == 1 else many}{mark}\n", style=style(colours, tone))
    text.rstrip()
    return text


def keys_line(keys: list[tuple[str, str]], colours: Palette) -> Text:
    """The keys the footer has no room for, as the footer shows its own: the key in bold, then its words."""
    text = Text(no_wrap=True, overflow="ellipsis")
    for i, (key, words) in enumerate(keys):
        text.append(" " if i else "")
        text.append(f" {key} ", style=style(colours, "text-primary", bold=True))
        text.append(words)
    return text
