"""The command palette knows the current run: on the runs and run screens it offers, by name, the
actions that apply to the selected run as it is now."""

from __future__ import annotations

from functools import partial

from textual.command import Hit, Hits, Provider

from ..store.runs import get_run
from . import run_actions

ACTIONS = [("Resume", run_actions.resume), ("Park", run_actions.park), ("Cancel", run_actions.cancel),
           ("Approve or deny", run_actions.approve), ("Reconcile an effect", run_actions.reconcile),
           ("Raise a budget ceiling", run_actions.raise_budget)]


class RunCommands(Provider):
    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        screen = self.screen
        run_id = getattr(screen, "run_id", None) or (screen.selected_id() if hasattr(screen, "selected_id")
                                                     else None)
        commands = [("Start a new run", partial(run_actions.new_run, self.app))]
        if run_id:
            run = get_run(self.app.reader, run_id)
            commands += [(f"{label} {run_id}", partial(act, self.app, run_id)) for label, act in ACTIONS
                         if run_actions.WHY_NOT[act](self.app, run) is None]
        for text, callback in commands:
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback, help="the same action as the CLI's")
