"""The effect ledger's rules (docs/architecture.md section 6.4): `intended -> attempted -> confirmed`, an
attempt whose outcome nobody saw becomes `unknown`, and `unknown` is reconciled by asking the
service, resending under a deduplicating key, or waiting for a person. Never a blind retry."""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, cast

from ..errors import EffectDeclined, EffectNotDone, ParkRun
from ..format import span
from ..states import IN_DOUBT, EffectState, EntryKind, EventKind, Reason, RunStatus
from ..store import FenceRefused
from ..store.base import Connection
from ..store.effects import (
    add_intended,
    confirmed_with_key,
    effect_at,
    in_doubt_in_ended_runs,
    in_doubt_with_key,
    mark_attempted,
    run_fence,
    set_state,
)
from ..store.journal import Usage
from ..store.rows import EffectRow
from ..store.workers import still_sending
from .clock import now
from .control import InFlight
from .faults import crash_point
from .journal import Recorder
from .outcomes import StepFailed, Suspend
from .results import encode
from .retry import backoff_s, is_unreachable

_EFFECT = Usage(effects=1)


def _span(seconds: float) -> str:
    return f"{seconds / 3600:g}h" if seconds >= 3600 else f"{seconds:g}s"


@dataclass(frozen=True)
class AttemptToken:
    """Which attempt of an effect this is, handed to a `do(key, token)` that takes a second argument.

    Within one run a later claim has a larger `(generation, fence)`. So a service that keeps the newest token
    per run can refuse an older one, sent by a worker that was paused past its lease and woke up. A fork is
    another run, and its tokens never compare with its parent's. `str(token)` is `run/gN/fN`.

    Attributes:
        run_id: The run making the attempt.
        generation: The run's generation, which grows when a person restarts it with `resume --restart`.
        fence: The claim's fence, which grows with every claim of the run.
    """

    run_id: str
    generation: int
    fence: int

    def __str__(self) -> str:
        return f"{self.run_id}/g{self.generation}/f{self.fence}"


class StaleAttempt(FenceRefused):
    """Raise it from an effect's `do` when the service has seen a newer token from the same run and did nothing.

    The worker holding the stale token has lost the run, so it stops exactly as when the store's fence refuses
    it, and the run is reported as taken. It records neither `not_done`, since the run's current holder may be
    sending, nor `unknown`, since nothing was sent. Its writes would be refused anyway.
    """


