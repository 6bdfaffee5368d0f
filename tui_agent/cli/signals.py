"""How the long-running commands meet SIGTERM, SIGHUP (a closed terminal) and SIGINT: they stop cleanly.

A worker lets its runs finish their step and hands them back; `run` hands its run back at once, as on ctrl+c."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HANG_UPS = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]   # a closed terminal


def stop_on_signals() -> threading.Event:
    """An event that SIGTERM, SIGHUP and SIGINT set (instead of ending the process), for a command to stop
    cleanly."""
    stop = threading.Event()
    for signum in (*HANG_UPS, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


@contextlib.contextmanager
def interrupted_by_hang_ups() -> Iterator[None]:
    """Inside the block SIGTERM and SIGHUP interrupt the main thread as ctrl+c does (KeyboardInterrupt), so a
    command that hands its run back on ctrl+c does so on those too."""
    before = {signum: signal.signal(signum, signal.default_int_handler) for signum in HANG_UPS}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
