"""Built-in agents and the services they talk to."""

from .hello import AGENT as HELLO

BUILTIN = [HELLO]
