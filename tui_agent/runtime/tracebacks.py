"""Where an agent's exception came from, kept with the failed run: `KeyError: 'urls'` alone does not say
which line of the agent raised it. Only frames outside the harness are kept; the runtime's own frames
around the agent's calls say nothing to the person who wrote the agent."""

from __future__ import annotations

import json
import site
import sysconfig
import traceback
from pathlib import Path

from .outcomes import StepFailed

KEEP = 20  # the innermost frames kept; a deep recursion keeps where it ended
_PACKAGE = Path(__file__).resolve().parent.parent
_BUILT_IN_AGENTS = _PACKAGE / "agents"
_LIBRARIES = tuple({Path(folder).resolve() for folder in (
    *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")),
    site.getusersitepackages())})


def agent_frames(error: BaseException) -> list[dict]:
    """The frames of `error` outside the harness, innermost last, as {file, line, function, code}; a failed
    step's frames go on into the exception its function raised."""
    frames = traceback.extract_tb(error.__traceback__)
    if isinstance(error, StepFailed):
        frames += traceback.extract_tb(error.error.__traceback__)
    kept = [frame for frame in frames if not _in_harness(Path(frame.filename))]
    return [{"file": f.filename, "line": f.lineno, "function": f.name, "code": f.line} for f in kept[-KEEP:]]


def as_column(error: BaseException | None) -> str | None:
    """`agent_frames` as the runs.traceback column (JSON), or None when the harness raised it (or nothing did)."""
    frames = agent_frames(error) if error is not None else []
    return json.dumps(frames, ensure_ascii=False) if frames else None


def innermost(frames: list[dict] | None) -> str | None:
    """The innermost frame in the agent's own code, in one line such as `my_agents.py:12 in digest`. Frames of the
    standard library or an installed package count only when that is all there is."""
    if not frames:
        return None
    own = [frame for frame in frames if _own(Path(frame["file"]))] or frames
    frame = own[-1]
    return f"{Path(frame['file']).name}:{frame['line']} in {frame['function']}"


def _in_harness(path: Path) -> bool:
    path = path.resolve()
    return path.is_relative_to(_PACKAGE) and not path.is_relative_to(_BUILT_IN_AGENTS)


def _own(path: Path) -> bool:
    path = path.resolve()
    return path.is_relative_to(_BUILT_IN_AGENTS) or not any(path.is_relative_to(lib) for lib in _LIBRARIES)
