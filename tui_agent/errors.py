"""The one base class for mistakes a user can fix; the CLI prints its message as one line and exits 2."""


class UserError(Exception):
    """The message says what went wrong and what to do about it."""
