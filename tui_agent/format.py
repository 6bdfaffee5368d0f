"""How the TUI says lengths of time, instants and money: one module, so the same figure reads the same
on every screen. Pure functions of their arguments (the caller passes "now"), no Textual.

Several lengths of time exist on purpose, each sized for where it shows: a timeline row wants
milliseconds, a countdown wants seconds ticking, a table column wants one unit. Where two screens
said the same kind of figure differently, both ways are kept here under names that say which is which.
"""

from __future__ import annotations

import math
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .states import ahead_s

COST_UNKNOWN = "cost unknown"
NONE = "–"


# -- lengths of time -----------------------------------------------------------------------------


def _minutes(seconds: float) -> str:
    """A minute or more, to the second below an hour: 3m 05s, 1h 02m."""
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m {seconds:02d}s" if minutes < 60 else f"{minutes // 60}h {minutes % 60:02d}m"


def duration_ms(ms: float | None) -> str:
    """How long a step or call took, precise where it is short: 4.2ms, 120ms, 12.5s, 3m 05s ("" unknown)."""
    if ms is None:
        return ""
    if ms < 10:
        return f"{ms:.1f}ms"
    if ms < 1000:
        return f"{ms:.0f}ms"
    return f"{ms / 1000:.1f}s" if ms < 60_000 else _minutes(ms / 1000)


def wall_s(seconds: float) -> str:
    """Wall time a run has used, as a budget figure: 1.2s, 14s, 3m 05s, 1h 02m."""
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    return _minutes(seconds)


def span(seconds: float) -> str:
    """How long a service remembers a key, or a wait lasts: 45s, 12m, 23h 37m, 3d 4h (never negative)."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def countdown(seconds: float) -> str:
    """Time to a schedule's fire, ticking every second below an hour: 45s, 14m 33s, 2h 05m, 3d 4h."""
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds % 60:02d}s" if minutes else f"{seconds}s"


def claimable(seconds: float) -> str:
    """When a claim may take a run: "claimable in 42 s" (a countdown past a minute), "claimable now"."""
    if seconds <= 0:
        return "claimable now"
    return f"claimable in {math.ceil(seconds)} s" if seconds < 60 else f"claimable in {countdown(seconds)}"


def held_by(worker: str, claimable_in_s: float) -> str:
    """A running run whose worker's process is gone: "held by w-a, gone; claimable in 42 s"."""
    return f"held by {worker}, gone; {claimable(claimable_in_s)}"


def stopwatch(seconds: float) -> str:
    """A fixed two-unit reading for a dialog that asks a decision: 0m 45s, 14m 33s, 26h 05m."""
    seconds = max(0, int(seconds))
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {seconds % 60:02d}s"


def age(seconds: float) -> str:
    """A run's age in a table column, one unit: 12s, 5m, 2h, 3d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


def column_span(seconds: float) -> str:
    """0.8s, 14s, 75s, 3m, 2h, 4d: short enough for a narrow column, precise where it matters."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 100:
        return f"{int(seconds)}s"
    return age(seconds)


def ago(then: float, at: float) -> str:
    """"12s ago", or "clock ahead 23h" for an instant in the future: never a negative age."""
    ahead = ahead_s(then, at)
    return f"clock ahead {column_span(ahead)}" if ahead is not None else f"{column_span(at - then)} ago"


SKEW_SHOWN_S = 5.0   # a worker's clock this far from the database's is said (leases and heartbeats ignore it)


def skew(seconds: float | None) -> str | None:
    """How far a worker's clock is from the database server's, such as "23h 59m ahead" or "2m behind".

    It is said only when it is far enough to explain what a person sees: a heartbeat stamped in the future, or a
    sleep that wakes late."""
    if seconds is None or abs(seconds) < SKEW_SHOWN_S:
        return None
    return f"{span(abs(seconds))} {'ahead' if seconds > 0 else 'behind'}"


