"""Model calls, one row per attempt, each committed before its request is sent.

A worker that dies mid-call leaves its row `in_flight`: that call may have been billed (the Messages API has no
idempotency key), so its reservation stays counted in the budget. An answered call trades its reservation for
what it used; a failed one gives it back. The request is kept beside the reply for a later diff.
Why: docs/architecture.md, section 8 (Budgets, plateaus, schedules, models)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..states import CallState, RunStatus
from .base import Connection, Store, refuse_stale, write_once
from .rows import ModelCallRow

if TYPE_CHECKING:  # runs.fork uses this module, and journal imports runs
    from .journal import Usage

_HOLD = ("UPDATE checkpoints SET used_model_calls = used_model_calls + ?, used_input_tokens = used_input_tokens + ?,"
         " used_output_tokens = used_output_tokens + ?, used_cost_usd = used_cost_usd + ? WHERE run_id = ?")


@dataclass(frozen=True)
class Spent:
    """What an answered call used, from its reply's `usage`. `input_tokens` counts every input token, the cached ones
    too, as the budget does; `cache_read_tokens` and `cache_write_tokens` count how many of them were cached."""

    usage: dict
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int

    @classmethod
    def of(cls, usage: dict) -> Spent:
        def count(name: str) -> int:
            return int(usage.get(name) or 0)

        read, written = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
        return cls(usage, count("input_tokens") + read + written, count("output_tokens"), read, written)


@dataclass(frozen=True)
class CallKey:
    run_id: str
    generation: int
    position: int
    call: int


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def _body(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def part_digest(value) -> str | None:
    """What a request records for a system prompt or tool list (None for none)."""
    return None if value is None else _digest(_body(value))


def part(store: Store, run_id: str, digest: str | None):
    """A system prompt or tool list a request named by digest, as it was sent."""
    if digest is None:
        return None
    row = store.conn.execute("SELECT body FROM request_parts WHERE run_id = ? AND digest = ?",
                             (run_id, digest)).fetchone()
    return None if row is None else json.loads(row[0])


def answered_request(store: Store, run_id: str, generation: int, position: int) -> dict | None:
    """The request of the call answered at `position`, as recorded. That call is the one whose reply the journal
    holds. The request has `model`, `max_tokens`, `system` and `tools` digests, `after` and the messages added since
    the last call."""
    row = store.conn.execute("SELECT request FROM model_calls WHERE run_id = ? AND generation = ? AND position = ?"
                             " AND state = 'answered' ORDER BY call DESC LIMIT 1",
                             (run_id, generation, position)).fetchone()
    return None if row is None else json.loads(row[0])


# Every statement of an attempt's batch after the first (the lease's renewal, which locks the run's row) checks
# the fence itself, so a stale fence writes nothing at all.
_FENCED = "EXISTS (SELECT 1 FROM runs WHERE id = ? AND fence = ?)"
_PART = ("INSERT INTO request_parts (run_id, digest, body) SELECT ?, ?, ?"
         f" WHERE {_FENCED} ON CONFLICT DO NOTHING")
_NEXT_CALL = "(SELECT coalesce(max(call), 0) + 1 FROM model_calls WHERE run_id = ? AND generation = ? AND position = ?)"
_ATTEMPT = ("INSERT INTO model_calls (run_id, generation, position, call, name, fence, provider, model, state,"
            " request, reserved_input, reserved_output, reserved_usd, started_at, updated_at)"
            " SELECT ?, ?, ?, {call}, ?, ?, ?, ?, 'in_flight', ?, ?, ?, ?, ?, ?"
            f" WHERE {_FENCED} RETURNING call")


def begin(store: Store, run_id: str, *, generation: int, position: int, name: str, fence: int, provider: str,
          model: str, request: dict, reserved: Usage, now: float, renewal: tuple[str, tuple],
          last_call: int = 0) -> CallKey:
    """Write the attempt's row and its reservation, committed before the request is sent.

    The reservation is held against the budget from now on. It follows `renewal` (runs.renewal: the fence
    checked, the lease renewed) in one batch (store.write_batch, one round trip on a server), each statement
    fenced. `last_call` is the last call this claim made at this position (0 for none). It is written once
    however its connection is cut (base.write_once): a row of this fence past `last_call` is this attempt's,
    and a second write takes the number after every row there, so a cut first one that commits late collides
    with it instead of adding a second attempt.

    `request` holds `system`, `tools`, `messages`, `after` (messages shared with the previous call) and
    `max_tokens`; the row keeps only what the previous call did not already record: the system prompt and tool
    list once per run (request_parts, by digest)."""
    bodies = [None if value is None else _body(value) for value in (request["system"], request["tools"])]
    digests = [None if body is None else _digest(body) for body in bodies]
    parts = [(digest, body) for digest, body in zip(digests, bodies) if body is not None]
    after = request["after"]
    kept = {"model": model, "max_tokens": request["max_tokens"], "system": digests[0], "tools": digests[1],
            "after": after, "messages": request["messages"][after:]}
    fenced = (run_id, fence)
    row = (name, fence, provider, model, json.dumps(kept, ensure_ascii=False), reserved.input_tokens,
           reserved.output_tokens, reserved.cost_usd if not reserved.unpriced_calls else None, now, now, *fenced)
    again: int | None = None   # the number a second write takes (read back after a cut)

    def write() -> CallKey:
        call, numbered = ("?", (again,)) if again else (_NEXT_CALL, (run_id, generation, position))
        cursors = store.write_batch([
            renewal,
            *((_PART, (run_id, digest, body, *fenced)) for digest, body in parts),
            (_ATTEMPT.format(call=call), (run_id, generation, position, *numbered, *row)),
            (_HOLD + f" AND {_FENCED}", (1, reserved.input_tokens, reserved.output_tokens, reserved.cost_usd, run_id,
                                         *fenced))])
        refuse_stale(cursors[0], run_id, fence)
        return CallKey(run_id, generation, position, cursors[-2].fetchone()[0])

    def committed() -> CallKey | None:
        nonlocal again
        ours, highest = store.conn.execute(
            "SELECT max(call) FILTER (WHERE fence = ? AND call > ?), coalesce(max(call), 0) FROM model_calls"
            " WHERE run_id = ? AND generation = ? AND position = ?",
            (fence, last_call, run_id, generation, position)).fetchone()
        again = highest + 1
        return None if ours is None else CallKey(run_id, generation, position, ours)

    return write_once(store, run_id, write, committed)


def answered(conn: Connection, key: CallKey, *, spent: Spent, cost_usd: float | None, request_id: str | None,
             now: float) -> None:
    """Record what the answered call used, and the usage as the API gave it, which `spend --reprice` prices again. It
    runs inside the write that journals the reply, whose usage replaces the reservation."""
    conn.execute("UPDATE model_calls SET state = 'answered', tokens = ?, input_tokens = ?, cache_read_tokens = ?,"
                 " cache_write_tokens = ?, usage = ?, cost_usd = ?, request_id = ?, updated_at = ?"
                 " WHERE run_id = ? AND generation = ? AND position = ? AND call = ?",
                 (spent.output_tokens, spent.input_tokens, spent.cache_read_tokens, spent.cache_write_tokens,
                  json.dumps(spent.usage, ensure_ascii=False), cost_usd, request_id, now, *_where(key)))


def failed(conn: Connection, key: CallKey, reserved: Usage, error: str, now: float) -> None:
    """Inside a fenced write: the call came back with an error, so nothing was billed; the hold is given back."""
    conn.execute("UPDATE model_calls SET state = 'failed', error = ?, updated_at = ?"
                 " WHERE run_id = ? AND generation = ? AND position = ? AND call = ?", (error[:500], now, *_where(key)))
    conn.execute(_HOLD, (-1, -reserved.input_tokens, -reserved.output_tokens, -reserved.cost_usd, key.run_id))


def streamed(conn: Connection, key: CallKey, tokens: int, now: float) -> None:
    """The live count of a streaming reply (no fence: it only ever touches its own in-flight row)."""
    conn.execute("UPDATE model_calls SET tokens = ?, updated_at = ? WHERE run_id = ? AND generation = ?"
                 " AND position = ? AND call = ? AND state = 'in_flight'", (tokens, now, *_where(key)))


def _where(key: CallKey) -> tuple:
    return key.run_id, key.generation, key.position, key.call


def _live(run: Mapping[str, Any], now: float) -> bool:
    return run["status"] == RunStatus.RUNNING and (run["lease_expires_at"] or 0) > now


def calls_for(store: Store, run: Mapping[str, Any], now: float, first: int = 0,
              last: int | None = None) -> list[ModelCallRow]:
    """The current generation's calls in order, at positions first..last, to the end when `last` is None.

    An in-flight row not under the run's live lease is `died`: a worker killed mid-call leaves its lease to run
    out."""
    upto, params = ("", ()) if last is None else (" AND position <= ?", (last,))
    rows = store.query("SELECT position, call, name, fence, provider, model, state, request, reserved_input,"
                          " reserved_output, reserved_usd, tokens, cost_usd, request_id, error, started_at, updated_at"
                          f" FROM model_calls WHERE run_id = ? AND generation = ? AND position >= ?{upto}"
                          " ORDER BY position, call", (run["id"], run["generation"], first, *params))
    live = _live(run, now)
    shown: list[ModelCallRow] = []
    for row in rows:
        if row["state"] == CallState.IN_FLIGHT and not (live and row["fence"] == run["fence"]):
            row["state"] = CallState.DIED
        row["request"] = json.loads(row["request"])
        shown.append(cast(ModelCallRow, row))
    return shown


@dataclass
class Held:
    """What a run's calls in flight hold against its budget, counted until they are answered.

    Each such call holds its worst case, its (`usd`, `input_tokens`, `output_tokens`). Of those, the calls whose
    worker died may have been billed: `died_usd`, and `died_unpriced`, how many of them have no price."""

    usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    died_usd: float = 0.0
    died_unpriced: int = 0


def held_by(store: Store, runs: list[dict], now: float) -> dict[str, Held]:
    """What the calls in flight of each of `runs` hold (Held), for the runs that have any.

    `runs` are rows with id, status, fence, generation and lease_expires_at. It is one read of the partial index
    of in-flight rows for the whole list, of every generation."""
    if not runs:
        return {}
    by_id = {run["id"]: run for run in runs}
    held: dict[str, Held] = {}
    rows = store.conn.execute("SELECT run_id, generation, fence, reserved_usd, reserved_input, reserved_output"
                              " FROM model_calls INDEXED BY model_calls_in_flight WHERE state = 'in_flight'"
                              f" AND run_id IN ({', '.join('?' * len(by_id))})", tuple(by_id))
    for run_id, generation, fence, usd, input_tokens, output_tokens in rows:
        run, hold = by_id[run_id], held.setdefault(run_id, Held())
        hold.usd += usd or 0
        hold.input_tokens += input_tokens
        hold.output_tokens += output_tokens
        if not (_live(run, now) and (generation, fence) == (run["generation"], run["fence"])):
            hold.died_usd += usd or 0
            hold.died_unpriced += usd is None
    return held


def possibly_billed(store: Store, run: dict, now: float) -> float:
    """What the current generation's calls that died in flight reserved. It reads through the partial index of
    in-flight rows, so it costs the same however many calls the run made."""
    fence = run["fence"] if _live(run, now) else None
    row = store.conn.execute("SELECT sum(reserved_usd) FROM model_calls INDEXED BY model_calls_in_flight"
                             " WHERE run_id = ? AND state = 'in_flight' AND generation = ? AND fence IS NOT ?",
                             (run["id"], run["generation"], fence)).fetchone()
    return row[0] or 0


def copy_for_fork(conn: Connection, parent: dict, run_id: str, from_step: int) -> None:
    """A fork keeps the answered calls of the positions it keeps, and the request parts they name."""
    conn.execute("INSERT INTO model_calls (run_id, generation, position, call, name, fence, provider, model, state,"
                 " request, reserved_input, reserved_output, reserved_usd, tokens, input_tokens, cache_read_tokens,"
                 " cache_write_tokens, usage, cost_usd, request_id, started_at, updated_at)"
                 " SELECT ?, 1, position, call, name, 0, provider, model, state, request, reserved_input,"
                 " reserved_output, reserved_usd, tokens, input_tokens, cache_read_tokens, cache_write_tokens, usage,"
                 " cost_usd, request_id, started_at, updated_at FROM model_calls"
                 " WHERE run_id = ? AND generation = ? AND position < ? AND state = 'answered'",
                 (run_id, parent["id"], parent["generation"], from_step))
    conn.execute("INSERT INTO request_parts (run_id, digest, body) SELECT ?, digest, body FROM request_parts"
                 " WHERE run_id = ?", (run_id, parent["id"]))
