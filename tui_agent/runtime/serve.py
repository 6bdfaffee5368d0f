"""The worker process: claims due runs, works up to N at once (a thread and a connection each),
keeps their leases alive with one heartbeat thread, and on a stop signal finishes each run's
current step, hands the runs back and exits. A database that is busy, or whose server is away (a
restart), is waited out, said once on stderr."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING

from ..store import Claim, EnvironmentStop, open_store
from ..store.effects import requeue_released
from ..store.runs import any_due, claim_next
from ..store.wal import IdleCheckpoint
from ..store.workers import release
from .clock import now
from .heartbeat import Heartbeat, Waiting
from .registry import Registry
from .schedule import tick
from .strangers import Strangers
from .worker import DEFAULT_LEASE_S, DROPPED, WAITED_OUT, Outcome, execute

if TYPE_CHECKING:
    from ..notify import Attendant

GRACE_S = 30.0


class _ThreadStore:
    """A pool thread's own store, closed by that thread as it ends and its locals go: a sqlite3 connection can be
    closed only in the thread that made it, and one left to the garbage collector (a connection is in a reference
    cycle with its statement cache) closes only after the process recorded the state it left the file in (the last
    close moves the WAL into the file; store/integrity.py)."""

    __slots__ = ("store",)

    def __init__(self, store) -> None:
        self.store = store

    def __del__(self) -> None:
        self.store.close()


def serve(db_path: Path, durability: str, registry: Registry, name: str, *, concurrency: int = 1,
          lease_s: float = DEFAULT_LEASE_S, once: bool = False, grace_s: float = GRACE_S,
          stop: threading.Event | None = None, on_claim: Callable[[Claim], None] | None = None,
          on_outcome: Callable[[Outcome], None] | None = None,
          attendant: Attendant | None = None, on_stranger: Callable[[str], None] | None = None
          ) -> tuple[list[Outcome], int]:
    """Work due runs until `stop` is set (or, with `once`, until none is due and all are done).
    Returns the outcomes and how many runs were still inside a step when the grace period ended
    (their threads cannot be stopped, so the caller should exit the process). `attendant` (reminders, and
    --notify's deliveries) works on a thread of its own; with `once`, one pass as the worker exits.

    A database busy past its timeout, or whose server is away, is waited out for as long as it lasts, said once
    (`Waiting`); each run's writes wait for it while its lease allows (execute), and a run dropped meanwhile is
    handed back once the database answers. With `once`, it ends the worker instead (the command's one line,
    exit 4) when no run is in hand. `on_stranger` hears, once per agent, a line on due runs of an agent this
    worker does not know (runtime/strangers.py), looked for whenever a poll claims nothing."""
    stop = stop or threading.Event()
    poll_s = min(0.5, lease_s / 3)
    store = open_store(db_path, durability)
    store.check_intact()  # a damaged file is found before any write of ours
    idle_checkpoint = IdleCheckpoint(store)
    waiting = Waiting(name)
    heartbeat = Heartbeat(db_path, durability, name, lease_s, concurrency, waiting, registry.names())
    strangers = Strangers(name, registry.names(), on_stranger) if on_stranger is not None else None
    attending = None
    if attendant is not None and not once:
        attending = threading.Thread(target=attendant.run, args=(db_path, durability, stop),
                                     kwargs={"waiting": waiting}, name=f"{name}-notify", daemon=True)
        attending.start()
    local = threading.local()
    outcomes: list[Outcome] = []
    active: dict[Future, Claim] = {}
    dropped: list[Claim] = []   # runs given up while the database held them up: handed back when it answers

    def work(claim: Claim, control) -> Outcome:
        if not hasattr(local, "own"):
            local.own = _ThreadStore(open_store(db_path, durability))
        try:
            return execute(local.own.store, registry, claim, control=control)
        finally:
            heartbeat.drop(claim)

    def collect(done) -> None:
        for future in done:
            claim = active.pop(future)
            outcomes.append(future.result())
            if outcomes[-1].status == DROPPED:
                dropped.append(claim)
            if on_outcome is not None:
                on_outcome(outcomes[-1])

    def hand_back() -> None:
        """Each dropped run, queued again now rather than when its lease runs out, and let go of (its thread
        has returned, so a run held back for its send goes on); nothing when another claim or its own last
        commit, unanswered, moved it on."""
        while dropped:
            claim = dropped[0]
            release(store, claim.run_id, claim.fence, name, "dropped while the database held it up", now(),
                    ended=True)
            dropped.pop(0)

    def claim_due() -> bool:
        """Claim while there is room; a worker whose heartbeat died claims nothing (no one would renew)."""
        claimed = False
        while len(active) < concurrency and heartbeat.healthy and any_due(store, registry.names(), now()):
            claim = claim_next(store, name, lease_s, registry.names(), now)
            if claim is None:
                break
            claimed = True
            if on_claim is not None:
                on_claim(claim)
            active[pool.submit(work, claim, heartbeat.hold(claim))] = claim
        return claimed

    pool = ThreadPoolExecutor(concurrency, thread_name_prefix=name)
    late: set[Future] = set()
    try:
        while not stop.is_set():
            collect([f for f in active if f.done()])
            try:
                hand_back()
                tick(store, registry)  # one running worker is enough for schedules too
                requeue_released(store, now())  # runs held back for a paused sender that has let go
                claimed = claim_due()
                if not claimed and strangers is not None:
                    strangers.look(store, now(), force=once and not active)
                if not claimed and not active and once:
                    store.checkpoint()  # exiting is an idle moment: shrink the WAL
                elif not claimed and not active:
                    idle_checkpoint()
            except EnvironmentStop as e:  # another program holds the lock, or the server is away: it will pass
                if e.kind not in WAITED_OUT or (once and not active):
                    raise
                waiting.say(e)
                claimed = False
            else:
                waiting.over()
            if once and not claimed and not active:
                break
            if not claimed:
                if active:
                    wait(active, timeout=poll_s, return_when=FIRST_COMPLETED)
                else:
                    stop.wait(poll_s)
        for control in heartbeat.controls():
            control.release(f"released by {name} (shutting down); claimable now")
        done, late = wait(active, timeout=grace_s)
        collect(done)
        try:
            hand_back()
        except EnvironmentStop as e:
            if e.kind not in WAITED_OUT:
                raise
            # still held up: their leases run out instead
        for future in late:  # still inside a step after the grace period: hand it back with a new fence
            claim = active[future]
            release(store, claim.run_id, claim.fence, name, "its step outlived the grace period", now())
        if attendant is not None and once:
            attendant.last_pass(store, stop)   # what these runs came to need goes out before the exit
    finally:
        if attending is not None:
            attending.join(timeout=attendant.timeout_s + 1)
        heartbeat.close()
        store.close()
        pool.shutdown(wait=not active, cancel_futures=True)   # idle threads end, closing their stores; a run still
        # at work cannot be waited for
    return outcomes, len(late)