def minutes_ago(then: float, at: float) -> str:
    """How long ago, in a sentence that is said again every few seconds: 3 min ago, 1h 05m ago."""
    minutes = max(0, int((at - then) // 60))
    return f"{minutes // 60}h {minutes % 60:02d}m ago" if minutes >= 60 else f"{minutes} min ago"


# -- instants -------------------------------------------------------------------------------------


def clock(ts: float | None, at: float) -> str:
    """Local wall time of `ts`, with the date when it is not the day of `at`.

    For example 14:03:12, or 11-28 09:00."""
    if ts is None:
        return NONE
    moment = datetime.fromtimestamp(ts).astimezone()
    today = datetime.fromtimestamp(at).astimezone().date()
    return moment.strftime("%H:%M:%S") if moment.date() == today else moment.strftime("%m-%d %H:%M")


def stamp(text: str | None) -> str:
    """An instant as stored, in ISO form and UTC, made readable as it is.

    For example 2026-11-29 14:00:00.000."""
    return text.replace("T", " ").removesuffix("Z") if text else NONE


def in_zone(ts: float, tz: str) -> datetime:
    """`ts` in the zone `tz`, or in the local zone when `tz` is not a zone this machine knows."""
    try:
        return datetime.fromtimestamp(ts, ZoneInfo(tz))
    except (ZoneInfoNotFoundError, ValueError):
        return datetime.fromtimestamp(ts).astimezone()


def zoned(ts: float, tz: str, at: float) -> str:
    """`Nov 29 02:00` in the zone `tz`; the year only when it is not the year of `at`."""
    moment = in_zone(ts, tz)
    return moment.strftime("%b %d %H:%M" if moment.year == in_zone(at, tz).year else "%Y-%m-%d %H:%M")


# -- money and counts -----------------------------------------------------------------------------


def usd(value: float | None) -> str:
    """Dollars, cents from a cent up and four significant places below: $0, $0.19, $0.0005 (– unknown)."""
    if value is None:
        return NONE
    if value == 0:
        return "$0"
    return f"${value:.2f}" if value >= 0.01 else "$" + f"{value:.4f}".rstrip("0").rstrip(".")


def usd_exact(value: float) -> str:
    """Dollars to four places, as the CLI prints them for scripts and logs: $0.0033, $1.2500."""
    return f"${value:.4f}"


def usd_narrow(value: float) -> str:
    """`usd` without the leading zero, for a timeline column: $.0005, $.19."""
    return usd(value).replace("$0.", "$.")


def cost(value: float | None) -> str:
    """A price that may be unknown (a model with no price): $0.0005, or "cost unknown"."""
    return COST_UNKNOWN if value is None else usd(value)


def step_cell(current_step: int | None, total_steps: int | None, tasks: list[int] | None) -> str:
    """The STEP column of the runs list and `tui-agent ls`.

    It is `tasks 3/7` for a run that counts tasks (report.tasks_of), else its step: `12/40`, or `12` when the
    run declared no total."""
    if tasks:
        return f"tasks {tasks[0]}/{tasks[1]}"
    return f"{current_step or 0}" + (f"/{total_steps}" if total_steps else "")


def spent(cost_usd: float, unpriced_calls: int, possibly_billed_usd: float) -> str:
    """What a run, a day or an agent spent, as the lists say it, such as $0.19.

    `+$0.04?` beside it is what calls in flight when their worker died may have been billed. "cost unknown"
    means no call had a price, and `+2 unpriced` beside a cost means some had none (never a silent zero);
    – means nothing was spent."""
    said = usd(cost_usd) if cost_usd else ""
    if unpriced_calls:
        said = f"{said} +{unpriced_calls} unpriced" if said else COST_UNKNOWN
    if possibly_billed_usd:
        said = f"{said} +{usd(possibly_billed_usd)}?"
    return said.strip() or NONE


def tokens(spent: dict) -> str:
    """A run's tokens in a list's column, as input/output: 12.3k/1.2k.

    The input counts the cached tokens too. Before its first answered model call it is –."""
    if not (spent["input_tokens"] or spent["output_tokens"]):
        return NONE
    return f"{count(spent['input_tokens'])}/{count(spent['output_tokens'])}"


def count(value: float) -> str:
    """A count that can grow large: 6, 2.1k, 1.3M."""
    for size, unit in ((1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:.1f}".removesuffix(".0") + unit
    return f"{value:g}"


def file_size(size: int) -> str:
    """Bytes on disk as a person reads them: 812 B, 16.2 MB (powers of 1,000, as `du --si` says)."""
    for step, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if size >= step:
            return f"{size / step:.1f} {unit}"
    return f"{size} B"


def amount(dimension: str, value: float | None) -> str:
    """A budget figure in its dimension's unit.

    That is $0.19 for cost_usd, 3m 20s for wall_s, else a count."""
    if value is None:
        return NONE
    if dimension == "cost_usd":
        return usd(value)
    if dimension == "wall_s":
        return wall_s(value)
    return count(value)


def bar(done: int, total: int, width: int = 20) -> str:
    """A text progress bar of whole cells, such as ██████░░░░.

    It is full only when everything is done."""
    filled = width if done >= total else min(width - 1, width * max(done, 0) // max(total, 1))
    return "█" * filled + "░" * (width - filled)


def pace(done: int, total: int, elapsed_s: float) -> str:
    """How fast steps go and when the rest will be done: `52/s · 3s left` ("" until there is a rate)."""
    if done <= 0 or elapsed_s <= 0:
        return ""
    rate = done / elapsed_s
    shown = f"{rate:.0f}/s" if rate >= 10 else f"{rate:.1f}/s"
    return f"{shown} · {countdown((total - done) / rate)} left" if total > done else shown
