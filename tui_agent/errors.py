"""Error classes shared across layers: what a user did wrong, what stopped a command, and what a failure
means to the runtime.

A TuiAgentError ends a command with its message as one line and its `exit_code` (docs/architecture.md 11), so
the CLI catches the base class in one place and a new kind of stop needs no new except clause. The runtime's
own signals below (TemporaryError, PermanentError, EffectNotDone) are not in it: they are raised by an agent's
code and decide a step's fate, never a command's exit.
"""

from __future__ import annotations

from .states import EXIT_ENVIRONMENT, EXIT_USAGE


class TuiAgentError(Exception):
    """A command could not do what was asked, for a reason one line can say; never a bug (that is a traceback)."""

    exit_code = EXIT_USAGE


class UserError(TuiAgentError):
    """A mistake a user can fix (a bad option, an unknown run, a refused decision)."""


class Unreadable(TuiAgentError):
    """A stored value that cannot be decoded, encoded or parsed (written by an older version, or another program):
    `field` names it (`runs.request`). A worker fails that one run (or disables that schedule) and goes on."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field} cannot be read: {why}")
        self.field, self.why = field, why


class EnvironmentStop(TuiAgentError):
    """The environment, not the user, stopped a command on our database; `kind` says why (busy, read-only, full,
    damaged: store/environment.py decides which). Nothing committed is lost, so it is never a run's failure.
    `what` is the message without its advice to a command (what a worker that waits it out says)."""

    exit_code = EXIT_ENVIRONMENT

    def __init__(self, kind: str, message: str, what: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.what = what or message


class TemporaryError(Exception):
    """Trying again later may work (a timeout, a rate limit): the retry policy applies. `retry_after_s`
    is the wait the service asked for, used instead of the policy's back-off."""

    def __init__(self, *args, retry_after_s: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after_s = retry_after_s


class NotReachable(TemporaryError):
    """The service could not be reached or did not answer in time: a failed connection, a timeout, a server error
    (5xx), an overload (529) or a rate limit that a wait cures (a 429 that is not a spend limit). The network or the
    service is away for a while (a closed lid, a VPN reconnecting), so the retry policy's patience applies: it is
    retried for a length of time (`RetryPolicy.patience_s`), not a number of attempts. The built-in
    `ConnectionError` and `TimeoutError` are of this class too (runtime/retry.py `is_unreachable`)."""
class StepTimedOut(TemporaryError):
    """A step (or a model call, a tool, a program `ctx.run_command` ran) was still running at its deadline: a
    temporary failure, counted as an attempt like any other, so the retry policy decides whether it runs again
    (runtime/deadlines.py)."""


class PermanentError(Exception):
    """Trying again will not help (a bad request, a missing source): the step fails at once."""


class EffectNotDone(Exception):
    """Raised by an effect's `do` when the service guarantees it did nothing (a refusal), so
    sending again with the same key is safe. Any other exception leaves the outcome unknown."""


class EffectDeclined(EffectNotDone):
    """Raised by an effect's `do` that did nothing this time and says what came of it instead (`outcome`, a JSON
    value): a coding agent's iteration whose check failed, rolled back. The effect is recorded `not_done` with
    `outcome` as its journal entry, `ctx.effect` returns `outcome`, and nothing is sent again by this call; the key
    was never confirmed, so a later effect with the same key is done as if for the first time."""

    def __init__(self, message: str, outcome) -> None:
        super().__init__(message)
        self.outcome = outcome


class ParkRun(Exception):
    """Raised by an agent's code (a step's function included) when something outside the run needs a person
    before it can go on (a file it cannot read, a working tree that moved): the run is parked with reason
    `environment` and this message, nothing of the step is recorded, and `resume` tries the step again."""