def _takes_token(do: Callable) -> bool:
    """Whether `do` takes the attempt's token as a second positional parameter, as `do(key, token)`.

    A `do(key)` is called as before."""
    try:
        parameters = inspect.signature(do).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return len([p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 2


def sender_warning(conn: Connection, effect: Mapping[str, Any]) -> str | None:
    """For a person about to answer "not done": the worker that attempted the effect may still send it."""
    if effect.get("state") not in IN_DOUBT or not effect.get("attempted_by"):
        return None
    sender, _ = still_sending(conn, effect, now())
    if sender is None:
        return None
    return (f"{sender['name']} (pid {sender['pid']} on {sender['host']}) attempted {effect['name']} and its process "
            "is still alive (paused or hung), so it may still send it. The answer is recorded; a service that "
            "records attempt tokens (the built-in outbox does) refuses that worker's stale attempt once the new "
            "one is sent, any other service may deliver twice")


class _Effect:
    """One `ctx.effect` call: the row it owns and the callables that only the agent's code has."""

    def __init__(self, journal: Recorder, position: int, *, name: str, key: str, do: Callable, lookup: Callable | None,
                 timeout_s: float | None = None):
        self.journal, self.position, self.name, self.key, self.do, self.lookup = (journal, position, name, key, do,
                                                                                  lookup)
        self.timeout_s = timeout_s
        self.takes_token = _takes_token(do)
        self.started_at = journal.clock.now()
        self.t0 = journal.clock.perf()

    def event(self, conn, message: str) -> None:
        self.journal.event(conn, EventKind.EFFECT, f"{self.name}: {message}")

    def transition(self, row: EffectRow, state: str, message: str, **fields) -> EffectRow:
        with self.journal.write() as conn:
            set_state(conn, row["id"], state, self.journal.clock.now(), **fields)
            self.event(conn, message)
        return cast(EffectRow, {**row, "state": state, **fields})   # `fields` are columns: set_state wrote them

    def confirm(self, row: EffectRow, value: Any, message: str | None = None, **fields) -> Any:
        """`confirmed`, the result, the journal entry and the checkpoint, in one fenced commit."""
        return self.finish(row, EffectState.CONFIRMED, value, message, **fields)

    def finish(self, row: EffectRow, state: str, value: Any, message: str | None = None, **fields) -> Any:
        """The effect's last state (`confirmed`, or `not_done` for a declined `do`), its result, the journal entry
        and the checkpoint, in one fenced commit."""
        encoded = encode(value, "effect", self.name)

        def also(conn):
            set_state(conn, row["id"], state, self.journal.clock.now(), result=encoded, **fields)
            if message:
                self.event(conn, message)

        return self.journal.record(self.position, self.name, kind=EntryKind.EFFECT, value=value,
                                   started_at=self.started_at, duration_s=self.journal.clock.perf() - self.t0,
                                   usage=_EFFECT, also=also,
                                   detail={"name": self.name, "key": self.key, "state": state,
                                           "attempts": row.get("attempts"), **fields})

    def wait_for_person(self, row: EffectRow, why: str) -> NoReturn:
        run = self.journal.run_id
        raise Suspend(RunStatus.WAITING, Reason.RECONCILE, f"needs a person: {self.name} {why}; decide with "
                      f"tui-agent reconcile {run} {self.name} --happened | --not-done | --abandon")

    def attempt(self, row: EffectRow) -> Any:
        """Claim the key for one attempt, then call do(key); a doubt is reconciled, never retried blindly."""
        journal = self.journal
        with journal.write() as conn:
            done = confirmed_with_key(conn, self.key, row["id"])
            doubt = None if done else in_doubt_with_key(conn, self.key, row["id"])
            if not done and not doubt:
                mark_attempted(conn, row["id"], journal.worker, journal.fence, journal.clock.now())
            ended = doubt is not None and doubt["id"] in {e["id"] for e in in_doubt_in_ended_runs(conn, self.key, "")}
        if done:
            return self.confirm(row, json.loads(done["result"]),
                                f"key {self.key} was already confirmed by run {done['run_id']}; not done again",
                                done_by=done["run_id"])
        if doubt and ended:   # nobody can decide it there any more: a decision here decides the key
            self.wait_for_person(row, f"key {self.key} is in doubt in run {doubt['run_id']}, which has ended "
                                      "without deciding it")
        if doubt:
            raise Suspend(RunStatus.WAITING, Reason.RECONCILE, f"needs a person: {self.name} key {self.key} is in "
                          f"doubt in run {doubt['run_id']}; reconcile it there, then resume this run")
        row = {**row, "state": EffectState.ATTEMPTED, "attempted_at": journal.clock.now(),
               "attempts": row["attempts"] + 1, "attempted_by": journal.worker, "fence": journal.fence}
        crash_point("after-attempted", self.name)
        self.still_ours()
        try:
            value = self.call(row)
        except FenceRefused:  # StaleAttempt: the service saw a newer attempt of this run; this worker lost it
            raise
        except ParkRun as e:   # the service did nothing, and will not until a person fixes what `do` names
            self.transition(row, EffectState.NOT_DONE, f"not done: {e}")
            raise
        except EffectDeclined as e:   # nothing done this time, and what came of it instead is the call's result
            return self.finish(row, EffectState.NOT_DONE, e.outcome, f"not done: {e}")
        except EffectNotDone as e:
            if self.spent(row):
                self.transition(row, EffectState.NOT_DONE, f"the service refused it, nothing was done ({e}); "
                                "no attempts left")
                raise StepFailed(self.position, self.name, e, row["attempts"]) from e
            delay = self.delay(row, e)
            row = self.transition(row, EffectState.NOT_DONE, f"the service refused it, nothing was done ({e}); "
                                  f"sending again with the same key in {delay:.1f}s")
            return self.again(row, delay)
        except Exception as e:
            row = self.transition(row, EffectState.UNKNOWN, f"outcome unknown: do raised {type(e).__name__}: {e}")
            return self.reconcile(row, raised=e)
        crash_point("after-do", self.name)
        return self.confirm(row, value)

    def spent(self, row: EffectRow) -> bool:
        """True when the retry policy allows no more attempts of this effect. Attempts are counted in its row, so a
        crash or a durable back-off between them does not reset the count."""
        return row["attempts"] >= self.journal.retry.attempts

    def delay(self, row: EffectRow, raised: Exception | None) -> float:
        """The back-off before acting again: none after a worker stopped (the service did not fail), the retry
        policy's after `do` raised."""
        return backoff_s(self.journal.retry, row["attempts"]) if raised is not None else 0.0

    def again(self, row: EffectRow, delay: float) -> Any:
        if delay:
            self.journal.back_off(self.name, row["attempts"], delay)
        return self.attempt(row)

    def since_attempted(self, row: EffectRow) -> float:
        """How long ago the effect's latest attempt was made: an effect in doubt has one (`mark_attempted`)."""
        attempted_at = row["attempted_at"]
        assert attempted_at is not None   # only an attempted row becomes unknown
        return self.journal.clock.now() - attempted_at

    def still_ours(self) -> None:
        """Re-read the fence just before the call. A worker paused between marking `attempted` and calling (past its
        lease) must not send for a run another worker or a person has taken since."""
        journal = self.journal
        fence = run_fence(journal.store.conn, journal.run_id)
        if fence != journal.fence:
            raise FenceRefused(f"run {journal.run_id}: fence {journal.fence} is stale (the run's is {fence}); another "
                               f"lease or a person took the run, so {self.name} was not sent")

    def call(self, row: EffectRow) -> Any:
        """Call `do(key)`, watched by the deadline watcher. Past `timeout_s` the attempt is `unknown` and the run handed
        on (runtime/deadlines.py), never retried."""
        journal, control = self.journal, self.journal.control
        if control is not None:
            allowed = float("inf") if self.timeout_s is None else self.timeout_s
            control.in_flight = InFlight(journal.clock.now() + allowed, journal.budget, journal.last_at,
                                         journal.after_failure, self.position, self.name, row["attempts"],
                                         self.timeout_s, row["id"])
        try:
            if self.takes_token:
                return self.do(self.key, AttemptToken(journal.run_id, journal.generation, journal.fence))
            return self.do(self.key)
        finally:
            if control is not None:
                control.in_flight = None

    def hold_for_sender(self, row: EffectRow) -> None:
        """Make the run wait while a worker may still be sending this effect. The lookup's silence means "not done" only
        once nobody can still be sending: a worker paused (SIGSTOP, a closed lid) or hung inside `do` past its lease may
        send after the lookup answered. While its process lives and it has not let go of the run, the run waits;
        `requeue_released` queues it again after that. A late send to a service that still deduplicates the key is
        harmless, so that does not wait."""
        journal = self.journal
        window = row["dedupe_ttl_s"]
        if row["fence"] == journal.fence or (window is not None and self.since_attempted(row) < window):
            return
        sender, _ = still_sending(journal.store.conn, row, journal.clock.now())
        if sender is None:
            return
        who = f"{sender['name']} (pid {sender['pid']} on {sender['host']})"
        self.transition(row, EffectState.UNKNOWN, f"the service has no record of the key, but {who} attempted it and "
                        "its process is alive, so its send may still go out; waiting until it lets go of the run or "
                        "its process ends", waits_for=sender["name"])
        raise Suspend(RunStatus.WAITING, Reason.RECONCILE, f"{self.name}: {who} attempted it and its process is "
                      "alive (paused or hung), so it may still send it; the run goes on by itself once that worker "
                      "lets go of the run or its process ends, or decide now with tui-agent reconcile "
                      f"{journal.run_id} {self.name} --happened | --not-done | --abandon")

    def look_up(self, row: EffectRow, lookup: Callable) -> Any:
        """What the effect's `lookup` says about the key. A lookup that cannot reach its service (a dropped network)
        is asked again with the retry policy's back-off while the attempt is younger than the policy's patience (the
        service, not the send, is what is away); any other failure, or one past the patience, waits for a person."""
        policy = self.journal.retry
        while True:
            try:
                return lookup(self.key)
            except Exception as e:
                failed = f"the lookup failed ({type(e).__name__}: {e})"
                since = self.since_attempted(row)
                if not is_unreachable(e) or policy.patience_s is None:
                    self.wait_for_person(row, f"is unknown and {failed}")
                if since >= policy.patience_s:
                    self.wait_for_person(row, f"is unknown and {failed}; it has not reached its service for "
                                         f"{span(since)}, past the retry policy's patience")
                # the back-off grows with how long the lookup has been failing, as if counted attempt by attempt
                tries = 1 + int(math.log2(1 + since / policy.base_s))
                delay = min(backoff_s(policy, tries), policy.patience_s - since)
                with self.journal.write() as conn:
                    self.event(conn, f"outcome unknown and {failed}; asking the service again in {delay:.1f}s")
                self.journal.back_off(self.name, row["attempts"], delay, f"lookup: {type(e).__name__}: {e}")

    def reconcile(self, row: EffectRow, raised: Exception | None = None) -> Any:
        """Find out what happened to an `unknown` attempt before acting again. `raised`: the attempt's `do` raised
        it (rather than a worker stopping): acting again then follows the retry policy, as after a refusal."""
        if self.lookup is not None:
            found = self.look_up(row, self.lookup)
            since = self.since_attempted(row)
            if found is not None:
                return self.confirm(row, found, "the service has the key: confirmed without doing it again")
            window = row["lookup_ttl_s"]
            if window is None or since < window:
                self.hold_for_sender(row)
                nothing = "the service has no record of the key inside its lookup window: not done; "
                if raised is not None and self.spent(row):
                    self.transition(row, EffectState.NOT_DONE, nothing + "no attempts left")
                    raise StepFailed(self.position, self.name, raised, row["attempts"]) from raised
                delay = self.delay(row, raised)
                row = self.transition(row, EffectState.NOT_DONE, nothing + "doing it again with the same key"
                                      + (f" in {delay:.1f}s" if raised is not None else ""))
                return self.again(row, delay)
            self.wait_for_person(row, f"is unknown: the service's lookup window ({_span(window)}) has passed, "
                                 "so its silence proves nothing")
        since = self.since_attempted(row)
        window = row["dedupe_ttl_s"]
        if window is not None and since < window:
            if raised is not None and self.spent(row):
                self.wait_for_person(row, f"is unknown: do raised {type(raised).__name__} on each of its "
                                     f"{row['attempts']} attempts, the last the retry policy allows")
            delay = self.delay(row, raised)
            with self.journal.write() as conn:
                self.event(conn, f"outcome unknown; sending again with the same key, which the service ignores "
                           f"for {_span(window)}" + (f", in {delay:.1f}s" if raised is not None else ""))
            return self.again(row, delay)
        self.wait_for_person(row, "may or may not have happened (no lookup, and the service does not "
                             "deduplicate this key now)")


def perform(journal: Recorder, name: str, *, key: str, do: Callable, lookup: Callable | None,
            dedupe_ttl_s: float | None, lookup_ttl_s: float | None, service: str | None,
            timeout_s: float | None = None) -> Any:
    position, recorded, value = journal.next(name, effects=1)
    if recorded:
        return value
    effect = _Effect(journal, position, name=name, key=key, do=do, lookup=lookup, timeout_s=timeout_s)
    row = effect_at(journal.store.conn, journal.run_id, journal.generation, position)
    if row is None:
        with journal.write() as conn:
            row = add_intended(conn, run_id=journal.run_id, generation=journal.generation, position=position,
                               name=name, key=key, has_lookup=lookup is not None, dedupe_ttl_s=dedupe_ttl_s,
                               lookup_ttl_s=lookup_ttl_s, service=service, fence=journal.fence,
                               now=journal.clock.now())
        crash_point("after-intended", name)
    elif row["key"] != key:
        raise StepFailed(position, name, ValueError(
            f"the effect was recorded with key {row['key']!r} and the code now builds {key!r}"))
    state = row["state"]
    if state in (EffectState.INTENDED, EffectState.NOT_DONE):
        return effect.attempt(row)
    if state == EffectState.ATTEMPTED:
        row = effect.transition(row, EffectState.UNKNOWN, f"outcome unknown: the worker stopped after attempt "
                                f"{row['attempts']} (by {row['attempted_by']}) before recording it")
        return effect.reconcile(row)
    if state == EffectState.UNKNOWN:
        return effect.reconcile(row)
    return effect.confirm(row, json.loads(row["result"]) if row["result"] else None)
