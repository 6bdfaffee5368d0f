"""The run actions, defined once for the runs screen, the run screen and the command palette: each one's key,
label and palette title, operate.py's rule for whether it applies, and the deed, which opens its modal when it
needs an answer and acts through operate.py via `session.act`. The screens' bindings, their `action_run` and the
palette's commands are all read from `RUN_ACTIONS`."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.app import SuspendNotSupported
from textual.binding import Binding

from .. import operate
from ..errors import UserError
from ..format import file_size
from ..report import run_view, with_holders
from ..runtime.agent import UNBOUNDED
from ..services import editing
from ..services.worktrees import branch_advice, why_not_remove
from ..services.worktrees import of_run as worktree_of
from ..session import Reads, Session
from ..states import IN_DOUBT, EffectState, budget_dimension
from ..store.approvals import pending as pending_approval
from ..store.effects import in_doubt
from ..store.rows import EffectRow, RunRow
from ..store.runs import get_run, recorded_positions
from .modals import ApproveModal, BudgetModal, BulkModal, ConfirmModal, NewRunModal, ReconcileModal, RuleModal

if TYPE_CHECKING:
    from ..widgets.timeline import TimelineItem

WhyNot = Callable[[Session, RunRow], str | None]   # operate.py's rule for an action: None when it applies


def _why_not_approve(session: Session, run: RunRow) -> str | None:
    return operate.why_not_approve(run, pending_approval(session.reader, run["id"], run["generation"]))


def _in_doubt(session: Session, run: RunRow) -> list[EffectRow]:
    return in_doubt(session.reader, run["id"], run["generation"], (*IN_DOUBT, EffectState.INTENDED))


def _why_not_reconcile(session: Session, run: RunRow) -> str | None:
    why = operate.why_not_decide(run)
    return why or (None if _in_doubt(session, run) else "it has no effect waiting for a decision")


def _applies(session: Session, run_id: str, why_not: WhyNot) -> RunRow | None:
    """The run, when the action applies to it as it is now; else a toast says why (operate.py's rule)."""
    run = get_run(session.reader, run_id)
    why = why_not(session, run)
    if why:
        session.app.notify(f"{run_id}: {why}", severity="warning")
        return None
    return run


def _why_not_resume(session: Session, run: RunRow) -> str | None:
    return operate.why_not_resume(with_holders(session.reader, [run])[0])   # a running run: whether it is held


def resume(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    """`r`: a parked run goes on where it stopped; a run waiting to retry tries again now."""
    run = _applies(session, run_id, _why_not_resume)
    if run:
        session.act(operate.resume, run_id, done=f"{run_id} {operate.resumed(run)}; a worker will pick it up")


def park(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    if _applies(session, run_id, lambda session, run: operate.why_not_park(run)):
        session.act(operate.park, run_id, done=f"{run_id} parked")


def cancel(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    if not _applies(session, run_id, lambda session, run: operate.why_not_cancel(run)):
        return

    def confirmed(yes: bool | None) -> None:
        if yes:
            session.act(operate.cancel_run, run_id, done=f"{run_id} cancelled")

    session.app.push_screen(ConfirmModal(f"Cancel {run_id}?", "The run ends for good; its journal stays readable.",
                                 "Cancel the run", "Keep it"), confirmed)


def approve(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    run = _applies(session, run_id, _why_not_approve)
    if run is None:
        return

    def decided(answer: tuple[bool, str | None] | None) -> None:
        if answer is not None:
            deny, note = answer
            session.act(operate.approve, run_id, deny, note,
                    done=f"{run_id} {operate.answered(deny)}")

    question = pending_approval(session.reader, run_id, run["generation"])
    if question is None:   # answered since _applies read it (the CLI, another person)
        session.app.notify(f"{run_id}: {operate.why_not_approve(run, question)}", severity="warning")
        return
    session.app.push_screen(ApproveModal(run_id, question["question"]), decided)


def reconcile(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    """The effect selected in the timeline when it is in doubt, else the run's doubtful one."""
    run = _applies(session, run_id, _why_not_reconcile)
    if run is None:
        return
    effect: Mapping[str, Any]
    if item is not None and item.effect is not None and item.in_doubt:
        effect = item.effect
    else:
        effect = _in_doubt(session, run)[-1]
    ref = str(effect["position"])
    actions: dict[str, Callable[..., str]] = {"ask": operate.reconcile_ask, "not-done": operate.reconcile_not_done,
                                              "abandon": operate.abandon}   # each takes effect_ref and note

    def decided(answer: tuple[str, Any, str | None] | None) -> None:
        if answer is None:
            return
        decision, result, note = answer
        if decision == "happened":
            session.act(operate.reconcile_happened, run_id, effect_ref=ref, result=result, note=note,
                    done=f"{effect['name']} recorded as done; {run_id} queued again")
        else:
            session.act(actions[decision], run_id, effect_ref=ref, note=note,
                    done=f"{effect['name']}: {decision}; {run_id} " + ("cancelled" if decision == "abandon"
                                                                       else "queued again"))

    session.app.push_screen(ReconcileModal(effect), decided)


def raise_budget(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    run = _applies(session, run_id, _why_not_resume)
    if run is None:
        return

    def chosen(limits: dict[str, float] | None) -> None:
        if limits:
            said = "unbounded (no default ceilings)" if UNBOUNDED in limits else \
                ", ".join(f"{k} {v:g}" for k, v in limits.items())
            session.act(operate.resume, run_id, budget=limits, done=lambda _: f"{run_id}: {said}; resumed")

    session.app.push_screen(BudgetModal(run_view(session.reader, run_id)["budget"], budget_dimension(run["reason"])),
                            chosen)


def rule(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    """`u`: a line for a harness run's RULES.md, committed in its worktree; then the run resumes."""
    if _applies(session, run_id, lambda session, run: operate.why_not_harness(run)) is None:
        return

    def chosen(text: str | None) -> None:
        if text:
            session.act(operate.harness_rule, run_id, text, done=lambda said: said)

    session.app.push_screen(RuleModal(), chosen)


def why_not_fork(session: Session, run: RunRow, position: int | None = None) -> tuple[int, str | None]:
    """The position a fork starts from (None: where the run stopped, after every entry it recorded) and
    operate.py's rule for it."""
    recorded = recorded_positions(session.reader.conn, run["id"], run["generation"])
    position = recorded if position is None else position
    return position, operate.why_not_fork(recorded, position)


def fork(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    """Fork a new run that keeps the journal before the selected position, asking first, then open it.

    The selected position runs anew; with no selection the new run keeps all the run recorded and goes on from
    where this one stopped."""
    run = get_run(session.reader, run_id)
    position, why = why_not_fork(session, run, item.position if item else None)
    name = item.name if item else None
    if why:
        session.app.notify(f"{run_id}: {why}", severity="warning")
        return
    kept = f"positions 0-{position - 1}" if position else "nothing"
    goes_on = f"runs #{position} {name} and everything after it anew" if name else \
        f"goes on from #{position}, where {run_id} stopped"
    question = f"A new run keeps {kept} of {run_id}'s journal and {goes_on}. Effects already confirmed are " \
               "not repeated."

    def confirmed(yes: bool | None) -> None:
        if not yes:
            return
        session.act(operate.fork, run_id, position,
                    done=lambda new: f"{run_id} forked at #{position} into {new}; queued",
                    then=lambda new_id: _open_run(session, new_id))

    session.app.push_screen(ConfirmModal(f"Fork {run_id} at #{position}?", question, "Fork it", "Don't fork"),
                            confirmed)


def _open_run(session: Session, run_id: str) -> None:
    """A fork made: its screen opened."""
    from .run import RunScreen

    session.app.push_screen(RunScreen(run_id))


def run_editor(session: Session, argv: list[str]) -> int:
    """Run the editor on the session's own terminal.

    Textual hands the terminal over (`session.app.suspend()`) and takes it back when the editor exits. Pilot's headless
    driver cannot hand over a terminal, so its tests put another in its place."""
    try:
        with session.app.suspend():
            return subprocess.run(argv, check=False).returncode
    except SuspendNotSupported:
        raise UserError("this terminal cannot be handed to an editor; use tui-agent fork RUN --edit N") from None


def edit_fork(session: Session, run_id: str, item: TimelineItem | None = None) -> None:
    """`e`: edit the selected step's result or model reply, then fork from that position with the edit.

    The entry opens in the person's editor (editing.py: a private file, removed afterwards) and is checked by
    operate.py's rules. Then, asked first, a fork is made from that position with the edit in place of the
    recorded entry (operate.fork_edited, as `tui-agent fork RUN --edit N`), and the new run opens."""
    if item is None or item.pending:
        session.app.notify(f"{run_id}: select a step or a model reply in the timeline first", severity="warning")
        return
    entry = operate.recorded_entry(session.reader, run_id, item.position)      # a refusal is the guard's toast
    position, name = entry["position"], entry["name"]
    text = editing.edit_text(editing.as_text(entry["result"]), editing.file_name(entry),
                             run=lambda argv: run_editor(session, argv))
    value = editing.parse_edited(text, f"the edited result of #{position} {name}")
    why = operate.why_not_edited(entry["kind"], entry["result"], value)
    if why:
        session.app.notify(f"{run_id} #{position} {name}: {why}", severity="warning")
        return
    kept = f"positions 0-{position - 1}" if position else "nothing"
    what = "model reply" if entry["kind"] == "model" else "step result"
    question = (f"A new run keeps {kept} of {run_id}'s journal, holds your edit of #{position} {name} in place of "
                f"the recorded {what} (marked edited), and runs everything after #{position} anew. "
                "Effects already confirmed are not repeated.")

    def confirmed(yes: bool | None) -> None:
        if not yes:
            return
        session.act(operate.fork_edited, run_id, position=position, result=value, name=name,
                    generation=entry["generation"],
                    done=lambda new: f"{run_id} forked at #{position} with {name} edited into {new}; queued",
                    then=lambda new_id: _open_run(session, new_id))

    session.app.push_screen(ConfirmModal(f"Fork {run_id} with #{position} {name} edited?", question, "Fork it",
                                 "Don't fork"), confirmed)


def remove_worktree(session: Session, run_id: str) -> None:
    """Remove a coding run's worktree, once every run working in it has ended, after asking (`W` on its screen).

    It goes through operate.remove_worktree, as `tui-agent worktrees --clean` does for each. The branch stays."""
    tree = worktree_of(session.reader, run_id)
    if tree is None:
        session.app.notify(f"{run_id}: it names no worktree that git knows", severity="warning")
        return
    why = why_not_remove(tree)
    if why:
        session.app.notify(f"{run_id}: its worktree stays: {why}", severity="warning")
        return
    merged = f", merged into {tree.onto}" if tree.merged else f", not merged into {tree.onto}" if tree.onto else ""
    question = (f"{tree.path} ({file_size(tree.size)}) is deleted. Its branch {tree.branch} stays in {tree.repo}"
                f"{merged}, so it can still be merged or deleted (git branch -d).")

    def confirmed(yes: bool | None) -> None:
        if yes:
            session.act(operate.remove_worktree, run_id,
                    done=lambda removed: f"{run_id}: worktree removed; {branch_advice(removed)}")

    session.app.push_screen(ConfirmModal(f"Remove the worktree of {run_id}?", question, "Remove the worktree",
                                         "Keep it"), confirmed)


SHOWN_REFUSALS = 5   # lines of refusals a bulk action's toast shows; the rest stay marked to look at


def act_on_marked(session: Session, run_ids: list[str], action: str, after: Callable[[operate.Decided], None]) -> None:
    """Act on the marked runs together, after one confirmation.

    The confirmation says how many runs are marked and which of the bulk actions applies to how many of them
    (operate.py's rules, read now), `action` chosen first. Then operate.bulk runs each run in its own write, and a
    toast gives the summary and what stood in the way of the others. `after(decided)` hears what was done."""
    preview = operate.bulk_preview(session.reader, run_ids)

    def chosen(answer: tuple[str, str | None] | None) -> None:
        if answer is None:
            return
        action, note = answer
        session.act(operate.bulk, action, run_ids, note, done=_said, then=after)

    session.app.push_screen(BulkModal(len(run_ids), preview, action), chosen)


def _said(decided: operate.Decided) -> str:
    lines = [decided.summary(), *decided.refused[:SHOWN_REFUSALS]]
    if len(decided.refused) > SHOWN_REFUSALS:
        lines.append(f"and {len(decided.refused) - SHOWN_REFUSALS} more (still marked)")
    return "\n".join(lines)


def new_run(session: Session) -> None:
    def chosen(answer: tuple[str, dict] | None) -> None:
        if answer is not None:
            agent, request = answer
            session.act(operate.start, session.registry, agent_name=agent, request=request,
                    done=lambda started: f"{started[0]} queued ({agent}); a worker will pick it up")

    session.app.push_screen(NewRunModal(session.registry.names()), chosen)


@dataclass(frozen=True)
class RunAction:
    """One thing a person does to a run. `why_not(session, run)` is operate.py's rule (None: it applies now): the
    key refuses with its words, and the palette offers only what applies."""

    name: str
    key: str
    label: str
    title: str
    why_not: WhyNot
    do: Callable[[Session, str, TimelineItem | None], None]

    def binding(self, show: bool = True) -> Binding:
        return Binding(self.key, f"run('{self.name}')", self.label, show=show)


RUN_ACTIONS = {action.name: action for action in (
    RunAction("resume", "r", "Resume", "Resume", _why_not_resume, resume),
    RunAction("park", "p", "Park", "Park", lambda session, run: operate.why_not_park(run), park),
    RunAction("cancel", "x", "Cancel", "Cancel", lambda session, run: operate.why_not_cancel(run), cancel),
    RunAction("approve", "a", "Approve", "Approve or deny", _why_not_approve, approve),
    RunAction("reconcile", "c", "Reconcile", "Reconcile an effect", _why_not_reconcile, reconcile),
    RunAction("budget", "b", "Budget", "Raise a budget ceiling", _why_not_resume, raise_budget),
    RunAction("fork", "f", "Fork here", "Fork", lambda session, run: why_not_fork(session, run)[1], fork),
)}


def bindings(*names: str, hidden: tuple[str, ...] = ()) -> list[Binding]:
    """A screen's run-action keys, in the order its footer shows them."""
    return [RUN_ACTIONS[name].binding(show=name not in hidden) for name in names]


class RunActionKeys(Reads):
    """`action_run(name)` for a screen that knows its run and, on the run screen, the selected position."""

    def run_target(self) -> tuple[str | None, TimelineItem | None]:
        raise NotImplementedError

    def action_run(self, name: str) -> None:
        run_id, item = self.run_target()
        if run_id is None:
            self.session.app.notify("no run selected", severity="warning")
        else:
            self.session.guard(RUN_ACTIONS[name].do, self.session, run_id, item)
