"""Error classes shared across layers: what a user did wrong, what stopped a command, what a failure means.

A TuiAgentError ends a command with its message as one line and its `exit_code` (docs/architecture.md 11), so
the CLI catches the base class in one place. The runtime's own signals (TemporaryError, PermanentError,
EffectNotDone) are not in it: an agent's code raises them and they decide a step's fate, never a command's exit."""

from __future__ import annotations

from .states import EXIT_ENVIRONMENT, EXIT_USAGE


class TuiAgentError(Exception):
    """A command could not do what was asked, for a reason one line can say; never a bug (that is a traceback)."""

    exit_code = EXIT_USAGE


class UserError(TuiAgentError):
    """A mistake a user can fix (a bad option, an unknown run, a refused decision)."""


class Unreadable(TuiAgentError):
    """A stored value that cannot be decoded, encoded or parsed.

    It was written by an older version, or by another program. `field` names it (`runs.request`). A worker fails that
    one run (or disables that schedule) and goes on."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field} cannot be read: {why}")
        self.field, self.why = field, why


class EnvironmentStop(TuiAgentError):
    """The environment, not the user, stopped a command on our database.

    `kind` says why: busy, read-only, full or damaged, as store/environment.py decides. Nothing committed is lost, so it
    is never a run's failure. `what` is the message without its advice to a command (what a worker that waits it out
    says)."""

    exit_code = EXIT_ENVIRONMENT

    def __init__(self, kind: str, message: str, what: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.what = what or message


class TemporaryError(Exception):
    """Raise it when trying again later may work, so the agent's retry policy retries the step.

    A timeout or a rate limit is temporary. The built-in `TimeoutError` and `ConnectionError` are treated
    the same way.

    Args:
        *args: The message, as for any exception.
        retry_after_s: The wait the service asked for. It replaces the policy's back-off for this attempt.
    """

    def __init__(self, *args: object, retry_after_s: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after_s = retry_after_s


class NotReachable(TemporaryError):
    """Raise it when the service could not be reached or did not answer in time, so the step is waited out.

    A failed connection, a timeout, a server error (5xx), an overload (529) and a rate limit that a wait cures
    are all of this kind. The network or the service is away for a while, as when a lid is closed or a VPN
    reconnects. So the retry policy's patience applies. The step is retried for as long as
    `RetryPolicy.patience_s` allows rather than a number of attempts, and past it the run is parked, never
    failed. The built-in `ConnectionError` and `TimeoutError` count as this class too.
    """
class StepTimedOut(TemporaryError):
    """A step, model call, tool or program was still running at its deadline.

    It is a temporary failure, counted as an attempt like any other, so the retry policy decides whether it runs
    again (runtime/deadlines.py). A program here is one `ctx.run_command` ran."""


class PermanentError(Exception):
    """Raise it when trying again will not help, so the step fails at once without a retry.

    A bad request or a missing source is permanent. An error of both this class and `TemporaryError` is not
    retried.
    """


class EffectNotDone(Exception):
    """Raise it from an effect's `do` when the service guarantees it did nothing, so sending again is safe.

    The effect goes back to `not_done` and the retry policy decides whether to attempt it again with the same
    key. Any other exception from `do` leaves the outcome unknown, and the run reconciles it before going on.
    """


class EffectDeclined(EffectNotDone):
    """Raise it from an effect's `do` that did nothing this time, to return what came of it instead.

    A coding agent's iteration whose check failed and was rolled back is the example. The effect is recorded
    `not_done` with `outcome` as its journal entry, `ctx.effect` returns `outcome`, and this call sends nothing
    again. The key was never confirmed, so a later effect with the same key is done as if for the first time.

    Args:
        message: What happened, for the run's events.
        outcome: A JSON value, returned by `ctx.effect` now and on every replay.
    """

    def __init__(self, message: str, outcome: object) -> None:
        super().__init__(message)
        self.outcome = outcome


class ParkRun(Exception):
    """Raise it when something outside the run needs a person first, so the run parks instead of failing.

    An agent's code may raise it anywhere, a step's function included, for a file it cannot read or a working
    tree that moved. The run is parked with reason `environment` and this message, nothing of the step is
    recorded, and `tui-agent resume` tries the step again. Raised from an effect's `do`, it says the service
    did nothing. The effect goes back to `not_done`, and `resume` attempts it again with the same key.
    """
