"""The effect ledger's rules (DESIGN.md section 3): `intended -> attempted -> confirmed`, an
attempt whose outcome nobody saw becomes `unknown`, and `unknown` is reconciled by asking the
service, resending under a deduplicating key, or waiting for a person. Never a blind retry."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import EffectNotDone
from ..store.effects import (
    add_intended,
    confirmed_with_key,
    effect_at,
    in_doubt_with_key,
    mark_attempted,
    set_state,
)
from ..store.events import add_event
from ..store.journal import Usage
from .clock import CLOCK, now
from .faults import crash_point
from .outcomes import StepFailed, Suspend
from .retry import backoff_s
from .results import encode

if TYPE_CHECKING:
    from .context import Context

_EFFECT = Usage(effects=1)


def _span(seconds: float) -> str:
    return f"{seconds / 3600:g}h" if seconds >= 3600 else f"{seconds:g}s"


class _Effect:
    """One `ctx.effect` call: the row it owns and the callables that only the agent's code has."""

    def __init__(self, ctx: Context, position: int, name: str, key: str, do: Callable, lookup: Callable | None):
        self.ctx, self.position, self.name, self.key, self.do, self.lookup = ctx, position, name, key, do, lookup
        self.started_at = now()
        self.t0 = CLOCK.perf()

    def event(self, conn, message: str) -> None:
        ctx = self.ctx
        add_event(conn, ctx.run_id, now(), "effect", f"{self.name}: {message}", ctx.worker, ctx.fence)

    def transition(self, row: dict, state: str, message: str, **fields) -> dict:
        with self.ctx.write() as conn:
            set_state(conn, row["id"], state, now(), **fields)
            self.event(conn, message)
        return {**row, "state": state, **fields}

    def confirm(self, row: dict, value: Any, message: str | None = None, **fields) -> Any:
        """`confirmed`, the result, the journal entry and the checkpoint, in one fenced commit."""
        encoded = encode(value, f"effect {self.name!r}")

        def also(conn):
            set_state(conn, row["id"], "confirmed", now(), result=encoded, **fields)
            if message:
                self.event(conn, message)

        return self.ctx._record(self.position, self.name, "effect", value, self.started_at,
                                CLOCK.perf() - self.t0, _EFFECT, also=also)

    def wait_for_person(self, row: dict, why: str) -> None:
        run = self.ctx.run_id
        raise Suspend("waiting", "reconcile", f"needs a person: {self.name} {why}; decide with "
                      f"tui-agent reconcile {run} {self.name} --happened | --not-done | --abandon")

    def attempt(self, row: dict) -> Any:
        """Claim the key for one attempt, then call do(key); a doubt is reconciled, never retried blindly."""
        ctx = self.ctx
        with ctx.write() as conn:
            done = confirmed_with_key(conn, self.key, row["id"])
            doubt = None if done else in_doubt_with_key(conn, self.key, row["id"])
            if not done and not doubt:
                mark_attempted(conn, row["id"], ctx.worker, ctx.fence, now())
        if done:
            return self.confirm(row, json.loads(done["result"]),
                                f"key {self.key} was already confirmed by run {done['run_id']}; not done again",
                                done_by=done["run_id"])
        if doubt:
            raise Suspend("waiting", "reconcile", f"needs a person: {self.name} key {self.key} is in doubt in run "
                          f"{doubt['run_id']}; reconcile it there, then resume this run")
        row = {**row, "state": "attempted", "attempted_at": now(), "attempts": row["attempts"] + 1}
        crash_point("after-attempted")
        try:
            value = self.do(self.key)
        except EffectNotDone as e:
            attempts = row["attempts"]
            if attempts >= ctx._retry.attempts:
                self.transition(row, "not_done", f"the service refused it, nothing was done ({e}); no attempts left")
                raise StepFailed(self.position, self.name, e, attempts) from e
            delay = backoff_s(ctx._retry, attempts)
            row = self.transition(row, "not_done", f"the service refused it, nothing was done ({e}); "
                                  f"sending again with the same key in {delay:.1f}s")
            ctx._back_off(self.name, attempts, delay)
            return self.attempt(row)
        except Exception as e:
            row = self.transition(row, "unknown", f"outcome unknown: do raised {type(e).__name__}: {e}")
            return self.reconcile(row)
        crash_point("after-do")
        return self.confirm(row, value)

    def reconcile(self, row: dict) -> Any:
        """Find out what happened to an `unknown` attempt before acting again."""
        since = now() - row["attempted_at"]
        if self.lookup is not None:
            try:
                found = self.lookup(self.key)
            except Exception as e:
                self.wait_for_person(row, f"is unknown and the lookup failed ({type(e).__name__}: {e})")
            if found is not None:
                return self.confirm(row, found, "the service has the key: confirmed without doing it again")
            window = row["lookup_ttl_s"]
            if window is None or since < window:
                row = self.transition(row, "not_done", "the service has no record of the key inside its lookup "
                                      "window: not done; doing it again with the same key")
                return self.attempt(row)
            self.wait_for_person(row, f"is unknown: the service's lookup window ({_span(window)}) has passed, "
                                 "so its silence proves nothing")
        window = row["dedupe_ttl_s"]
        if window is not None and since < window:
            with self.ctx.write() as conn:
                self.event(conn, f"outcome unknown; sending again with the same key, which the service ignores "
                           f"for {_span(window)}")
            return self.attempt(row)
        self.wait_for_person(row, "may or may not have happened (no lookup, and the service does not "
                             "deduplicate this key now)")


def perform(ctx: Context, name: str, key: str, do: Callable, lookup: Callable | None,
            dedupe_ttl_s: float | None, lookup_ttl_s: float | None, service: str | None) -> Any:
    position, recorded, value = ctx._next(name, effects=1)
    if recorded:
        return value
    effect = _Effect(ctx, position, name, key, do, lookup)
    row = effect_at(ctx._store.conn, ctx.run_id, ctx.generation, position)
    if row is None:
        with ctx.write() as conn:
            row = add_intended(conn, run_id=ctx.run_id, generation=ctx.generation, position=position, name=name,
                               key=key, has_lookup=lookup is not None, dedupe_ttl_s=dedupe_ttl_s,
                               lookup_ttl_s=lookup_ttl_s, service=service, fence=ctx.fence, now=now())
        crash_point("after-intended")
    elif row["key"] != key:
        raise StepFailed(position, name, ValueError(
            f"the effect was recorded with key {row['key']!r} and the code now builds {key!r}"))
    state = row["state"]
    if state in ("intended", "not_done"):
        return effect.attempt(row)
    if state == "attempted":
        row = effect.transition(row, "unknown", f"outcome unknown: the worker stopped after attempt "
                                f"{row['attempts']} (by {row['attempted_by']}) before recording it")
        return effect.reconcile(row)
    if state == "unknown":
        return effect.reconcile(row)
    return effect.confirm(row, json.loads(row["result"]) if row["result"] else None)
