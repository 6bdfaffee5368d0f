"""When schedules fire, and what a fire does.

Cron expressions (croniter) are wall-clock times in the schedule's zone; daylight saving is settled here: a
wall time that occurs twice fires once, at its first occurrence; one that does not occur fires at the first
instant after the gap. Each fire starts at most one run, keyed `schedule:<name>:<instant in UTC>`, so two
processes ticking the same instant start one run; missed fires and overlapping runs follow the policies."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from ..errors import Unreadable, UserError
from ..states import TERMINAL, needs_person
from ..store import Store
from ..store import schedules as table
from ..store.events import add_schedule_event
from ..store.runs import insert_run
from ..strict_json import read_stored, value_problem
from .clock import iso, now
from .registry import Registry, RunFields

MISSED = ("skip", "once", "all")
OVERLAP = ("skip", "wait", "allow")
GRACE_S = 15 * 60.0
CRON_FIELDS = "minute hour day-of-month month day-of-week"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UserError(f"--tz {name!r} is not a time zone; use a name such as Europe/Berlin or UTC") from None


def check_cron(expr: str) -> str:
    """Check that a cron expression has five fields, as the help says, and matches some date. croniter also takes a
    sixth field (seconds, so a schedule would fire every few seconds) and dates such as 30 February (it would never
    fire)."""
    fields = expr.split()
    count = len(fields)
    bad = _bad_field(fields) if count == 5 and not croniter.is_valid(expr) else None
    if bad is not None:
        raise UserError(f"--cron {expr!r}: {bad} (the five fields: {CRON_FIELDS}, such as '0 2 * * *', 02:00 "
                        "daily)")
    if count != 5 or not croniter.is_valid(expr):
        has = f" (it has {count} field{'s' * (count != 1)})" if count != 5 else ""
        raise UserError(f"--cron {expr!r} is not a cron expression{has}; give five fields ({CRON_FIELDS}), "
                        "such as '0 2 * * *' (02:00 daily)")
    try:
        croniter(expr, datetime(2001, 1, 1)).get_next(datetime)
    except CroniterError:
        raise UserError(f"--cron {expr!r} never fires: no date matches it (such as 30 February); "
                        "pick a day of the month that the month has") from None
    return expr


_RANGES = ("0-59", "0-23", "1-31", "1-12 or jan-dec", "0-7 or sun-sat")


def _bad_field(fields: list[str]) -> str | None:
    """Which of five fields croniter refuses, each judged with the others `*`: 'its hour, 25, is not 0-23'; None
    when each passes alone."""
    for i, (name, field) in enumerate(zip(CRON_FIELDS.split(), fields)):
        if not croniter.is_valid(" ".join(field if j == i else "*" for j in range(5))):
            return f"its {name}, {field}, is not {_RANGES[i]}"
    return None


def check_name(name: str) -> str:
    """A name a person can type and read back: it is part of every fire's run key and of each line of
    `schedule ls`, and one starting with '-' would read as an option."""
    if not _NAME.fullmatch(name):
        raise UserError(f"schedule name {name!r}: use 1 to 64 letters, digits and - _ . : starting with a letter "
                        "or digit, such as nightly-report")
    return name


def _instant(wall: datetime, tz: ZoneInfo) -> float:
    """A wall-clock time in `tz` as an instant: the first occurrence if it happens twice, the end of the
    gap if it never happens."""
    first = wall.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall:
        return first.timestamp()
    lo, hi = wall.replace(tzinfo=tz, fold=1).timestamp(), first.timestamp()  # it falls in a gap
    lo, hi = min(lo, hi), max(lo, hi)
    while hi - lo > 1:  # the offset changes between lo and hi: find the instant it does
        mid = (lo + hi) / 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == datetime.fromtimestamp(lo, tz).utcoffset():
            lo = mid
        else:
            hi = mid
    return float(round(hi))


def fires(expr: str, tz_name: str, after: float, until: float) -> Iterator[float]:
    """Fire instants in (after, until], oldest first, each once."""
    tz = zone(tz_name)
    start = datetime.fromtimestamp(after, tz).replace(tzinfo=None) - timedelta(hours=3)  # room for a DST fold
    walls = croniter(expr, start)
    last = after
    while True:
        at = _instant(walls.get_next(datetime), tz)
        if at > until:
            return
        if at > last:
            last = at
            yield at


def next_fire(expr: str, tz_name: str, after: float) -> float:
    return next(fires(expr, tz_name, after, float("inf")))


def fire_key(name: str, at: float) -> str:
    return f"schedule:{name}:{iso(at)}"


def tick(store: Store, registry: Registry, names: list[str] | None = None) -> list[str]:
    """Fire what is due of the schedules whose agent this process knows; returns the runs started. A schedule
    whose stored input no run can be made of, or whose runs this process cannot set up (a `scripted:FILE` model
    whose file is gone), is disabled, with an event saying why, and the others fire: a worker never stops for
    one schedule."""
    started = []
    for name in names if names is not None else table.due_names(store, now()):
        with store.write() as conn:
            try:
                schedule = table.get(conn, name)
                if not (schedule["enabled"] and schedule["agent"] in registry.names()):
                    continue
                request = _request(schedule)
                _fields(registry, schedule, request)   # what would stop each fire's run, found before any
            except Unreadable as e:
                _disable(conn, name, _unreadable(name, e))
                continue
            except UserError as e:
                _disable(conn, name, f"{e}; its runs cannot be started here: fix that, then tui-agent schedule "
                                     f"enable {name}")
                continue
            at = now()
            base = max(schedule["last_fire_at"] or 0.0, schedule["counts_from"])
            started += _fire(conn, schedule, request=request, registry=registry,
                             due=list(fires(schedule["cron"], schedule["tz"], base, at)), at=at)
    return started


def _request(schedule: dict) -> dict:
    """The input each fire's run gets, or Unreadable when no run can be made of it. That is a value that cannot be read
    back (an older version stored one), or one nested deeper than an input may be now. A `scripted:FILE` model's kept
    replies are read here too (into `schedule["replies"]`), so one that cannot be read disables it the same way."""
    request = read_stored(schedule["input"], "schedules.input")
    problem = value_problem(request)
    if problem is not None:
        raise Unreadable("schedules.input", f"it holds {problem[0]}")
    schedule["replies"] = read_stored(schedule["script"], "schedules.script") if schedule.get("script") else None
    return request


def _disable(conn, name: str, why: str) -> None:
    table.update(conn, name, enabled=0)
    add_schedule_event(conn, name, at=now(), kind="disabled", message=f"disabled: {why}")


def _unreadable(name: str, e: Unreadable) -> str:
    return (f"{e}; no run can be made of it: remove it (tui-agent schedule rm {name}) and add it again with an "
            "input that can be read")


def _fields(registry: Registry, schedule: dict, request: dict) -> RunFields:
    """The columns of a run this schedule starts (registry.run_fields); UserError when none can be set up."""
    return registry.run_fields(schedule["agent"], request, schedule.get("model") or "scripted",
                               replies=schedule["replies"])


@dataclass(frozen=True)
class Fired:
    """What a fire by hand did. It lists the runs it started (a fire that waited may start first), and when the overlap
    policy held this fire back, the unfinished run that held it and whether it waits or was skipped."""

    name: str
    started: list[str]
    held_by: str | None = None
    held_status: str | None = None
    overlap: str | None = None
    disabled: Unreadable | None = None

    def __str__(self) -> str:
        if self.disabled is not None:
            return f"{self.name}: not fired: {self.disabled}; the schedule is disabled"
        said = [f"started {run_id}" for run_id in self.started]
        if self.held_by and self.overlap == "wait":
            said.append(f"held until {self.held_by} ends (overlap=wait: it starts then)")
        elif self.held_by:
            said.append(f"skipped because {self.held_by} is {self.held_status} (overlap=skip)")
        return f"{self.name}: " + "; ".join(said)


def fire_now(store: Store, registry: Registry, name: str) -> Fired:
    """`schedule fire NAME`: one fire at this instant, through the overlap policy like any other."""
    with store.write() as conn:
        try:
            schedule = table.get(conn, name)
            registry.get(schedule["agent"])
            request = _request(schedule)
        except Unreadable as e:
            _disable(conn, name, _unreadable(name, e))
            return Fired(name, [], disabled=e)
        at = now()
        waited = schedule["pending_fire_at"] is not None and _previous_done(conn, schedule)
        started = _fire(conn, schedule, request=request, registry=registry, due=[at], at=at, manual=True)
        if len(started) > waited:      # this fire started a run
            return Fired(name, started)
        previous = table.run_status(conn, schedule["last_run_id"])
        return Fired(name, started, schedule["last_run_id"], previous[0] if previous else None, schedule["overlap"])


def _fire(conn, schedule: dict, *, request: dict, registry: Registry, due: list[float], at: float,
          manual: bool = False) -> list[str]:
    name = schedule["name"]
    missed = [f for f in due if at - f > schedule["grace_s"]]
    if missed:
        policy = schedule["missed"]
        keep = [] if policy == "skip" else missed[-1:] if policy == "once" else missed
        dropped = len(missed) - len(keep)
        if dropped:
            add_schedule_event(conn, name, at=at, kind="missed",
                               message=f"{dropped} missed fire{'s' * (dropped != 1)} skipped "
                                       f"(from {iso(missed[0])} to {iso(missed[-len(keep) - 1])}; missed={policy})")
        due = keep + [f for f in due if at - f <= schedule["grace_s"]]
    started = []
    pending = schedule["pending_fire_at"]
    if pending is not None and _previous_done(conn, schedule):
        started += _start(conn, schedule, request=request, registry=registry, fire=pending, at=at,
                          why="the previous run finished")
        schedule["last_run_id"], pending = started[-1], None
    for fire in due:
        previous = table.run_status(conn, schedule["last_run_id"])
        if previous is None or previous[0] in TERMINAL or schedule["overlap"] == "allow":
            started += _start(conn, schedule, request=request, registry=registry, fire=fire, at=at,
                              why="fired by hand" if manual else None)
            schedule["last_run_id"] = started[-1]
            continue
        held = f"the fire at {iso(fire)}"
        why = f"previous run {schedule['last_run_id']} is {previous[0]}" + (f": {previous[1]}" if previous[1] else "")
        if schedule["overlap"] == "skip":
            add_schedule_event(conn, name, at=at, kind="overlap", message=f"{held} skipped: {why}")
        else:
            if pending is not None:
                add_schedule_event(conn, name, at=at, kind="overlap",
                                   message=f"the pending fire at {iso(pending)} is replaced "
                                           "by a newer one (at most one waits)")
            pending = fire
            add_schedule_event(conn, name, at=at, kind="overlap", message=f"{held} waits: {why}")
        if needs_person(*previous):
            add_schedule_event(conn, name, at=at, kind="needs_person",
                               message=f"needs a person: {held} is held back because {why}",
                               run_id=schedule["last_run_id"])
    fields = {"pending_fire_at": pending, "last_run_id": schedule["last_run_id"]}
    if not manual:
        last = max([schedule["last_fire_at"] or 0.0, *due, *missed]) or None
        fields.update(last_fire_at=last, next_fire_at=next_fire(schedule["cron"], schedule["tz"], max(at, last or 0)))
    table.update(conn, name, **fields)
    return started


def _previous_done(conn, schedule: dict) -> bool:
    previous = table.run_status(conn, schedule["last_run_id"])
    return previous is None or previous[0] in TERMINAL


def _start(conn, schedule: dict, *, request: dict, registry: Registry, fire: float, at: float,
           why: str | None = None) -> list[str]:
    fields = _fields(registry, schedule, request)
    run_id, created = insert_run(conn, now=at, run_key=fire_key(schedule["name"], fire), **fields)
    if created:
        add_schedule_event(conn, schedule["name"], at=at, kind="fired",
                           message=f"fired for {iso(fire)}: started {run_id}" + (f" ({why})" if why else ""),
                           run_id=run_id)
    return [run_id]
