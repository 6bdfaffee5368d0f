"""`R` on the run screen: replay the run with the agent's current code (tui_agent.services.replay), in a thread
that only posts `Replayed`; a divergence opens a modal with its diff, a reproduction is a toast. The replay runs on the
database itself and nothing bounds it: a thread cannot be stopped (README, "What a replay isolates and bounds").
It is a daemon thread of its own, not one of Textual's workers (whose executor's threads are joined when the
process exits), so agent code that never returns cannot keep the TUI from quitting."""

from __future__ import annotations

import threading

from textual.app import ComposeResult
from textual.widgets import Label, Static

from ..errors import TuiAgentError
from ..messages import Replayed
from ..services.replay import Replay, replay_run
from ..widgets.safe import safe
from .modals import Dialog


def start_replay(screen, run_id: str) -> threading.Thread:
    """The replay of `run_id` started in a daemon thread that posts its outcome to `screen`."""
    thread = threading.Thread(target=replay_in_thread, args=(screen, run_id), name=f"replay {run_id}", daemon=True)
    thread.start()
    return thread


def replay_in_thread(screen, run_id: str) -> None:
    """The thread's body: never touches a widget, only posts the outcome to `screen`."""
    session = screen.session
    try:
        screen.post_message(Replayed(run_id, replay=replay_run(session.db_path, session.registry, run_id)))
    except TuiAgentError as e:   # the agent is unknown here, the database went away: said, not raised
        screen.post_message(Replayed(run_id, error=str(e)))


def reproduced_line(replay: Replay) -> str:
    return f"{replay.run_id}: reproduced by the current code ({replay.answered} of {replay.entries} entries; " \
           f"{replay.note})"


class DivergenceModal(Dialog):
    """Where the current code leaves the recorded run, with the compact diff; `Go to` selects that entry."""

    DONT = "Close"

    def __init__(self, replay: Replay) -> None:
        super().__init__()
        assert replay.divergence is not None    # only a replay that did not reproduce the run opens this modal
        self.replay, self.divergence = replay, replay.divergence
        d = replay.divergence
        self.title = f"Replay of {replay.run_id}: diverged at #{d.position} ({d.kind})"
        self.DO = f"Go to #{d.position}"

    def body(self) -> ComposeResult:
        d = self.divergence
        yield Label(safe(d.message), id="divergence-message")       # names and results the agent's code made
        if d.diff:
            yield Static(safe("\n".join(d.diff)), id="divergence-diff")
        yield Label(f"{self.replay.answered} of {self.replay.entries} entries answered from the journal; "
                    "nothing was executed")

    def answer(self) -> int:
        return self.divergence.position
