"""Built-in agents and the services they talk to."""

from .harness import AGENT as HARNESS
from .hello import AGENT as HELLO
from .nightly_report import AGENT as NIGHTLY_REPORT
from .patch import AGENT as PATCH
from .patch import NIGHT_AGENT as PATCH_NIGHT
from .prune import AGENT as PRUNE
from .refactor_imports import AGENT as REFACTOR_IMPORTS

BUILTIN = [HELLO, NIGHTLY_REPORT, REFACTOR_IMPORTS, PATCH, PATCH_NIGHT, PRUNE, HARNESS]
