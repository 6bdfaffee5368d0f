"""The effect ledger's rows. Every function runs inside the caller's fenced write, so a
state change, its journal entry and its event commit together."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, cast

from ..states import IN_DOUBT, TERMINAL, EffectState, Reason, RunStatus
from .base import Connection, Store, dict_rows, one_row, positioned_page
from .imported import NOT_IMPORTED
from .rows import EffectRow
from .runs import RunNotFound, StateChanged, requeue
from .workers import still_sending


def _effects(rows: Iterable[dict[str, Any]]) -> list[EffectRow]:
    """`SELECT * FROM effects` rows, typed."""
    return cast("list[EffectRow]", list(rows))


def _marks(values: Collection[str]) -> str:
    return ", ".join("?" for _ in values)


def effect_at(conn: Connection, run_id: str, generation: int, position: int) -> EffectRow | None:
    return cast("EffectRow | None", one_row(conn.execute("SELECT * FROM effects WHERE run_id = ? AND generation = ?"
                                                         " AND position = ?", (run_id, generation, position))))


def confirmed_with_key(conn: Connection, key: str, except_id: int) -> dict | None:
    """The confirmed effect with `key` (other than `except_id`) anywhere in the database, or None.

    The ledger is unique by key: a confirmed row anywhere means done, and so does the key of a confirmed effect
    whose run prune removed, found in kept_keys (its row: `run_id` and `result` as the row had them)."""
    return one_row(conn.execute("SELECT * FROM effects WHERE key = ? AND state = ? AND id != ?"
                             " ORDER BY id LIMIT 1", (key, EffectState.CONFIRMED, except_id))) or one_row(
        conn.execute("SELECT run_id, result FROM kept_keys WHERE kind = 'effect' AND key = ?", (key,)))


def in_doubt_with_key(conn: Connection, key: str, except_id: int) -> EffectRow | None:
    return cast("EffectRow | None", one_row(conn.execute(
        f"SELECT * FROM effects WHERE key = ? AND state IN ({_marks(IN_DOUBT)}) AND id != ? ORDER BY id LIMIT 1",
        (key, *IN_DOUBT, except_id))))


def in_doubt_in_ended_runs(conn: Connection, key: str, except_run: str) -> list[EffectRow]:
    """The rows of `key` still in doubt in runs that have ended (cancelled or abandoned while it was attempted).
    Nobody can decide them there, so a person's decision on the key in another run decides them too."""
    return _effects(dict_rows(conn.execute(
        "SELECT e.* FROM effects e JOIN runs r ON r.id = e.run_id"
        f" WHERE e.key = ? AND e.state IN ({_marks(IN_DOUBT)}) AND r.status IN ({_marks(TERMINAL)})"
        " AND e.run_id != ? ORDER BY e.id", (key, *IN_DOUBT, *TERMINAL, except_run))))


def waiting_on_key(conn: Connection, key: str, except_run: str) -> list[str]:
    """Other runs that wait (reason reconcile) before attempting `key` because it was in doubt here."""
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT e.run_id FROM effects e JOIN runs r ON r.id = e.run_id WHERE e.key = ? AND e.state = ?"
        f" AND r.status = ? AND r.reason = ? AND e.run_id != ? AND r.{NOT_IMPORTED}",
        (key, EffectState.INTENDED, RunStatus.WAITING, Reason.RECONCILE, except_run))]


def add_intended(conn: Connection, *, run_id: str, generation: int, position: int, name: str, key: str,
                 has_lookup: bool, dedupe_ttl_s: float | None, lookup_ttl_s: float | None,
                 service: str | None, fence: int, now: float) -> EffectRow:
    conn.execute(
        "INSERT INTO effects (run_id, generation, position, name, key, state, attempts, has_lookup, dedupe_ttl_s,"
        " lookup_ttl_s, service, fence, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, generation, position, name, key, EffectState.INTENDED, int(has_lookup), dedupe_ttl_s, lookup_ttl_s,
         service, fence, now, now))
    return cast(EffectRow, effect_at(conn, run_id, generation, position))   # the row just inserted


def set_state(conn: Connection, effect_id: int, state: str, now: float, expected: str | None = None,
              **fields) -> None:
    """Move one effect to `state`, setting any other columns given. With `expected`, only from that state: a person's
    answer to a question that was answered a moment ago is refused, not applied twice."""
    columns = {"state": state, "updated_at": now, **fields}
    assignments = ", ".join(f"{name} = ?" for name in columns)
    if expected is None:
        conn.execute(f"UPDATE effects SET {assignments} WHERE id = ?", (*columns.values(), effect_id))
        return
    cur = conn.execute(f"UPDATE effects SET {assignments} WHERE id = ? AND state = ?",
                       (*columns.values(), effect_id, expected))
    if cur.rowcount != 1:
        raise StateChanged(f"effect {effect_id} is no longer {expected}; nothing changed")


def mark_attempted(conn: Connection, effect_id: int, worker: str, fence: int, now: float) -> None:
    conn.execute("UPDATE effects SET state = ?, attempts = attempts + 1, attempted_at = ?,"
                 " first_attempted_at = coalesce(first_attempted_at, ?), attempted_by = ?, fence = ?,"
                 " waits_for = NULL, updated_at = ? WHERE id = ?",
                 (EffectState.ATTEMPTED, now, now, worker, fence, now, effect_id))


