"""The live count of a streaming model call, so a long reply shows life in the TUI and `tui-agent run`.

A thread of its own writes it at most once a second on its own connection, off the step path: the
stream never waits for the database, and a busy database only skips an update. A call that ends within
a second never starts the thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..store import Store, open_store
from ..store.model_calls import CallKey, streamed
from .clock import CLOCK, Clock

INTERVAL_S = 1.0
BUSY_MS = 100  # the live row is cosmetic: never wait long for the lock

LiveObserver = Callable[[int, float], None]  # (tokens so far, seconds since the request was sent)


class LiveCall:
    """The provider's `on_tokens`; `close()` when the call ends, however it ends."""

    def __init__(self, store: Store, key: CallKey, observer: LiveObserver | None = None, clock: Clock = CLOCK) -> None:
        self._path, self._durability, self._key, self._clock = store.path, store.durability, key, clock
        self._observer = observer
        self._t0 = time.monotonic()
        self._tokens = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, tokens: int) -> None:
        self._tokens = tokens
        elapsed = time.monotonic() - self._t0
        if self._observer is not None:
            self._observer(tokens, elapsed)
        if self._thread is None and elapsed >= INTERVAL_S:
            self._thread = threading.Thread(target=self._run, name=f"live-{self._key.run_id}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            store = open_store(self._path, self._durability)
        except Exception:
            return
        written = None
        try:
            store.wait_at_most(BUSY_MS)
            while True:
                tokens = self._tokens
                if tokens != written:
                    try:
                        with store.write() as conn:
                            streamed(conn, self._key, tokens, self._clock.now())
                        written = tokens
                    except Exception:
                        pass  # busy, full or gone: the next second tries again, the call goes on regardless
                if self._stop.wait(INTERVAL_S):
                    return
        finally:
            store.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
