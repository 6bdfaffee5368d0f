"""Messages the app posts to its screens: one dataclass per domain event."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class DataChanged(Message):
    """Another connection committed (a worker, the CLI, an action): screens re-read what they show."""
