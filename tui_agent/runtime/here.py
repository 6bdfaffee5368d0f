"""Working one run in this process, as `tui-agent run` does: claim it, hold it with a heartbeat, execute, let go."""

from __future__ import annotations

from collections.abc import Callable

from ..store import Store
from ..store.runs import claim_run
from ..store.workers import release
from .clock import now
from .context import StepObserver
from .control import RunControl
from .heartbeat import Heartbeat
from .registry import Registry
from .worker import DEFAULT_LEASE_S, Outcome, execute, worker_name

INTERRUPTED = "interrupted with ctrl+c"   # the release's reason, kept in the run's events


class HandedBack(KeyboardInterrupt):
    """ctrl+c while the run was worked here: it was handed back, queued again where it stopped."""


def work_here(store: Store, registry: Registry, *, run_id: str, durability: str = "full",
              lease_s: float = DEFAULT_LEASE_S, on_step: StepObserver | None = None,
              on_given_up: Callable[[RunControl], None] | None = None) -> Outcome | None:
    """Work `run_id` until it ends, waits or is taken away; None when it could not be claimed.

    A run that another worker holds, or that has ended, is not claimed. The heartbeat renews this process's lease
    and claims no other run. `on_given_up` is called when the run is handed on while its code is inside a call
    that does not return (runtime/control.py); that thread cannot be stopped. A KeyboardInterrupt (ctrl+c) while
    the run is held hands it back at once and is raised again as HandedBack."""
    claim = claim_run(store, run_id, worker_name(), lease_s, now)
    if claim is None:
        return None
    heartbeat = Heartbeat(store.path, durability, worker=claim.worker, lease_s=lease_s, agents=[])
    control = heartbeat.hold(claim)
    control.on_given_up = on_given_up
    try:
        return execute(store, registry, claim=claim, on_step=on_step, control=control)
    except KeyboardInterrupt:
        release(store, claim.run_id, fence=claim.fence, worker=claim.worker, why=INTERRUPTED, now=now())
        raise HandedBack(run_id) from None
    finally:
        heartbeat.close()
