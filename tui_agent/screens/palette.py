"""The command palette knows the current run: on the runs and run screens it offers, by name, the
actions that apply to the selected run as it is now, before anything is typed."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.markup import escape
from textual.types import IgnoreReturnCallbackType

from .. import operate
from ..report import saved_filters_report
from ..safe_text import visible
from ..session import Session
from ..store.runs import get_run
from . import run_actions

if TYPE_CHECKING:
    from .runs import RunsScreen

HELP = "the same action as the CLI's"

Command = tuple[str, IgnoreReturnCallbackType]   # what the palette shows, and what choosing it calls


@runtime_checkable
class _SessionApp(Protocol):
    """The App the palette opens in: TuiAgentApp (app.py, which screens do not import), the one App whose
    COMMANDS name RunCommands."""

    session: Session


def _filter_commands(session: Session, screen: RunsScreen) -> list[Command]:
    """On the runs list: each saved filter, to show its runs or to forget it, and saving the filter shown."""
    found, saved = session.guard(saved_filters_report, session.reader)
    commands: list[Command] = []
    for row in saved or ():
        name, words = escape(visible(row["name"])), escape(visible(row["words"]))
        commands.append((f"Filter: {name} ({words})", partial(screen.apply_filter, row["words"])))
    if screen.where:
        commands.append((f"Save the filter {escape(visible(str(screen.where)))} as…", screen.save_filter))
    for row in saved or ():
        commands.append((f"Forget the saved filter {escape(visible(row['name']))}",
                         partial(session.act, operate.forget_filter, row["name"],
                                 done=partial(_forgotten, words=row["words"]))))
    return commands


def _forgotten(said: str, words: str) -> str:
    """The toast once a saved filter is forgotten: what it selected, so that it can be saved again."""
    return f"{said} (it selected: {words})"


class RunCommands(Provider):
    def _commands(self) -> list[Command]:
        """Starting a run, the saved filters on the runs list, and each action that applies to the current run as
        it is now (operate.py's rules)."""
        from .run import RunScreen
        from .runs import RunsScreen

        app = self.app
        assert isinstance(app, _SessionApp)   # TuiAgentApp, whose COMMANDS name this provider
        session, screen = app.session, self.screen
        run_id = getattr(screen, "run_id", None) or (screen.selected_id() if hasattr(screen, "selected_id")
                                                     else None)
        commands: list[Command] = [("Start a new run", partial(run_actions.new_run, session))]
        if isinstance(screen, RunsScreen):
            commands += _filter_commands(session, screen)
        if not run_id:
            return commands
        found, run = session.guard(get_run, session.reader, run_id)   # gone, or the database unreadable: a toast
        if not found:
            return commands
        item = screen.selected if isinstance(screen, RunScreen) else None
        name = escape(visible(item.name)) if item else ""    # the palette reads its commands as markup
        commands += [(f"{action.title} {run_id}", partial(session.guard, action.do, session, run_id, item))
                     for action in run_actions.RUN_ACTIONS.values() if action.name != "fork"
                     and action.why_not(session, run) is None]
        if operate.why_not_harness(run) is None:   # not a RUN_ACTIONS entry: only a harness run has a rulebook
            commands.append((f"Add a rule to {run_id}'s RULES.md, then resume it",
                             partial(session.guard, run_actions.rule, session, run_id)))
        # On the run screen, from the position selected in the timeline; elsewhere from where the run
        # stopped, the one position a person can name without seeing the timeline.
        position, why = run_actions.why_not_fork(session, run, item.position if item else None)
        if why is None:
            where = f"at #{position} {name}" if item else f"from where it stopped (#{position})"
            commands.append((f"Fork {run_id} {where}", partial(session.guard, run_actions.fork, session, run_id, item)))
        if isinstance(screen, RunScreen):   # what needs the run screen: its selection, its thread, its picker
            commands += [(f"Replay {run_id} with the current code", screen.action_replay),
                         (f"Diff {run_id} with another run", screen.action_diff)]
            if item is not None and operate.why_not_edit(item.kind) is None:
                commands.append((f"Edit #{item.position} {name} and fork", screen.action_edit_fork))
        return commands

    async def discover(self) -> Hits:
        for text, callback in self._commands():
            yield DiscoveryHit(text, callback, help=HELP)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, callback in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback, help=HELP)
