"""Error classes shared across layers: what a user did wrong, and what a failure means to the runtime."""

from __future__ import annotations


class UserError(Exception):
    """A mistake a user can fix; the CLI prints the message as one line and exits 2."""


class TemporaryError(Exception):
    """Trying again later may work (a timeout, a rate limit): the retry policy applies. `retry_after_s`
    is the wait the service asked for, used instead of the policy's back-off."""

    def __init__(self, *args, retry_after_s: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after_s = retry_after_s


class PermanentError(Exception):
    """Trying again will not help (a bad request, a missing source): the step fails at once."""


class EffectNotDone(Exception):
    """Raised by an effect's `do` when the service guarantees it did nothing (a refusal), so
    sending again with the same key is safe. Any other exception leaves the outcome unknown."""
