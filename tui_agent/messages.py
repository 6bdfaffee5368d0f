"""Messages the app posts to its screens: one dataclass per domain event."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from .services.replay import Replay
from .sim.stepper import Stepper, View


@dataclass
class DataChanged(Message):
    """Another connection committed (a worker, the CLI, an action): screens re-read what they show."""


@dataclass
class ScenarioAdvanced(Message):
    """The simulator's scenario reached its next stop (or its end); `view` is how it stands there. `stepper`
    says which execution it came from: one the screen has reset since is not shown."""

    stepper: Stepper
    view: View


@dataclass
class Replayed(Message):
    """A replay of `run_id` with the current code ended: `replay` says how, or `error` why it could not run."""

    run_id: str
    replay: Replay | None = None
    error: str | None = None


class Loaded(Message, bubble=False):
    """The reader or the actor thread finished what a screen or the App asked (tui_agent/session.py).

    `paint(value)` shows it, or `error` says why it could not."""

    def __init__(self, paint: Callable[[Any], None], value: Any, error: Exception | None) -> None:
        super().__init__()
        self.paint, self.value, self.error = paint, value, error
