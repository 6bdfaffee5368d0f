"""The runner calls you: a `notices` row each time a run comes to need a person, and one reminder per episode.

`record` writes it in the transition's own transaction (store.runs.settle_run and park). Processes with
`--notify` `claim` undelivered notices, each for exactly one command, and `hand_back` what they started no
command for; displays read `after` their own cursor and never claim. `superseded` is worked out on every read.
Why: docs/architecture.md, section 3.2 (Transitions and who makes them)."""

from __future__ import annotations

from ..states import needs_person
from .base import Connection, Store, StoreError, dict_rows
from .events import add_event

NEEDS_PERSON, REMINDER = "needs_person", "reminder"
CLAIM_AT_MOST = 50  # notices one claim takes; the rest wait for the next one

_COLUMNS = ("n.id, n.run_id, r.agent, n.kind, n.status, n.reason, n.message, n.at, n.episode, n.notified_by,"
            " n.notified_at, r.status AS run_status, r.reason AS run_reason,"
            " (SELECT max(m.id) FROM notices m WHERE m.run_id = n.run_id AND m.kind = 'needs_person') AS newest")
_FROM = "FROM notices n JOIN runs r ON r.id = n.run_id"


def _read(cursor) -> list[dict]:
    """Notice rows, each with `superseded` worked out from its run as it is now (docs/architecture.md, 3.2)."""
    found = []
    for row in dict_rows(cursor):
        run_status, run_reason, newest = row.pop("run_status"), row.pop("run_reason"), row.pop("newest")
        episode = row["episode"] if row["kind"] == REMINDER else row["id"]
        row["superseded"] = episode != newest or not needs_person(run_status, run_reason)
        found.append(row)
    return found


class ClaimLost(StoreError):
    """A claim's UPDATE changed fewer rows than it selected: another process claimed some; nothing is taken."""


def record(conn: Connection, run_id: str, *, status: str, reason: str | None, message: str,
           at: float) -> int | None:
    """Record a notice when `status`/`reason` needs a person and return its id, else None. It runs inside the write
    that moves a run to that state."""
    if not needs_person(status, reason):
        return None
    return conn.execute("INSERT INTO notices (run_id, kind, status, reason, message, at) VALUES (?, ?, ?, ?, ?, ?)"
                        " RETURNING id", (run_id, NEEDS_PERSON, status, reason, message, at)).fetchone()[0]


def last_id(store: Store) -> int:
    """The newest notice's id (0 when there is none): a display's starting cursor, so it shows what comes next."""
    return store.conn.execute("SELECT coalesce(max(id), 0) FROM notices").fetchone()[0]


def after(store: Store, cursor: int, limit: int = 200) -> list[dict]:
    """The notices after id `cursor`, oldest first (a range of the primary key): a display's read."""
    return _read(store.conn.execute(f"SELECT {_COLUMNS} {_FROM} WHERE n.id > ? ORDER BY n.id LIMIT ?", (cursor, limit)))


def of_run(store: Store, run_id: str) -> list[dict]:
    return _read(store.conn.execute(f"SELECT {_COLUMNS} {_FROM} WHERE n.run_id = ? ORDER BY n.id", (run_id,)))


def any_undelivered(store: Store) -> bool:
    """A cheap read (the partial index) before a claim's write, so an idle process does not take the write lock."""
    return store.conn.execute("SELECT 1 FROM notices WHERE notified_at IS NULL LIMIT 1").fetchone() is not None


