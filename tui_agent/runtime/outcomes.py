"""Exceptions that end or pause a run's turn; the worker turns each into a status and reason."""

from __future__ import annotations

from ..states import RunStatus

# What an exhausted budget or a plateau does to the run: its action -> the run's new status.
ACTIONS = {"stop": RunStatus.FAILED, "park": RunStatus.PARKED, "escalate": RunStatus.WAITING}


class CodeChanged(Exception):
    """The agent called something else at a recorded position: its code changed under the run."""

    def __init__(self, position: int, recorded: str, new: str) -> None:
        super().__init__(f"position {position} was recorded as {recorded!r} but the code now calls {new!r}")
        self.position, self.recorded, self.new = position, recorded, new


class StepFailed(Exception):
    def __init__(self, position: int, name: str, error: BaseException, attempts: int = 1) -> None:
        tries = f" (attempt {attempts}, the last allowed)" if attempts > 1 else ""
        super().__init__(f"step {position} {name!r} raised {type(error).__name__}: {error}{tries}")
        self.position, self.name, self.error, self.attempts = position, name, error, attempts


class Suspend(BaseException):
    """Unwinds the agent's code so the worker can put the run in `status` for `reason`. The status is waiting, parked,
    or cancelled for a denied approval. It is a BaseException, so an agent's `except Exception` cannot swallow it.
    `error`: the failure the run waits out or parked on (a retry's last attempt), kept in `runs.error` for the screens
    to say."""

    def __init__(self, status: str, reason: str, message: str, wake_at: float | None = None,
                 error: str | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.wake_at, self.error = status, reason, message, wake_at, error
