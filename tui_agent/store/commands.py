"""The programs `ctx.run_command` starts, one row each, committed before the program runs.

A row holds the program's process group, its leader's start time and its host, written while the program is
held at its gate (runtime/commands.py). The next claim after a `kill -9` ends what is left of that group
(`end_left`) before the run's code goes on; a program on another host is marked `gone`.
Why: docs/architecture.md, section 7 (Workers), "Deadlines"."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..states import EventKind
from .base import Connection, Store, dict_rows
from .events import add_event
from .holders import KILL_WAIT_S
from .host import end_group, group_left, process_start, this_host_id

RUNNING, ENDED, KILLED, GONE = "running", "ended", "killed", "gone"


def begin(conn: Connection, *, run_id: str, generation: int, position: int, name: str, fence: int,
          argv: Sequence[str], env: Sequence[str], pgid: int, pid_started: int | None, now: float) -> int:
    """Inside the caller's fenced write, before the program is let go: its row, `running`; returns its id."""
    return conn.execute(
        "INSERT INTO commands (run_id, generation, position, name, fence, argv, env, host_id, pgid, pid_started,"
        " state, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (run_id, generation, position, name, fence, json.dumps(list(argv), ensure_ascii=False),
         json.dumps(sorted(env)), this_host_id(), pgid, pid_started, RUNNING, now)).fetchone()[0]


def ended(store: Store, command_id: int, exit_code: int | None, now: float) -> None:
    """Record that the program ended, its group killed with it. This is a fact about a process, not a write for the
    run, so it is not fenced: a thread left behind records it too. Only a row still `running` moves."""
    store.write_one("UPDATE commands SET state = ?, exit = ?, ended_at = ? WHERE id = ? AND state = ?",
                    (ENDED, exit_code, now, command_id, RUNNING))


def end_left(conn: Connection, run_id: str, now: float, worker: str, fence: int) -> list[dict]:
    """Inside a claim's write, before it takes the run: end every program an earlier claim of the run started
    and nobody saw end. A group on this host is killed (SIGKILL, waiting up to KILL_WAIT_S) unless nothing is
    left of it: its leader's pid held by a later process means the group emptied before that pid was given out.
    Each row moves to `killed` or `gone` with an event; returns the rows of groups that survived the kill (the
    run waits for a person then)."""
    here = this_host_id()
    survived = []
    for row in dict_rows(conn.execute("SELECT id, name, argv, host_id, pgid, pid_started FROM commands"
                                      " WHERE run_id = ? AND state = ?", (run_id, RUNNING))):
        program = json.loads(row["argv"])[0]
        what = f"the program {program} ({row['name']}, process group {row['pgid']}) that an earlier claim started"
        if row["host_id"] is None or row["host_id"] != here:
            state, said = GONE, f"{what} ran on another host; its worker ends it there when its lease lapses"
        elif not _left(row):
            state, said = GONE, f"{what} had ended"
        elif (left := end_group(row["pgid"], KILL_WAIT_S)) == 0:
            state, said = KILLED, f"killed what was left of {what}, before this claim touches the run"
        else:
            survived.append(row)
            add_event(conn, run_id, at=now, kind=EventKind.COMMAND,
                      message=f"{what} still has {left} process(es) after SIGKILL", worker=worker, fence=fence)
            continue
        conn.execute("UPDATE commands SET state = ?, ended_at = ? WHERE id = ?", (state, now, row["id"]))
        add_event(conn, run_id, at=now, kind=EventKind.COMMAND, message=said, worker=worker, fence=fence)
    return survived


def _left(row: dict) -> bool:
    """Whether anything of the row's process group may be left on this host."""
    started = process_start(row["pgid"])
    if started is not None and row["pid_started"] is not None and started != row["pid_started"]:
        return False   # the pid is a later process's: the kernel gives out no pid that still names a group
    return group_left(row["pgid"]) > 0


def of_position(conn: Connection, run_id: str, generation: int, position: int) -> list[dict]:
    """The programs started inside one journaled call, oldest first (a crashed attempt's included)."""
    return list(dict_rows(conn.execute(
        "SELECT id, name, argv, state, exit, started_at, ended_at FROM commands WHERE run_id = ? AND generation = ?"
        " AND position = ? ORDER BY id", (run_id, generation, position))))