def run_fence(conn: Connection, run_id: str) -> int | None:
    """The run's fence now: a cheap read just before a service is called."""
    found = conn.execute("SELECT fence FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if found is None else found[0]


_HELD_BACK = ("SELECT e.* FROM effects e JOIN runs r ON r.id = e.run_id WHERE r.status = ?"
              " AND r.reason = ? AND e.generation = r.generation AND e.state = ? AND e.waits_for IS NOT NULL"
              f" AND r.{NOT_IMPORTED}")
_HELD_BACK_PARAMS = (RunStatus.WAITING, Reason.RECONCILE, EffectState.UNKNOWN)


def requeue_released(store: Store, now: float) -> list[str]:
    """Queue again each run that waits on an effect's worker, once that worker has let go of the run or its process
    has ended. Such a run waits (reason reconcile) only because the worker that attempted the effect might still send
    it. The next worker reconciles the effect anew, and the lookup's silence then means "not done". Cheap when
    nothing waits so."""
    freed = []
    for effect in list(store.query(_HELD_BACK, _HELD_BACK_PARAMS)):
        sender, why = still_sending(store.conn, effect, now)
        if sender is not None:
            continue
        with store.write() as conn:
            if one_row(conn.execute(_HELD_BACK + " AND e.id = ?", (*_HELD_BACK_PARAMS, effect["id"]))) is None:
                continue  # a person or another worker got there first
            conn.execute("UPDATE effects SET waits_for = NULL WHERE id = ?", (effect["id"],))
            requeue(conn, effect["run_id"], expected=RunStatus.WAITING, reason=Reason.RESUMED,
                    message=f"queued: {why}, so its attempt of {effect['name']} can no longer go out; the effect is "
                    "reconciled again", now=now)
        freed.append(effect["run_id"])
    return freed


def in_doubt(store: Store, run_id: str, generation: int, states: Collection[str] = IN_DOUBT) -> list[EffectRow]:
    """The run's effects in these states, in position order (indexed: no read of its other effects)."""
    return _effects(store.query("SELECT * FROM effects WHERE run_id = ? AND generation = ?"
                               f" AND state IN ({_marks(states)}) ORDER BY position", (run_id, generation, *states)))


def effects_for(store: Store, run_id: str) -> list[EffectRow]:
    return _effects(store.query("SELECT * FROM effects WHERE run_id = ? ORDER BY generation, position", (run_id,)))


PAGE = 100


def effects_page(store: Store, run_id: str, after: tuple[int, int] | None = None, limit: int = PAGE,
                 newest_first: bool = False) -> list[EffectRow]:
    """The run's ledger a page at a time, by (generation, position)."""
    return _effects(positioned_page(store, "effects", run_id=run_id, after=after, limit=limit,
                                    newest_first=newest_first))


def effects_at(store: Store, run_id: str, generation: int, first: int, last: int | None = None) -> list[EffectRow]:
    """One generation's effects at positions first..last (to its end when `last` is None)."""
    upto, params = ("", ()) if last is None else (" AND position <= ?", (last,))
    return _effects(store.query(f"SELECT * FROM effects WHERE run_id = ? AND generation = ? AND position >= ?{upto}"
                               " ORDER BY position", (run_id, generation, first, *params)))


def effect_counts(store: Store, run_id: str, generation: int) -> tuple[int, int]:
    """(the run's effects, those of this generation in doubt), counted on the index."""
    total = store.conn.execute("SELECT count(*) FROM effects WHERE run_id = ?", (run_id,)).fetchone()[0]
    doubtful = store.conn.execute(f"SELECT count(*) FROM effects WHERE run_id = ? AND generation = ?"
                                  f" AND state IN ({_marks(IN_DOUBT)})", (run_id, generation, *IN_DOUBT)).fetchone()[0]
    return total, doubtful


def next_in_doubt(store: Store, run_id: str, generation: int, after: int) -> int | None:
    """The position of the first effect in doubt after `after`, or None."""
    row = store.conn.execute(f"SELECT position FROM effects WHERE run_id = ? AND generation = ? AND position > ?"
                             f" AND state IN ({_marks(IN_DOUBT)}) ORDER BY position LIMIT 1",
                             (run_id, generation, after, *IN_DOUBT)).fetchone()
    return row[0] if row else None


def find_effect(store: Store, run_id: str, generation: int, ref: str) -> EffectRow:
    """The run's effect named `ref`, or at position `ref` when a name repeats."""
    rows = [r for r in effects_for(store, run_id) if r["generation"] == generation]
    if ref.isascii() and ref.isdigit():   # compared as text: int() refuses "²" and numbers past 4,300 digits
        matches = [r for r in rows if str(r["position"]) == (ref.lstrip("0") or "0")]
    else:
        matches = [r for r in rows if r["name"] == ref]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        names = ", ".join(f"{r['name']} (position {r['position']}, {r['state']})" for r in rows) or "none"
        raise RunNotFound(f"run {run_id} has no effect {ref!r}; its effects: {names}")
    positions = ", ".join(str(r["position"]) for r in matches)
    raise RunNotFound(f"run {run_id} has {len(matches)} effects named {ref!r} (positions {positions}); "
                      "pass the position instead")
