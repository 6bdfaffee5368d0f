"""The run actions shared by the runs screen, the run screen and the command palette: each opens
its modal when it needs an answer and acts through operate.py via `app.act`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import operate
from ..report import run_report
from ..states import IN_DOUBT, EffectState, budget_dimension
from ..store.approvals import pending as pending_approval
from ..store.effects import in_doubt
from ..store.runs import get_run, recorded_positions
from .modals import ApproveModal, BudgetModal, ConfirmModal, NewRunModal, ReconcileModal

if TYPE_CHECKING:
    from ..app import TuiAgentApp


def _why_not_approve(app: TuiAgentApp, run: dict) -> str | None:
    return operate.why_not_approve(run, pending_approval(app.reader, run["id"], run["generation"]))


def _in_doubt(app: TuiAgentApp, run: dict) -> list[dict]:
    return in_doubt(app.reader, run["id"], run["generation"], (*IN_DOUBT, EffectState.INTENDED))


def _why_not_reconcile(app: TuiAgentApp, run: dict) -> str | None:
    why = operate.why_not_decide(run)
    return why or (None if _in_doubt(app, run) else "it has no effect waiting for a decision")


def _applies(app: TuiAgentApp, run_id: str, why_not) -> dict | None:
    """The run, when the action applies to it as it is now; else a toast says why (operate.py's rule)."""
    run = get_run(app.reader, run_id)
    why = why_not(app, run)
    if why:
        app.notify(f"{run_id}: {why}", severity="warning")
        return None
    return run


def resume(app: TuiAgentApp, run_id: str) -> None:
    if _applies(app, run_id, WHY_NOT[resume]):
        app.act(operate.resume, app.store, run_id, done=f"{run_id} resumed; a worker will pick it up")


def park(app: TuiAgentApp, run_id: str) -> None:
    if _applies(app, run_id, WHY_NOT[park]):
        app.act(operate.park, app.store, run_id, done=f"{run_id} parked")


def cancel(app: TuiAgentApp, run_id: str) -> None:
    if not _applies(app, run_id, WHY_NOT[cancel]):
        return

    def confirmed(yes: bool | None) -> None:
        if yes:
            app.act(operate.cancel_run, app.store, run_id, done=f"{run_id} cancelled")

    app.push_screen(ConfirmModal(f"Cancel {run_id}?", "The run ends for good; its journal stays readable.",
                                 "Cancel the run", "Keep it"), confirmed)


def approve(app: TuiAgentApp, run_id: str) -> None:
    run = _applies(app, run_id, WHY_NOT[approve])
    if run is None:
        return

    def decided(answer: tuple[bool, str | None] | None) -> None:
        if answer is not None:
            deny, note = answer
            app.act(operate.approve, app.store, run_id, deny, note,
                    done=f"{run_id} {operate.answered(deny)}")

    question = pending_approval(app.reader, run_id, run["generation"])
    app.push_screen(ApproveModal(run_id, question["question"]), decided)


def reconcile(app: TuiAgentApp, run_id: str, effect: dict | None = None) -> None:
    run = _applies(app, run_id, WHY_NOT[reconcile])
    if run is None:
        return
    effect = effect or _in_doubt(app, run)[-1]
    ref = str(effect["position"])
    actions = {"ask": operate.reconcile_ask, "not-done": operate.reconcile_not_done, "abandon": operate.abandon}

    def decided(answer) -> None:
        if answer is None:
            return
        decision, result, note = answer
        if decision == "happened":
            app.act(operate.reconcile_happened, app.store, run_id, ref, result, note,
                    done=f"{effect['name']} recorded as done; {run_id} queued again")
        else:
            app.act(actions[decision], app.store, run_id, ref, note,
                    done=f"{effect['name']}: {decision}; {run_id} " + ("cancelled" if decision == "abandon"
                                                                       else "queued again"))

    app.push_screen(ReconcileModal(effect), decided)


def raise_budget(app: TuiAgentApp, run_id: str) -> None:
    run = _applies(app, run_id, WHY_NOT[raise_budget])
    if run is None:
        return

    def chosen(limits: dict | None) -> None:
        if limits:
            app.act(operate.resume, app.store, run_id, budget=limits,
                    done=lambda _: f"{run_id}: {', '.join(f'{k} {v:g}' for k, v in limits.items())}; resumed")

    app.push_screen(BudgetModal(run_report(app.reader, run_id)["budget"], budget_dimension(run["reason"])), chosen)


# Each run action's rule, from operate.py: the key handlers refuse with its words, the palette offers
# only the actions that apply.
WHY_NOT = {resume: lambda app, run: operate.why_not_resume(run), park: lambda app, run: operate.why_not_park(run),
           cancel: lambda app, run: operate.why_not_cancel(run), approve: _why_not_approve,
           reconcile: _why_not_reconcile,
           raise_budget: lambda app, run: operate.why_not_resume(run)}


def why_not_fork(app: TuiAgentApp, run: dict, position: int | None = None) -> tuple[int, str | None]:
    """The position a fork starts from (None: where the run stopped, after every entry it recorded) and
    operate.py's rule for it."""
    recorded = recorded_positions(app.reader.conn, run["id"], run["generation"])
    position = recorded if position is None else position
    return position, operate.why_not_fork(recorded, position)


def fork(app: TuiAgentApp, run_id: str, position: int | None = None, name: str | None = None) -> None:
    """A new run keeping the journal before `position`, which runs anew (None: all the run recorded, so the
    new run goes on from where this one stopped); asks first, then opens the new run."""
    run = get_run(app.reader, run_id)
    position, why = why_not_fork(app, run, position)
    if why:
        app.notify(f"{run_id}: {why}", severity="warning")
        return
    kept = f"positions 0-{position - 1}" if position else "nothing"
    goes_on = f"runs #{position} {name} and everything after it anew" if name else \
        f"goes on from #{position}, where {run_id} stopped"
    question = f"A new run keeps {kept} of {run_id}'s journal and {goes_on}. Effects already confirmed are " \
               "not repeated."

    def confirmed(yes: bool | None) -> None:
        if not yes:
            return
        new_id = app.act(operate.fork, app.store, run_id, position,
                         done=lambda new: f"{run_id} forked at #{position} into {new}; queued")
        if new_id:
            from .run import RunScreen

            app.push_screen(RunScreen(new_id))

    app.push_screen(ConfirmModal(f"Fork {run_id} at #{position}?", question, "Fork it", "Don't fork"), confirmed)


def new_run(app: TuiAgentApp) -> None:
    def chosen(answer) -> None:
        if answer is not None:
            agent, request = answer
            app.act(operate.start, app.store, app.registry, agent, request,
                    done=lambda started: f"{started[0]} queued ({agent}); a worker will pick it up")

    app.push_screen(NewRunModal(app.registry.names()), chosen)
