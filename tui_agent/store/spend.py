"""What the model calls spent, read for `tui-agent spend` and the TUI's spend view (tui_agent/spend.py adds it up).

A call counts once, in the run that made it: a fork's copies of its parent's answered calls (before its fork
step, generation 1) are the parent's. An answered call spent its recorded cost (NULL: no price) and tokens; a
call in flight whose worker died (no live lease) may have been billed its reservation (model_calls.py); one
under a live lease, or failed, spent nothing yet. Calls are read from `since` on (model_calls_started)."""

from __future__ import annotations

from .base import Store, dict_rows, on_server

BUCKET_S = 900   # calls are added up per quarter of an hour: every time zone's days start on one

_DIED = ("(m.state = 'in_flight' AND NOT (r.status = 'running' AND r.lease_expires_at > :at AND m.fence = r.fence"
         " AND m.generation = r.generation))")
_FROM = ("FROM model_calls m JOIN runs r ON r.id = m.run_id WHERE m.started_at >= :since"
         " AND m.state IN ('answered', 'in_flight')"
         " AND NOT (r.parent_id IS NOT NULL AND m.generation = 1 AND m.position < r.fork_step)")


def _bucket(store: Store) -> str:
    """The quarter of an hour a call was sent in, as a whole number (epoch seconds / BUCKET_S, rounded down)."""
    if on_server(store.conn):
        return f"floor(m.started_at / {BUCKET_S})::bigint"
    return f"CAST(m.started_at / {BUCKET_S} AS INTEGER)"   # the instants are positive: the cast rounds down


def _answered(column: str) -> str:
    return f"sum(CASE WHEN m.state = 'answered' THEN {column} END)"


def spending(store: Store, since: float, at: float) -> list[dict]:
    """The calls sent from `since` on, added up per run, model and quarter of an hour (`bucket`).

    Each group has the `calls` answered, their `cost_usd`, tokens (`input_tokens`, the cached ones included,
    `output_tokens`, `cache_read_tokens`, `cache_write_tokens`), `possibly_billed_usd` (the reservations of
    calls whose worker died, judged at `at`), and `unpriced_calls` (answered or died calls whose model has no
    price). A group with no priced call has a cost of None."""
    sql = (f"SELECT m.run_id, r.agent, m.model, {_bucket(store)} AS bucket,"
           " count(CASE WHEN m.state = 'answered' THEN 1 END) AS calls,"
           f" {_answered('m.cost_usd')} AS cost_usd, {_answered('m.input_tokens')} AS input_tokens,"
           f" {_answered('m.tokens')} AS output_tokens, {_answered('m.cache_read_tokens')} AS cache_read_tokens,"
           f" {_answered('m.cache_write_tokens')} AS cache_write_tokens,"
           f" sum(CASE WHEN {_DIED} THEN m.reserved_usd END) AS possibly_billed_usd,"
           " count(CASE WHEN (m.state = 'answered' AND m.cost_usd IS NULL)"
           f" OR ({_DIED} AND m.reserved_usd IS NULL) THEN 1 END) AS unpriced_calls"
           f" {_FROM} GROUP BY m.run_id, r.agent, m.model, {_bucket(store)}")
    return list(dict_rows(store.conn.execute(sql, {"since": since, "at": at})))


def calls_spending(store: Store, since: float, at: float) -> list[dict]:
    """Each call `spending` counts, one row each, with what it used, to price it again.

    A row has its `state` (answered, or in_flight: `died` says whether its worker died), its `usage` (JSON as
    the API gave it; NULL for a call answered before tui-agent kept it, whose reply it could not read), its
    tokens and its reservation."""
    sql = (f"SELECT m.run_id, r.agent, m.model, {_bucket(store)} AS bucket, m.state, {_DIED} AS died, m.usage,"
           " m.input_tokens, m.tokens AS output_tokens, m.cache_read_tokens, m.cache_write_tokens, m.reserved_input,"
           f" m.reserved_output {_FROM}")
    return list(dict_rows(store.conn.execute(sql, {"since": since, "at": at})))
