"""Who holds a running run, and whether a claim may take it before its lease ends.

It may when the worker is on this host, its process is verifiably gone (its row's host id, process start time
and process group say so) and nothing is left of its process group, or only what the claim kills first. A
group the worker did not lead is never killed. Anything else leaves the run to its lease.
Why: docs/architecture.md, section 7 (Workers)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..states import RunStatus
from .base import Connection, dict_rows
from .host import end_group, group_left, on_this_host, process_alive, process_start

KILL_WAIT_S = 2.0   # how long a claim waits for a killed group to end before it leaves the run to its lease
_SURVIVED: set[tuple[int, int]] = set()   # (pid, start) of dead workers whose group this process could not end
_COLUMNS = "name, pid, host, host_id, pid_started, pgid"


@dataclass(frozen=True)
class Holder:
    """What can be told of the worker that holds a run. `gone`: its process is gone from this host (as
    `tui-agent workers` says `dead`); `takeable`: a claim here may take its runs before their leases end;
    `why`: for a gone holder, why it is (or is not) takeable, in words; `kill`: a claim kills what is left of
    its process group first."""

    name: str
    gone: bool = False
    takeable: bool = False
    why: str = ""
    kill: bool = False


def judge(row: dict | None, name: str) -> Holder:
    """The holder `name` judged by its worker row, with no kill.

    The row is None when it never registered, as an in-process claimer. A group that still has processes counts
    as takeable when the holder led it, since a claim kills them."""
    if row is None or not on_this_host(row) or process_alive(row["pid"], row["pid_started"]):
        return Holder(name)
    gone = f"its process {row['pid']} is gone from this host"
    if row["host_id"] is None or row["pid_started"] is None or row.get("pgid") is None:
        return Holder(name, True, False, f"{gone}, but its row has no host id, start time or process group "
                      "(an older tui-agent, or a system that gives none): its lease decides")
    pid, pgid = row["pid"], row["pgid"]
    if (pid, row["pid_started"]) in _SURVIVED:
        return Holder(name, True, False, f"{gone}; what was left of its process group {pgid} survived SIGKILL: "
                      "its lease decides")
    if pgid == pid and process_start(pid) not in (None, row["pid_started"]):
        # its pid is a later process's now, which the kernel gives no pid still naming a group: its group is empty
        return Holder(name, True, True, f"{gone} (pid {pid} is another process's now) and nothing is left of its "
                      "process group")
    left = group_left(pgid)
    if not left:
        return Holder(name, True, True, f"{gone} and nothing is left of its process group")
    if pgid != pid:
        return Holder(name, True, False, f"{gone}; it shared process group {pgid} with another program, which "
                      f"still has {_processes(left)}: its lease decides")
    return Holder(name, True, True, f"{gone}; {_processes(left)} left in its process group {pgid} are killed "
                  "first", kill=True)


def clear(row: dict, holder: Holder) -> str | None:
    """End what is left of a takeable holder's process group, inside a claim's write, before it writes.

    The group gets SIGKILL, waiting up to KILL_WAIT_S. Returns why the run may be taken now, or None when
    something of the group survived (the run waits for its lease, and this process does not try that group
    again)."""
    left = group_left(row["pgid"]) if holder.kill else 0
    if not left:
        return holder.why
    if end_group(row["pgid"], KILL_WAIT_S):
        _SURVIVED.add((row["pid"], row["pid_started"]))
        return None
    return f"its process {row['pid']} is gone from this host; killed what was left of its process group " \
           f"{row['pgid']} ({_processes(left)})"


def _processes(count: int) -> str:
    return f"{count} process{'es' * (count != 1)}"


HELD_HERE = ("SELECT DISTINCT w.name, w.pid, w.host, w.host_id, w.pid_started, w.pgid FROM runs r"
             " JOIN workers w ON w.name = r.worker WHERE r.status = 'running' AND r.lease_expires_at > {lease_now}"
             " AND w.host_id = {host_id} AND w.pid_started IS NOT NULL AND w.pgid IS NOT NULL")
"""Workers of this host (by host id) holding live leases; `{lease_now}` and `{host_id}` are the caller's
placeholders, and the caller adds its own `AND ...` on the run's columns (`workers` has none of their names)."""


def takeable_rows(rows: Iterable[dict]) -> list[tuple[dict, Holder]]:
    """Of HELD_HERE's rows, those whose runs a claim may take now, each with its judgement."""
    judged = [(row, judge(row, row["name"])) for row in rows]
    return [(row, holder) for row, holder in judged if holder.takeable]


def holders_of(conn: Connection, names: Iterable[str]) -> dict[str, tuple[dict | None, Holder]]:
    """Each named holder's worker row (None: not registered) and judgement, read in one query."""
    wanted = sorted({name for name in names if name})
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    rows = {row["name"]: row for row in dict_rows(conn.execute(
        f"SELECT {_COLUMNS} FROM workers WHERE name IN ({marks})", wanted))}
    return {name: (rows.get(name), judge(rows.get(name), name)) for name in wanted}


def with_holders(conn: Connection, runs: list[dict], lease_at: float) -> list[dict]:
    """Each run row, with epoch times, given `holder_gone` and `claimable_in_s`.

    For a running run, `holder_gone` says whether its worker's process is gone from this host (as `workers`
    says `dead`) and `claimable_in_s` the seconds until a claim may take it (claimable_in); both are None for
    any other run. `lease_at` is the lease clock's now."""
    holders = holders_of(conn, [run["worker"] for run in runs if run["status"] == RunStatus.RUNNING and run["worker"]])
    for run in runs:
        run["holder_gone"] = run["claimable_in_s"] = None
        if run["status"] == RunStatus.RUNNING:
            holder = holders.get(run["worker"], (None, Holder(run["worker"] or "")))[1]
            run["holder_gone"] = holder.gone
            run["claimable_in_s"] = claimable_in(holder, run["lease_expires_at"], lease_at)
    return runs


def claimable_in(holder: Holder, lease_expires_at: float | None, lease_at: float) -> float:
    """Seconds until a claim may take a running run, never negative.

    It is 0 once its lease is over, or at once when its holder is takeable; else what its lease has left (a live
    holder keeps renewing it)."""
    left = (lease_expires_at or 0) - lease_at
    return 0.0 if holder.takeable or left <= 0 else round(left, 1)