def claim(store: Store, by: str, at: float, limit: int = CLAIM_AT_MOST) -> list[dict]:
    """Take up to `limit` undelivered notices for `by`'s --notify command, oldest first. It is one transaction: the
    UPDATE names the state it expects (`notified_at IS NULL`) and its rowcount is checked, so two processes never
    both take one. A notice is delivered at most once: a process that dies after its claim (kill -9) loses those it
    had not handed back. Those found superseded are recorded so (`superseded` = 1) in the same transaction, and
    returned marked: no command is to be run for them, nor are they to be handed back."""
    with store.write() as conn:
        ids = [row[0] for row in conn.execute(
            "SELECT id FROM notices WHERE notified_at IS NULL ORDER BY id LIMIT ?", (limit,))]
        if not ids:
            return []
        marks = ", ".join("?" for _ in ids)
        cur = conn.execute(f"UPDATE notices SET notified_by = ?, notified_at = ? WHERE id IN ({marks})"
                           " AND notified_at IS NULL", (by, at, *ids))
        if cur.rowcount != len(ids):
            raise ClaimLost(f"{len(ids) - cur.rowcount} of {len(ids)} notices were claimed by another process")
        claimed = _read(conn.execute(f"SELECT {_COLUMNS} {_FROM} WHERE n.id IN ({marks}) ORDER BY n.id", ids))
        passed = [n["id"] for n in claimed if n["superseded"]]
        if passed:
            conn.execute(f"UPDATE notices SET superseded = 1 WHERE id IN ({', '.join('?' for _ in passed)})", passed)
        return claimed


def hand_back(store: Store, claimed: list[dict]) -> int:
    """Make claimed notices that no command was started for undelivered again, for the next claim. It is one
    statement naming the claim it undoes (its `notified_by` and `notified_at`), so it never takes back another's
    claim. How many it handed back."""
    if not claimed:
        return 0
    marks = ", ".join("?" for _ in claimed)
    by, at = claimed[0]["notified_by"], claimed[0]["notified_at"]
    return store.write_one(f"UPDATE notices SET notified_by = NULL, notified_at = NULL WHERE id IN ({marks})"
                           " AND notified_by = ? AND notified_at = ?", (*(n["id"] for n in claimed), by, at)).rowcount


# Episodes due a reminder: the newest needs_person notice of each run that still needs a person (read through
# the partial index runs_needs_person), older than the cutoff, that no reminder names yet.
_DUE_REMINDERS = """
    SELECT n.id, n.run_id, n.status, n.reason, n.message, n.at FROM runs r INDEXED BY runs_needs_person
    JOIN notices n ON n.id = (SELECT max(m.id) FROM notices m WHERE m.run_id = r.id AND m.kind = 'needs_person')
    WHERE {needs_person} AND n.at <= ?
      AND NOT EXISTS (SELECT 1 FROM notices x WHERE x.episode = n.id AND x.kind = 'reminder')
    ORDER BY n.id LIMIT ?"""


def _due_reminders(conn: Connection, cutoff: float, limit: int) -> list[dict]:
    # runs.py imports this module (to call `record`), so its NEEDS_PERSON is read here, once it is loaded
    from . import runs

    where = runs.NEEDS_PERSON.replace("status", "r.status").replace("reason", "r.reason")
    sql = _DUE_REMINDERS.format(needs_person=where)
    return list(dict_rows(conn.execute(sql, (cutoff, limit))))


def reminders_due(store: Store, cutoff: float) -> bool:
    """A cheap read before `remind`'s write."""
    return bool(_due_reminders(store.conn, cutoff, 1))


def remind(store: Store, after_s: float, at: float, limit: int = CLAIM_AT_MOST) -> list[int]:
    """Record one reminder for each run that has needed a person since before `at - after_s`, each also an event of
    its run. It runs in the transaction that checks none exists for that episode yet, so several processes remind
    once; the unique index notices_one_reminder would refuse a second anyway. The reminders' ids."""
    made = []
    with store.write() as conn:
        for episode in _due_reminders(conn, at - after_s, limit):
            hours = (at - episode["at"]) / 3600
            message = f"still needs a person after {hours:.1f} h: {episode['message']}"
            made.append(conn.execute("INSERT INTO notices (run_id, kind, status, reason, message, at, episode)"
                                     " VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                                     (episode["run_id"], REMINDER, episode["status"], episode["reason"], message, at,
                                      episode["id"])).fetchone()[0])
            add_event(conn, episode["run_id"], at=at, kind=REMINDER, message=message)   # on the run's own timeline too
    return made
