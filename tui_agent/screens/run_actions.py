"""The run actions shared by the runs screen, the run screen and the command palette: each opens
its modal when it needs an answer and acts through operate.py via `app.act`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import operate
from ..report import run_report
from ..store.approvals import pending as pending_approval
from ..store.effects import effects_for
from ..store.runs import TERMINAL, get_run
from .modals import ApproveModal, BudgetModal, ConfirmModal, NewRunModal, ReconcileModal

if TYPE_CHECKING:
    from ..app import TuiAgentApp


def resume(app: TuiAgentApp, run_id: str) -> None:
    app.act(operate.resume, app.store, run_id, done=f"{run_id} resumed; a worker will pick it up")


def park(app: TuiAgentApp, run_id: str) -> None:
    app.act(operate.park, app.store, run_id, done=f"{run_id} parked")


def cancel(app: TuiAgentApp, run_id: str) -> None:
    status = get_run(app.reader, run_id)["status"]
    if status in TERMINAL:
        app.notify(f"{run_id} has ended ({status}); nothing to cancel", severity="warning")
        return

    def confirmed(yes: bool | None) -> None:
        if yes:
            app.act(operate.cancel_run, app.store, run_id, done=f"{run_id} cancelled")

    app.push_screen(ConfirmModal(f"Cancel {run_id}?", "The run ends for good; its journal stays readable."),
                    confirmed)


def approve(app: TuiAgentApp, run_id: str) -> None:
    run = get_run(app.reader, run_id)
    question = pending_approval(app.reader, run_id, run["generation"])
    if run["status"] != "waiting" or run["reason"] != "approval" or question is None:
        app.notify(f"{run_id} is not waiting for an approval", severity="warning")
        return

    def decided(answer: tuple[bool, str | None] | None) -> None:
        if answer is not None:
            deny, note = answer
            app.act(operate.approve, app.store, run_id, deny, note,
                    done=f"{run_id} {'denied' if deny else 'approved'}; queued again")

    app.push_screen(ApproveModal(run_id, question["question"]), decided)


def reconcile(app: TuiAgentApp, run_id: str, effect: dict | None = None) -> None:
    if effect is None:
        run = get_run(app.reader, run_id)
        doubtful = [e for e in effects_for(app.reader, run_id)
                    if e["generation"] == run["generation"] and e["state"] in ("unknown", "attempted", "intended")
                    and run["reason"] == "reconcile"]
        if not doubtful:
            app.notify(f"{run_id} has no effect waiting for a decision", severity="warning")
            return
        effect = doubtful[-1]
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
    def chosen(limits: dict | None) -> None:
        if limits:
            app.act(operate.resume, app.store, run_id, budget=limits,
                    done=lambda _: f"{run_id}: {', '.join(f'{k} {v:g}' for k, v in limits.items())}; resumed")

    reason = get_run(app.reader, run_id)["reason"] or ""
    exhausted = reason.removeprefix("budget:") if reason.startswith("budget:") else None
    app.push_screen(BudgetModal(run_report(app.reader, run_id)["budget"], exhausted), chosen)


def new_run(app: TuiAgentApp) -> None:
    def chosen(answer) -> None:
        if answer is not None:
            agent, request = answer
            app.act(operate.start, app.store, app.registry, agent, request,
                    done=lambda started: f"{started[0]} queued ({agent}); a worker will pick it up")

    app.push_screen(NewRunModal(app.registry.names()), chosen)
