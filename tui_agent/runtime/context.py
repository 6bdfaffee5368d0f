"""`Context`: what an agent's code calls. Each call is matched to the journal by position
and name; a recorded call returns its recorded result instead of running again."""

from __future__ import annotations

import json
from collections.abc import Callable
from time import perf_counter
from typing import Any

from ..store import Claim, Store
from ..store.journal import Checkpoint, commit_step
from .clock import now
from .faults import crash_point
from .results import decode, encode, place

_UNSET = object()
_PLAIN = (str, int, float, bool, type(None))

StepObserver = Callable[["Context", int, str, bool], None]


class CodeChanged(Exception):
    """The agent called something else at a recorded position: its code changed under the run."""

    def __init__(self, position: int, recorded: str, new: str) -> None:
        super().__init__(f"position {position} was recorded as {recorded!r} but the code now calls {new!r}")
        self.position, self.recorded, self.new = position, recorded, new


class StepFailed(Exception):
    def __init__(self, position: int, name: str, error: BaseException) -> None:
        super().__init__(f"step {position} {name!r} raised {type(error).__name__}: {error}")
        self.position, self.name, self.error = position, name, error


class Context:
    def __init__(self, store: Store, claim: Claim, request: Any, artifact_dir: str, checkpoint: Checkpoint,
                 entries: list[tuple], on_step: StepObserver | None = None) -> None:
        self.run_id = claim.run_id
        self.attempt = claim.attempt
        self.fence = claim.fence
        self.generation = claim.generation
        self.worker = claim.worker
        self.request = request
        self._store = store
        self._claim = claim
        self._artifact_dir = artifact_dir
        self._checkpoint = checkpoint
        self._entries = entries
        self._position = 0
        self._on_step = on_step

    @property
    def position(self) -> int:
        """The position the next journaled call will take."""
        return self._position

    @property
    def replaying(self) -> bool:
        return self._position < len(self._entries)

    @property
    def total_steps(self) -> int | None:
        return self._checkpoint.total_steps

    def plan(self, total_steps: int | None = None, revision: int | None = None, next_input: Any = _UNSET) -> None:
        """Declare the run's expected length, plan revision or next input; saved with the next step."""
        if total_steps is not None:
            self._checkpoint.total_steps = total_steps
        if revision is not None:
            self._checkpoint.plan_revision = revision
        if next_input is not _UNSET:
            self._checkpoint.next_input = encode(next_input, "next_input")

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `fn` once and journal its JSON result; on replay return the recorded result."""
        position = self._position
        self._position = position + 1
        if position < len(self._entries):
            _, recorded, result, artifact = self._entries[position]
            if recorded != name:
                raise CodeChanged(position, recorded, name)
            value = decode(self._store.data_dir, result, artifact)
            if self._on_step is not None:
                self._on_step(self, position, name, True)
            return value
        crash_point("before-step")
        started_at = now()
        t0 = perf_counter()
        try:
            value = fn(*args, **kwargs)
        except Exception as e:
            raise StepFailed(position, name, e) from e
        duration = perf_counter() - t0
        crash_point("after-step")
        encoded = encode(value, f"step {name!r}")
        result, artifact = place(self._store.data_dir, self._artifact_dir,
                                 f"g{self.generation}-{position:05d}-{name}", encoded)
        at = now()
        commit_step(self._store, self.run_id, self.generation, self.fence, position, name, result, artifact,
                    1, started_at, duration, self._checkpoint, at, at + self._claim.lease_s)
        crash_point("after-step-commit")
        if self._on_step is not None:
            self._on_step(self, position, name, False)
        return value if type(value) in _PLAIN else json.loads(encoded)
