"""The worker process: claims due runs, works up to N at once, and on a stop signal hands them back and exits.

Each run has a thread and a connection; one heartbeat thread keeps the leases alive; on a stop each run's
current step finishes first. A busy database, or a server away, is waited out, said once on stderr. A run
handed on while its thread was inside a call frees its slot at once; past `LEFT_BEHIND_LIMIT` threads left
behind the worker claims no more and exits once its other runs are done. Why: docs/architecture.md, section 7."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..states import RunStatus, TurnEnd
from ..store import Claim, EnvironmentStop, Store, open_store
from ..store.effects import requeue_released
from ..store.runs import any_due, claim_next
from ..store.wal import IdleCheckpoint
from ..store.workers import release
from .clock import now
from .control import RunControl
from .heartbeat import Heartbeat, Waiting
from .pool import Pool, Turn
from .registry import Registry
from .schedule import tick
from .strangers import Strangers
from .worker import DEFAULT_LEASE_S, WAITED_OUT, Outcome, execute, refused

if TYPE_CHECKING:
    from ..services.notify import Attendant

GRACE_S = 30.0
LEFT_BEHIND_LIMIT = 3   # threads left inside calls that outlived their runs, past which a worker stops claiming


class Served(NamedTuple):
    """What `serve` did.

    It holds each run's outcome, how many of its threads are still inside a call (their runs handed back; the
    caller should end the process with os._exit, since they cannot be stopped), why it stopped claiming by
    itself (too many threads left behind), or None, and why the caller should start this worker afresh in its
    own process (os.execv), or None: a run is due again that only this process's thread left behind keeps from
    it, and no other run is in hand."""

    outcomes: list[Outcome]
    left_behind: int
    spent: str | None
    restart: str | None = None


def _say(worker: str, line: str) -> None:
    print(f"tui-agent: {worker}: {line}", file=sys.stderr, flush=True)


def serve(db_path: Path, durability: str, *, registry: Registry, name: str, concurrency: int = 1,
          lease_s: float = DEFAULT_LEASE_S, once: bool = False, grace_s: float = GRACE_S,
          stop: threading.Event | None = None, on_claim: Callable[[Claim], None] | None = None,
          on_outcome: Callable[[Outcome], object] | None = None,
          attendant: Attendant | None = None, on_stranger: Callable[[str], None] | None = None,
          log: str | None = None) -> Served:
    """Work due runs until `stop` is set. With `once`, it stops when none is due and all are done; threads left behind
    in calls that outlived their runs are not waited for. `attendant` (reminders, and --notify's deliveries) works on a
    thread of its own; with `once`, one pass as the worker exits.

    A database busy past its timeout, or whose server is away, is waited out for as long as it lasts, said once
    (`Waiting`); each run's writes wait for it while its lease allows (execute), and a run dropped meanwhile is
    handed back once the database answers. With `once`, it ends the worker instead (the command's one line,
    exit 4) when no run is in hand. `on_stranger` hears, once per agent, a line on due runs of an agent this
    worker does not know (runtime/strangers.py), looked for whenever a poll claims nothing. `log`: the absolute path
    of the file this process writes its log to, kept with the worker's row for `tui-agent workers` and `logs`."""
    stop = stop or threading.Event()
    poll_s = min(0.5, lease_s / 3)
    store = open_store(db_path, durability)
    store.check_intact()  # a damaged file is found before any write of ours
    idle_checkpoint = IdleCheckpoint(store)
    waiting = Waiting(name)
    heartbeat = Heartbeat(db_path, durability, worker=name, lease_s=lease_s, concurrency=concurrency, waiting=waiting,
                          agents=registry.names(), log=log)
    strangers = Strangers(name, registry.names(), on_stranger) if on_stranger is not None else None
    attending = None
    if attendant is not None and not once:
        attending = threading.Thread(target=attendant.run, args=(db_path, durability, stop),
                                     kwargs={"waiting": waiting}, name=f"{name}-notify", daemon=True)
        attending.start()
    outcomes: list[Outcome] = []
    changed = threading.Event()   # a turn returned, or was given up on: the loop looks at once
    active: list[Turn] = []       # the runs in hand
    left: list[Turn] = []         # given up on, their threads still inside a call
    dropped: list[Claim] = []     # runs given up while the database held them up: handed back when it answers
    spent: str | None = None
    restart: str | None = None
    busy = False                  # the last claim took a run, so more are likely due: claim without asking first
    chores_at = -math.inf         # when the schedules and the runs held back were last looked at

    def work(own: Store, claim: Claim, control: RunControl) -> Outcome:
        try:
            return execute(own, registry, claim=claim, control=control)
        finally:
            heartbeat.drop(claim)

    def collect() -> None:
        """Each returned turn's outcome, and each turn given up on: its slot is free, its thread left behind
        (its late return discarded)."""
        nonlocal spent
        for turn in list(active):
            why = turn.control.given_up
            if why is None and not turn.done.is_set():
                continue
            active.remove(turn)
            if why is not None:
                pool.leave(turn)
                if turn.done.is_set():
                    _say(name, f"{why}; the call has returned since, its return discarded")
                else:
                    left.append(turn)
                    _say(name, f"{why}; its thread is left behind, still running, its late return discarded "
                               f"({len(left)} left behind now, at {LEFT_BEHIND_LIMIT} this worker stops claiming)")
                outcomes.append(_given_up(store, turn, why))
            else:
                outcomes.append(turn.result())
                if outcomes[-1].kind == TurnEnd.DROPPED:
                    dropped.append(turn.claim)
            if on_outcome is not None:
                on_outcome(outcomes[-1])
        left[:] = [turn for turn in left if not turn.done.is_set()]
        if spent is None and len(left) >= LEFT_BEHIND_LIMIT:
            spent = (f"{len(left)} threads are left behind inside calls that outlived their runs "
                     f"({_listed(left)}); this worker claims nothing more and exits once its other runs are done: "
                     "start a fresh worker (a supervisor or a timer does)")
            _say(name, spent)

    def hand_back() -> None:
        """Queue each dropped run again now, rather than when its lease runs out, and let go of it. Its thread has
        returned, so a run held back for its send goes on. Nothing is done when another claim, or its own last commit
        left unanswered, moved it on."""
        while dropped:
            claim = dropped[0]
            release(store, claim.run_id, fence=claim.fence, worker=name, why="dropped while the database held it up",
                    now=now(), ended=True)
            dropped.pop(0)

    def claim_due() -> bool:
        """Claim while there is room; a worker whose heartbeat died claims nothing (no one would renew), nor one
        with too many threads left behind. A run this process still has a thread inside is left to others."""
        nonlocal busy
        claimed = False
        avoid = [turn.claim.run_id for turn in left]
        while (spent is None and len(active) < concurrency and heartbeat.healthy
               and (busy or any_due(store, registry.names(), now(), avoid))):
            claim = claim_next(store, name, lease_s=lease_s, agents=registry.names(), now=now, avoid=avoid)
            busy = claim is not None
            if claim is None:
                break
            claimed = True
            if on_claim is not None:
                on_claim(claim)
            control = heartbeat.hold(claim)
            control.on_given_up = lambda _: changed.set()
            active.append(pool.start(claim, control))
        return claimed

    pool = Pool(name, lambda: open_store(db_path, durability), work, changed)
    late: list[Turn] = []
    try:
        while not stop.is_set():
            changed.clear()
            collect()
            if spent is not None and not active:
                break
            try:
                hand_back()
                if not busy or time.monotonic() - chores_at >= poll_s:   # once a poll, however fast runs go
                    tick(store, registry)  # one running worker is enough for schedules too
                    requeue_released(store, now())  # runs held back for a paused sender that has let go
                    chores_at = time.monotonic()
                claimed = claim_due()
                if not claimed and not active and left and not once and spent is None:
                    restart = _due_only_behind(store, registry, left)
                    if restart is not None:
                        _say(name, restart)
                        break
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
                    changed.wait(poll_s)
                else:
                    stop.wait(poll_s)
        if attending is not None:
            stop.set()   # however the loop ended (a stop, too many threads left behind, a restart): it ends too
        for control in heartbeat.controls():
            control.release(f"released by {name} (shutting down); claimable now")
        if active and stop.is_set():
            held = "its run finishes" if len(active) == 1 else f"its {len(active)} runs finish"
            _say(name, f"stopping once {held} the current step (up to {grace_s:g}s); what is left goes back to "
                       "the queue")
        end = time.monotonic() + grace_s
        while active and time.monotonic() < end:
            changed.clear()
            collect()
            if active:
                changed.wait(min(poll_s, max(0.0, end - time.monotonic())))
        collect()
        try:
            hand_back()
        except EnvironmentStop as e:
            if e.kind not in WAITED_OUT:
                raise
            # still held up: their leases run out instead
        late = list(active)
        for turn in late:  # still inside a step after the grace period: hand it back with a new fence
            turn.control.kill_commands()
            release(store, turn.claim.run_id, fence=turn.claim.fence, worker=name,
                    why="its step outlived the grace period", now=now())
        left[:] = [turn for turn in left if not turn.done.is_set()]
        if left and spent is None and restart is None:
            _say(name, f"exits with {len(left)} thread(s) left behind inside calls that outlived their runs "
                       f"({_listed(left)}); nothing they do now is recorded")
        if attendant is not None and once:
            attendant.last_pass(store, stop)   # what these runs came to need goes out before the exit
    finally:
        if attending is not None:
            assert attendant is not None   # the thread is started only for one
            attending.join(timeout=attendant.timeout_s + 1)
        heartbeat.close()
        store.close()
        pool.close()   # idle threads end, closing their stores; a run still at work cannot be waited for
    return Served(outcomes, len(late) + len(left), spent, restart)


def _due_only_behind(store: Store, registry: Registry, left: list[Turn]) -> str | None:
    """Why this idle worker should start afresh, or None: a run is due that it leaves to others only because one of
    its threads is still inside it (a call that outlived its deadline), which a fresh process image ends."""
    behind = [turn.claim.run_id for turn in left]
    names = registry.names()
    if not any_due(store, names, now()) or any_due(store, names, now(), behind):
        return None
    return (f"a run is due again ({', '.join(behind)}) while this process still has a thread inside it, left behind "
            "by its deadline: this worker starts afresh (the same process id and arguments) to end that thread")


def _given_up(store: Store, turn: Turn, why: str) -> Outcome:
    """The outcome of a run handed on while its thread was inside a call (`why`). It is the run as the deadline watcher
    left it or, if a person or another worker took it, as it is now."""
    run_id, control = turn.claim.run_id, turn.control
    if control.given_up_as is None:
        return refused(store, run_id, why)
    status, reason = control.given_up_as
    return Outcome(run_id, TurnEnd.SETTLED, RunStatus(status), reason,
                   error=why if status == RunStatus.FAILED else None, message=why)


def _listed(turns: list[Turn]) -> str:
    return ", ".join(f"{t.claim.run_id} {flight.what if (flight := t.control.inside()) else 'a call'}"
                     for t in turns)
