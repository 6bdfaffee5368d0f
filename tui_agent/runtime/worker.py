"""Working claimed runs: replay the journal, run the agent, let the harness decide the ending."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ParkRun, Unreadable, UserError
from ..models import provider_for
from ..states import EventKind, Reason, RunStatus, TurnEnd
from ..store import Claim, EnvironmentStop, FenceRefused, Store, ids
from ..store.base import no_patience
from ..store.environment import BUSY, UNREACHABLE
from ..store.events import add_event, last_event
from ..store.journal import opening
from ..store.runs import RunNotFound, check_fence, get_run, set_code_version, settle_run
from ..store.schema import CHECKPOINT_SCHEMA
from ..store.workers import let_go
from ..strict_json import read_stored
from . import traces
from .budget import BudgetMeter
from .clock import CLOCK, Clock, clock_time
from .context import Context, StepObserver, last_entry_at
from .control import RunControl
from .faults import SimulatedCrash
from .outcomes import CodeChanged, StepFailed, Suspend
from .registry import Registry
from .results import ARTIFACT_THRESHOLD, ResultNotJSON, encode, place
from .tracebacks import as_column

DEFAULT_LEASE_S = 60.0
# What a worker's run waits out, within its lease, and drops the run for past that: the database busy (a held
# lock) or its server away (a restart). Anything else the environment does (read-only, full, damaged) stops it.
WAITED_OUT = (BUSY, UNREACHABLE)
_HELD_UP = {BUSY: "the database stayed busy", UNREACHABLE: "the database server was away"}


def worker_name() -> str:
    return f"w-{ids.token(2)}"


def standing(store: Store, run: Mapping[str, Any]) -> str:
    """What a run is now and what last happened to it, for a person who expected something else.

    What happened is often another actor's decision, as in `is cancelled: person since 10:24:31 (cancelled by
    ada)`."""
    state = run["status"] + (f": {run['reason']}" if run["reason"] else "")
    last = last_event(store.conn, run["id"])
    return f"is {state}" + (f" since {clock_time(last['at'])} ({last['message']})" if last else "")


@dataclass(frozen=True)
class Outcome:
    """How one turn of a run ended for this worker.

    `kind` says whether the run was settled, and then `settled` is its status. A turn that settled nothing is
    `refused`, the run taken by another lease or a person, or `dropped`, the database busy or its server away past
    the lease, and the run is claimable as after a crash.
    """

    run_id: str
    kind: TurnEnd
    settled: RunStatus | None
    reason: str | None
    result: Any = None
    error: str | None = None
    message: str | None = None

    @property
    def status(self) -> str:
        """The settled status, or the kind of a turn that settled nothing: the one word `run` prints."""
        return self.kind if self.settled is None else self.settled


def refused(store: Store, run_id: str, error: str) -> Outcome:
    """The outcome of a run another worker or a person took from this one: what the run is now."""
    try:
        message = standing(store, get_run(store, run_id))
    except EnvironmentStop as stop:
        if stop.kind not in WAITED_OUT:
            raise
        message = f"could not be read now ({_HELD_UP[stop.kind]})"
    return Outcome(run_id, TurnEnd.REFUSED, None, None, error=error, message=message)


def execute(store: Store, registry: Registry, *, claim: Claim, on_step: StepObserver | None = None,
            control: RunControl | None = None, clock: Clock = CLOCK) -> Outcome:
    """Work one claimed run until it ends, waits or is taken away; every write is fenced. `clock` is the run's
    time (a scenario's own clock in the simulator, so moving it never moves the process's runs and leases). A run
    whose agent or model this worker cannot set up (an agent it does not know, a script file it cannot find) is
    parked with reason `environment`, saying what is missing, never left claimed. With tracing on, the turn is a
    span of the run's trace (runtime/traces.py)."""
    turn = traces.turn(claim, clock)
    if turn is None:
        return _execute(store, registry, claim=claim, on_step=on_step, control=control, clock=clock, turn=None)
    with turn:
        return turn.outcome(_execute(store, registry, claim=claim, on_step=on_step, control=control, clock=clock,
                                     turn=turn))


def _execute(store: Store, registry: Registry, *, claim: Claim, on_step: StepObserver | None,
             control: RunControl | None, clock: Clock, turn: traces.Turn | None) -> Outcome:
    control = control or RunControl(claim.claimed_at + claim.lease_s)
    # A write that finds the database held by another program, or its server away, waits it out while the lease
    # runs and the run goes on, with the step's result kept in memory; past that, the run is dropped as a crash
    # would leave it.
    store.patience = lambda: control.holding and clock.now() < control.lease_until - claim.lease_s / 10

    ctx: Context | None = None

    def settle(status: str, reason: str, *, message: str, result: Any = None, error: str | None = None,
               wake_at: float | None = None, raised: BaseException | None = None) -> Outcome:
        inline = artifact = None
        if result is not None:
            inline = encode(result, "the run")
            if len(inline) > ARTIFACT_THRESHOLD:
                inline, artifact = place(store, run["artifact_dir"], f"result-g{claim.generation}-f{claim.fence}",
                                         inline)
        at = clock.now()
        settle_run(store, claim, status=status, reason=reason, message=message, now=at, result=inline,
                   result_artifact=artifact, error=error, wake_at=wake_at,
                   wall_s=at - (last_entry_at(ctx) if ctx else claim.claimed_at),
                   traceback=as_column(raised))
        if turn is not None:
            turn.settled(status, reason, message=message, wake_at=wake_at, raised=raised,
                         created_at=run["created_at"])
        return Outcome(claim.run_id, TurnEnd.SETTLED, RunStatus(status), reason, result, error, message)

    try:
        try:
            opened = opening(store, claim.run_id, claim.generation)
            if opened is None:
                raise RunNotFound(f"no run {claim.run_id}")
            run = opened.run
            request = read_stored(run["request"], "runs.request")
            limits = read_stored(run["budget"] or "{}", "runs.budget")
            replies = read_stored(run["script"], "runs.script") if run["script"] else None
            try:
                agent = registry.get(claim.agent)
                provider = provider_for(run["model"] or "scripted", agent.script, replies)
            except UserError as e:   # what this worker lacks for the run, not the run's failure: it waits for a person
                return settle(RunStatus.PARKED, Reason.ENVIRONMENT,
                              message=f"parked: worker {claim.worker} cannot set up "
                                      f"the run: {e}; then tui-agent resume {claim.run_id}")
            if run["code_version"] != agent.code_version:
                _note_new_code(store, claim, run, agent, clock.now())
            checkpoint = opened.checkpoint
            if checkpoint.schema_version != CHECKPOINT_SCHEMA:
                return settle(RunStatus.PARKED, Reason.CHECKPOINT_SCHEMA,
                              message=f"parked: checkpoint schema {checkpoint.schema_version}, this code writes "
                                      f"{CHECKPOINT_SCHEMA}; resume --restart starts it anew")
            used, soft_position, soft_dimensions = opened.usage()
            entries = opened.entries
        except Unreadable as e:   # written by an older version or another program: this run fails, not the worker
            return settle(RunStatus.FAILED, Reason.ERROR, message=f"failed: {e}", error=str(e))
        ctx = Context(store, claim, request=request, artifact_dir=run["artifact_dir"], checkpoint=checkpoint,
                      entries=entries, provider=provider, on_step=on_step, agent=agent, control=control,
                      budget=BudgetMeter(limits, used, soft_dimensions), soft_position=soft_position, clock=clock,
                      registry=registry, trace=turn)
        try:
            result = agent.run(ctx, ctx.request)
            encode(result, "agent", agent.name)
        except Suspend as e:
            # its message says the wait or the park; a retry's last failure (`e.error`) is kept on the run alone
            return replace(settle(e.status, e.reason, message=e.message, wake_at=e.wake_at, error=e.error), error=None)
        except CodeChanged as e:
            return settle(RunStatus.PARKED, Reason.CODE_CHANGED, message=f"parked: the code changed: {e}", error=str(e))
        except ParkRun as e:
            return settle(RunStatus.PARKED, Reason.ENVIRONMENT,
                          message=f"parked: {e}; then tui-agent resume {claim.run_id}")
        except (StepFailed, ResultNotJSON, Unreadable) as e:   # Unreadable: a recorded entry an older version wrote
            return settle(RunStatus.FAILED, Reason.ERROR, message=f"failed: {e}", error=str(e), raised=e)
        except (FenceRefused, EnvironmentStop):
            raise
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            return settle(RunStatus.FAILED, Reason.ERROR, message=f"failed: {error}", error=error, raised=e)
        if agent.check is None:
            return settle(RunStatus.SUCCEEDED, Reason.RETURNED, message="succeeded: returned (the agent has no check)",
                          result=result)
        try:
            verdict = agent.check(ctx, result)
        except Exception as e:
            error = f"the check raised {type(e).__name__}: {e}"
            return settle(RunStatus.FAILED, Reason.CHECK_FAILED, message=f"failed: {error}", result=result,
                          error=error, raised=e)
        passed, why = verdict if isinstance(verdict, tuple) else (verdict, None)
        if passed:
            return settle(RunStatus.SUCCEEDED, Reason.CHECK_PASSED, message="succeeded: check passed", result=result)
        error = f"the check did not pass: {why}" if why else "the check did not pass"
        return settle(RunStatus.FAILED, Reason.CHECK_FAILED, message=f"failed: {error}", result=result, error=error)
    except FenceRefused as e:  # a person or another worker took the run: report that, never an ending of ours
        try:
            let_go(store, claim.run_id, claim.fence, claim.worker, clock.now())  # a run held back for our send goes on
        except EnvironmentStop as stop:
            if stop.kind not in WAITED_OUT:
                raise
            # still busy, or away: a run held back for our send goes on when this process ends instead
        return refused(store, claim.run_id, str(e))
    except EnvironmentStop as e:
        if e.kind not in WAITED_OUT:
            raise  # read-only, full or damaged: this worker stops writing altogether
        return Outcome(claim.run_id, TurnEnd.DROPPED, None, None, error=str(e),
                       message=f"dropped: {_HELD_UP[e.kind]} for as long as its lease (or the worker) could wait; "
                               "the next worker to claim it repeats the step in flight")
    except SimulatedCrash:
        store.drop()
        raise
    finally:
        store.patience = no_patience


def _note_new_code(store: Store, claim: Claim, run: dict, agent, at: float) -> None:
    """A changed code version alone is shown, not refused: replay by name decides whether it still fits."""
    with store.write() as conn:
        check_fence(conn, claim.run_id, claim.fence, at, None)
        set_code_version(conn, claim.run_id, agent.code_version, agent.version)
        add_event(conn, claim.run_id, at=at, kind=EventKind.CODE_VERSION,
                  message="the agent's code changed since the last attempt"
                  f" ({run['code_version']} -> {agent.code_version}"
                  + (f", version {run['agent_version']} -> {agent.version}" if run["agent_version"] != agent.version
                     else "") + ")", worker=claim.worker, fence=claim.fence)
