"""The worker's threads: each works one claimed run at a time (a `Turn`) on a store of its own.

A thread is kept for the next claim; one the worker gave up on (runtime/deadlines.py) is left behind and
replaced, so at most `concurrency` threads work on turns the worker still waits for. The threads are daemon
threads, and each closes its own store as it ends (see `Pool`).
Why: docs/architecture.md, section 7 (Workers)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from ..store import Claim, Store
from .control import RunControl
from .worker import Outcome


class Turn:
    """One claimed run on one of the pool's threads; `outcome` (or `error`, what `work` raised) once it returns."""

    def __init__(self, claim: Claim, control: RunControl) -> None:
        self.claim, self.control = claim, control
        self.outcome: Outcome | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.left = False   # given up on: its return is discarded

    def result(self) -> Outcome:
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome


class _Hand:
    """One of the pool's threads and the inbox it takes its next turn from (None: end).

    The thread is a daemon thread: one left behind in a call that never returns must not keep the process
    from exiting."""

    def __init__(self, serve: Callable[[_Hand], None], name: str) -> None:
        self.inbox: queue.SimpleQueue[Turn | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=serve, args=(self,), name=name, daemon=True)
        self.thread.start()


class Pool:
    """The threads that work the worker's claims, reusing idle ones. `start(claim, control)` works `work(store, claim,
    control)` on an idle thread, or a new one; `changed` is set whenever a turn returns, so the worker's loop wakes at
    once."""

    def __init__(self, name: str, open_store: Callable[[], Store],
                 work: Callable[[Store, Claim, RunControl], Outcome], changed: threading.Event) -> None:
        self._name, self._open_store, self._work, self.changed = name, open_store, work, changed
        self._idle: list[_Hand] = []
        self._lock = threading.Lock()
        self._made = 0

    def start(self, claim: Claim, control: RunControl) -> Turn:
        turn = Turn(claim, control)
        with self._lock:
            if self._idle:
                hand = self._idle.pop()
            else:
                self._made += 1
                hand = _Hand(self._serve, f"{self._name}_{self._made}")
        hand.inbox.put(turn)
        return turn

    def leave(self, turn: Turn) -> None:
        """Stop waiting for `turn`: its thread ends when its call returns, and is not used again."""
        with self._lock:
            turn.left = True

    def _serve(self, hand: _Hand) -> None:
        store: Store | None = None
        try:
            while (turn := hand.inbox.get()) is not None:
                try:
                    store = store or self._open_store()
                    turn.outcome = self._work(store, turn.claim, turn.control)
                except BaseException as e:   # the worker's loop raises it again (Turn.result), as its own
                    turn.error = e
                with self._lock:
                    left = turn.left
                    if not left:
                        self._idle.append(hand)
                turn.done.set()
                self.changed.set()
                if left:
                    return
        finally:
            # Closed by this thread as it ends (an idle one when the pool closes, one left behind when its call
            # returns): a sqlite3 connection can only be closed in the thread that made it, and the process's
            # last close moves the WAL into the file before store/integrity.py records the state it left.
            if store is not None:
                store.close()

    def close(self) -> None:
        """End the idle threads, each closing its store, and wait for them; a thread still at work is left to end
        whenever its turn does."""
        with self._lock:
            idle, self._idle = self._idle, []
        for hand in idle:
            hand.inbox.put(None)
        for hand in idle:
            hand.thread.join()
