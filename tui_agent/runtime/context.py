"""`Context`: what an agent's code calls. Each call is matched to the journal by position
and name; a recorded call returns its recorded result instead of running again."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..models import (
    Provider,
    Unresolved,
    cost_usd,
    estimate_prompt_tokens,
    provider_for,
)
from ..models.caching import with_cache_marks
from ..states import EntryKind, EventKind, Reason, RunStatus
from ..store import Claim, Store, artifacts, model_calls
from ..store import prune as prune_runs
from ..store.base import Connection
from ..store.journal import Checkpoint, Usage
from ..store.runs import create_run, lineage, record_model, renewal
from . import commands, loop, waits
from .agent import BUDGET_DIMENSIONS, DEFAULT_RETRY, Agent
from .budget import BudgetMeter
from .clock import CLOCK, Clock
from .commands import OUTPUT_LIMIT
from .control import RunControl
from .effects import AttemptToken, perform
from .faults import crash_point
from .journal import NO_KWARGS, UNSET, Recorder, Unset
from .live import LiveCall
from .outcomes import ACTIONS, Suspend
from .plateau import DEFAULT_PLATEAU, PlateauDetector
from .plateau import fingerprint as plateau_fingerprint
from .registry import Registry
from .results import digest
from .tools import Tool
from .traces import Turn

_MODEL_DIMENSIONS = ("model_calls", "input_tokens", "output_tokens", "cost_usd")

StepObserver = Callable[["Context", int, str, bool], None]


def shared_prefix(previous: list[dict], messages: list[dict]) -> int:
    """How many leading messages a call shares with the previous one (a conversation grows at its end)."""
    count = 0
    for old, new in zip(previous, messages):
        if old != new:
            break
        count += 1
    return count


class Context:
    """What an agent's code calls to do durable work, each call journaled so that a resumed run does not repeat it.

    A worker makes one for every claim of a run and calls the agent's `run(ctx, request)` with it. The agent's
    code runs from the start on every claim. Each journaled call takes the next position in the run's journal,
    and a position already recorded returns its recorded result without doing the work again. So the journaled
    calls must come in the same order with the same names on every pass. A call by another name at a recorded
    position parks the run with reason `code_changed`. Code between journaled calls runs again on every pass,
    so keep it cheap and free of side effects.

    The journaled calls are `step`, `model`, `agent_loop`, `effect`, `run_command`, `progress`, `failure`,
    `note`, `spent`, `sleep`, `sleep_until` and `approval`. Each must fit the run's budget before it is made.
    None of them may be called from inside a step's function, since a replay does not run that function.

    Attributes:
        run_id: The run's id.
        request: The run's request, the JSON value it was started with.
        attempt: How many times the run has been claimed, this claim included.
        generation: The journal this claim writes. A person's `resume --restart` starts a new one at position 0.
        fence: This claim's fence. The store refuses a write that carries an older one than the run's.
        worker: The name of the worker holding the run.
        clock: The run's time. It is the process's clock, or a scenario's own in the simulator.
        data_dir: The agent's own data on this machine, such as sample sources, an outbox or worktrees.
        artifact_dir: A folder for files the agent keeps for itself beside the run's artifacts. What an operator
            must read goes through `save_artifact`, which every machine can read back.
        provider: The model provider that answers `model`.
        budget: What the run has used and may still use. `ctx.budget.soft_exceeded` tells the agent to go easy,
            and `ctx.budget.remaining(dimension)` says what is left of a ceiling.
    """

    def __init__(self, store: Store, claim: Claim, *, request: Any, artifact_dir: str, checkpoint: Checkpoint,
                 entries: list[tuple], provider: Provider, on_step: StepObserver | None = None,
                 agent: Agent | None = None, control: RunControl | None = None, budget: BudgetMeter | None = None,
                 soft_position: int | None = None, clock: Clock = CLOCK, registry: Registry | None = None,
                 trace: Turn | None = None, recorder: type[Recorder] = Recorder) -> None:
        self.clock = clock  # the run's time: the process's clock, or a scenario's own (the simulator moves it)
        self._registry = registry   # the agents this worker knows: what `start_run` may start
        self.run_id = claim.run_id
        self.attempt = claim.attempt
        self.fence = claim.fence
        self.generation = claim.generation
        self.worker = claim.worker
        self.request = request
        # the agent's own data (sample sources, an outbox, worktrees): this machine's, for a server store
        self.data_dir: Path = store.data_dir
        # files the agent writes for itself beside its artifacts; what the operator must read goes through
        # save_artifact, which every machine can read back
        self.artifact_dir: Path = (artifacts.folder(store) or store.data_dir) / artifact_dir
        self.provider = provider
        self._store = store
        self._claim = claim
        self._artifact_dir = artifact_dir
        self._model_calls = 0
        self._last_messages: list[dict] = []   # the previous model call's, so a request records only what is new
        self._switched: str | None = None      # the model the degrade hook switched to
        self._on_live = getattr(on_step, "live", None)  # an observer may also show a model call's live count
        self._plateau = PlateauDetector(agent.plateau or DEFAULT_PLATEAU) if agent else None
        self._journal_inputs = agent.journal_inputs if agent else False
        self._lineage: tuple[str, ...] | None = None
        self.budget = budget or BudgetMeter({}, dict.fromkeys(BUDGET_DIMENSIONS, 0), [])
        self._journal = journal = recorder(
            store, claim, artifact_dir=artifact_dir, checkpoint=checkpoint, entries=entries, clock=clock,
            budget=self.budget, retry=(agent.retry if agent else None) or DEFAULT_RETRY,
            step_timeout=agent.step_timeout_s if agent else None, control=control, soft_position=soft_position,
            trace=trace)
        if on_step is not None:
            journal.on_step = lambda position, name, replayed: on_step(self, position, name, replayed)
        if agent is not None and agent.degrade is not None:
            journal.degrade = lambda: agent.degrade(self)

    @property
    def position(self) -> int:
        """The position the next journaled call will take."""
        return self._journal.position

    @property
    def replaying(self) -> bool:
        """True while the next journaled call is answered from the journal instead of being made."""
        return self._journal.replaying

    @property
    def total_steps(self) -> int | None:
        """The run's expected length, as `plan` last declared it, or None when it never did."""
        return self._journal.checkpoint.total_steps

    @property
    def lineage(self) -> tuple[str, ...]:
        """This run's id, then the run it was forked from, then that one's parent, and so on.

        A fork replays its parent's recorded work, so what those runs made is this run's own too, such as a
        commit marked with one of their ids.
        """
        if self._lineage is None:
            self._lineage = lineage(self._store, self.run_id)
        return self._lineage

    def plan(self, total_steps: int | None = None, revision: int | None = None, next_input: Any = UNSET) -> None:
        """Declare the run's expected length, plan revision or next input, saved with the next journaled call.

        It journals nothing by itself. An argument left out keeps its value.

        Args:
            total_steps: How many journaled calls the run expects to make. The gauges forecast its end from it.
            revision: The number of the plan the run now follows, for an agent that revises its plan.
            next_input: Any JSON value saying what the run will do next, shown with its checkpoint by
                `tui-agent show --json`. A `"tasks": [done, total]` in it is shown by the runs list.
        """
        self._journal.plan(total_steps, revision, next_input)

    # -- what agents call ----------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` once and journal its result, which a resumed run then returns instead.

        A temporary error is retried by the agent's retry policy. `ParkRun` parks the run, and any other
        exception fails the step, and with it the run. An attempt still running after the agent's `step_timeout_s`
        counts as failed with `StepTimedOut`, and the run is handed back to be retried.
        `ctx.within(seconds).step(...)` gives one step its own deadline. `fn` must not make journaled calls itself.

        Args:
            name: The step's name in the journal. A replay matches it by position and by this name.
            fn: The function to run.
            *args: Passed to `fn`.
            **kwargs: Passed to `fn`.

        Returns:
            What `fn` returned, as it comes back from JSON. A value that is not JSON fails the run.
        """
        return self._step(name, fn, args, kwargs, UNSET)

    def within(self, timeout_s: float | None) -> Within:
        """Give the next step its own deadline in place of the agent's `step_timeout_s`.

        The deadline is kept apart from the keyword arguments `step` passes on, so
        `ctx.within(600).step("build", build, tree, timeout=5)` gives the step ten minutes and `build` its own
        `timeout=5`.

        Args:
            timeout_s: The step's deadline in seconds. None means no deadline.

        Returns:
            An object whose `step` is `Context.step` with that deadline.
        """
        return Within(self, timeout_s)

    def _step(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: Mapping[str, Any],
              timeout_s: float | None | Unset) -> Any:
        journal = self._journal
        position, recorded, value = journal.next(name)
        if recorded:
            return value
        crash_point("before-step", name)
        inputs = digest(args, kwargs) if self._journal_inputs else None   # before `fn` may change them
        journal.inside = name
        try:
            value, attempts, started_at, duration = journal.attempt(position, name, call=fn, args=args, kwargs=kwargs,
                                                                    timeout_s=timeout_s)
        finally:
            journal.inside = None
        crash_point("after-step", name)
        value = journal.record(position, name, kind=EntryKind.STEP, value=value, started_at=started_at,
                               duration_s=duration, attempts=attempts, inputs=inputs)
        crash_point("after-step-commit", name)
        return value

    def model(self, name: str, *, messages: list[dict], max_tokens: int, model: str | None = None,
              system: str | None = None, tools: list[dict] | None = None, cache: bool = False,
              timeout_s: float | None | Unset = UNSET) -> dict:
        """Ask the run's model for one reply, journaled with its usage and cost, so a resumed run never asks again.

        Each attempt is committed before its request is sent, and holds its worst case against the budget. A
        worker that dies mid-call leaves the call in flight, possibly billed, and the retry reserves anew. A
        temporary error is retried by the agent's retry policy. The model asked is, highest first, the one the
        `degrade` hook switched to, the run's own `anthropic:MODEL_ID`, `model`, and the provider's default. A
        run started with `--model default` chooses at its first new model call. Claude is chosen when the
        worker has `ANTHROPIC_API_KEY`, else the agent's `script`, and with neither the run is parked.

        Args:
            name: The call's name in the journal.
            messages: The conversation, as the Messages API takes it.
            max_tokens: The most output tokens the reply may have. The budget reserves them before the call.
            model: The model to ask, when nothing above it decides.
            system: The system prompt.
            tools: Tool definitions, as the Messages API takes them. `agent_loop` makes them from `@tool`s.
            cache: Mark the tools, the system prompt and the newest turn as prompt-cache breakpoints.
            timeout_s: How long an attempt may wait for its reply before it counts as failed. The default is
                the agent's `step_timeout_s`, and None means no deadline.

        Returns:
            The reply in the Messages API's shape, with its `content`, `model`, `stop_reason` and `usage`.
        """
        if not self.replaying and isinstance(self.provider, Unresolved):
            self._resolve_default(self.provider)
        chosen = self._model_id(model)
        reserved = self._reservation(chosen, system, messages, tools, max_tokens)
        journal = self._journal
        position, recorded, value = journal.next(name, **self._needs(reserved))
        call_index = self._model_calls
        self._model_calls += 1
        previous, self._last_messages = self._last_messages, list(messages)
        if recorded:
            return value
        assert reserved is not None   # None only for a call the journal answers, returned above
        missing = getattr(self.provider, "missing", lambda worker: None)(self.worker)
        if missing:  # not the model's failure: the run waits, parked, for a worker that has what it needs
            raise Suspend(RunStatus.PARKED, Reason.ENVIRONMENT, missing)
        request = {"max_tokens": max_tokens, "system": system, "tools": tools, "messages": messages,
                   "after": shared_prefix(previous, messages)}
        keys: list[model_calls.CallKey] = []
        sent_system, sent_tools, sent_messages = with_cache_marks(system, tools, messages) if cache else (
            system, tools, messages)

        def call() -> dict:
            at = self.clock.now()
            renew = renewal(self._store.conn, self.run_id, self.fence, at, at + self._claim.lease_s)
            keys.append(model_calls.begin(self._store, self.run_id, generation=self.generation, position=position,
                                          name=name, fence=self.fence, provider=self.provider.name.partition(":")[0],
                                          model=chosen, request=request, reserved=reserved, now=at, renewal=renew,
                                          last_call=keys[-1].call if keys else 0))
            journal.renewed(at)
            self.budget.hold(reserved)
            crash_point("in-model-call", name)
            live = LiveCall(self._store, keys[-1], self._live_observer(name), self.clock)
            try:
                return self.provider.create(model=chosen, messages=sent_messages, max_tokens=max_tokens,
                                            system=sent_system, tools=sent_tools, call_index=call_index,
                                            on_tokens=live)
            finally:
                live.close()

        def failed(conn: Connection, error: Exception) -> None:
            model_calls.failed(conn, keys[-1], reserved, f"{type(error).__name__}: {error}", self.clock.now())
            self.budget.hold(reserved, -1)

        reply, attempts, started_at, duration = journal.attempt(position, name, call=call, failed=failed,
                                                                    timeout_s=timeout_s)
        usage = reply.get("usage") or {}
        cost = cost_usd(reply.get("model", ""), usage)
        used = model_calls.Spent.of(usage)
        spent = Usage(input_tokens=used.input_tokens - reserved.input_tokens,  # what it used, in place of its hold
                      output_tokens=used.output_tokens - reserved.output_tokens,
                      cost_usd=(cost or 0.0) - reserved.cost_usd, unpriced_calls=int(cost is None),
                      cache_read_tokens=used.cache_read_tokens, cache_write_tokens=used.cache_write_tokens)
        value = journal.record(position, name, kind=EntryKind.MODEL, value=reply, started_at=started_at,
                               duration_s=duration, usage=spent, cost=cost, attempts=attempts,
                               also=lambda conn: model_calls.answered(
                                   conn, keys[-1], spent=used, cost_usd=cost, request_id=reply.get("_request_id"),
                                   now=self.clock.now()),
                               detail={"provider": self.provider.name.partition(":")[0], "model": chosen})
        crash_point("after-model-commit", name)
        return value

    def agent_loop(self, name: str, *, messages: list[dict], tools: Sequence[Tool] = (), system: str | None = None,
                   model: str | None = None, max_tokens: int = 4096, max_turns: int = 20,
                   check: loop.Check | None = None) -> dict:
        """Let the model call `tools` until it ends its turn and `check` passes, each turn and result journaled.

        Each turn is a journaled model call, named `NAME/turn N`, with the tools, the system prompt and the
        newest turn marked for the prompt cache. Each tool result is a journaled entry, named `NAME/TOOL`. So a
        resumed run goes on from the last one recorded, without asking the model or running a tool again. A
        tool that raises, or input that does not fit its schema, goes back to the model as an error result and
        is reported with `failure`, so the plateau detector sees the same failure repeating. A tool made with
        `effect=True` goes through the effect ledger first, as `effect` does.

        Args:
            name: The loop's name, the prefix of its journal entries.
            messages: The conversation so far, usually one user message with the task.
            tools: The `@tool` functions the model may call. Each must be a distinct `Tool`.
            system: The system prompt.
            model: The model to ask, as in `model`.
            max_tokens: The most output tokens of each turn.
            max_turns: The most turns before the loop stops without the model finishing.
            check: Called as `check(ctx, messages)` when the model ends its turn. It returns passed, or a pair
                of passed and why, or a triple of passed, why and a measure. Its verdict is journaled as
                `NAME/check N`, a measure is reported with `progress`, and a failed check gives the model one
                more user turn that says why. It must not make journaled calls itself.

        Returns:
            A dict with the `final` reply, the whole `messages` conversation, and why it `stopped`, which is
            `end_turn`, `check_passed` or `max_turns`. It also counts the `turns`, `tool_calls`, `cost_usd` and
            `unpriced_turns`.
        """
        return loop.agent_loop(self, self._journal, name=name, system=system, tools=loop.checked_tools(tools),
                               messages=messages, model=model, max_tokens=max_tokens, max_turns=max_turns, check=check)

    def switch_model(self, model_id: str) -> None:
        """Make every later model call of this run ask `model_id`, usually a cheaper model.

        Call it from the agent's `degrade` hook. The switch wins over the run's own model and a call's `model=`.
        The hook runs at the same position on a replay, so the switch does too.

        Args:
            model_id: The model to ask from now on, such as `claude-haiku-4-5`.
        """
        self._switched = model_id

    def _live_observer(self, name: str) -> Callable[[int, float], None] | None:
        on_live = self._on_live
        if on_live is None:
            return None
        label = self.provider.name.partition(":")[0]
        return lambda tokens, elapsed: on_live(self, name, label, tokens, elapsed)

    def _resolve_default(self, unresolved: Unresolved) -> None:
        """Resolve `--model default` at the run's first new model call. The run's provider is then `unresolved`: this
        worker's environment decides, and the choice is recorded on the run; with neither a key nor a built-in script
        the run waits, parked."""
        spec = unresolved.resolve()
        if spec is None:
            raise Suspend(RunStatus.PARKED, Reason.ENVIRONMENT,
                          f"--model default: worker {self.worker} has no ANTHROPIC_API_KEY and {self._claim.agent} "
                          "has no built-in script; set ANTHROPIC_API_KEY, or start it with --model scripted:FILE")
        with self._journal.write() as conn:
            record_model(conn, self.run_id, self.fence, spec)
            self._journal.event(conn, EventKind.MODEL, f"--model default resolved to {spec}")
        self.provider = provider_for(spec, unresolved.script)

    def _model_id(self, model: str | None) -> str:
        """The model of a call, highest first: the degrade hook's switch, the run's `anthropic:MODEL_ID`, the
        agent's `model=`, the provider's default. One rule for the reservation and the call, so what is
        priced is what is sent."""
        pinned: str | None = getattr(self.provider, "pinned", None)
        default: str = getattr(self.provider, "model", "")
        return self._switched or pinned or model or default

    def _reservation(self, model_id: str, system: str | None, messages: list[dict], tools: list[dict] | None,
                     max_tokens: int) -> Usage | None:
        """A new model call's worst case (None on a replay): the prompt estimate and `max_tokens` at the
        model's price. A cost ceiling the agent or a person set cannot be kept for a model without a price, so
        that is refused; the default cost ceiling counts priced calls only, and an unpriced call is bounded by
        the input-token ceiling (a default one too) instead."""
        if self.replaying:
            return None
        tokens = estimate_prompt_tokens(system, messages, tools)
        cost = cost_usd(model_id, {"input_tokens": tokens, "output_tokens": max_tokens})
        if cost is None and self.budget.limits["cost_usd"] is not None and "cost_usd" not in self.budget.defaults:
            self.budget.refuse("cost_usd", f"model {model_id!r} has no price, so a cost ceiling cannot be kept")
        return Usage(model_calls=1, input_tokens=tokens, output_tokens=max_tokens, cost_usd=cost or 0.0,
                     unpriced_calls=int(cost is None))

    def _needs(self, reserved: Usage | None) -> dict:
        """What a new model call must fit under the hard ceilings before it is made."""
        if reserved is None or not any(self.budget.limits[d] is not None for d in _MODEL_DIMENSIONS):
            return {}
        return {"model_calls": 1, "input_tokens": reserved.input_tokens, "output_tokens": reserved.output_tokens,
                "cost_usd": reserved.cost_usd}

    def start_run(self, agent: str, request: Any, key: str | None = None, model: str = "default") -> list:
        """Queue a run of another agent, once per key when a key is given.

        Call it from a step, as in `ctx.step("start:x", ctx.start_run, "patch", {...}, key=...)`, so a replay
        does not start it again. The key makes the step safe to repeat after a crash, since a second call with
        the same key returns the first run.

        Args:
            agent: The name of an agent this worker knows.
            request: The new run's request, a JSON value.
            key: The run key. None starts a new run on every call.
            model: The new run's model, as `tui-agent run --model` takes it.

        Returns:
            The new run's id and whether this call created it, as a two-item list.

        Raises:
            UserError: The agent is unknown, or the request or model cannot start a run.
        """
        if self._registry is None:
            raise RuntimeError("start_run needs the worker's registry")
        run_id, created = create_run(self._store, now=self.clock.now(), run_key=key,
                                     **self._registry.run_fields(agent, request, model))
        return [run_id, created]

    def prune(self, older_than_s: float, statuses: list[str], keep_last: int | None = None) -> dict:
        """Remove the ended runs that `tui-agent prune` would remove, as the built-in agent `prune` does.

        It makes the same choice as the command, in the same batches, and keeps the same run keys. Call it from
        a step, so a replay does not prune again. Repeating it after a crash finishes what the first call began.

        Args:
            older_than_s: Remove runs that ended more than this many seconds ago.
            statuses: The ended statuses to remove, such as `succeeded` and `cancelled`.
            keep_last: Keep this many of the newest runs of each agent among those statuses. None keeps none
                back.

        Returns:
            A dict of what was `removed`, counted by status, and what was `kept`, counted by why, such as
            `newest` or `doubt`. It also says how many run keys were kept (`kept_keys`) and the `artifact_bytes`
            freed.
        """
        chosen = prune_runs.plan(self._store, statuses, self.clock.now() - older_than_s, keep_last)
        done = prune_runs.remove(self._store, chosen, self.clock.now())
        return {"removed": dict(done.removed), "kept": dict(chosen.kept + done.stayed), "kept_keys": done.keys,
                "artifact_bytes": done.artifact_bytes}

    def save_artifact(self, name: str, text: str) -> str:
        """Keep a file meant for the operator, such as a report, durably with the run's artifacts.

        It is not journaled, so call it from a step, whose result is then the returned name.

        Args:
            name: The file's name inside the run's artifact folder.
            text: The file's contents.

        Returns:
            Where the file is, as `tui-agent show` prints it and `tui-agent artifact` and `read_artifact` take
            it. That is a path, or `artifact:PATH` when the database holds it.
        """
        return artifacts.save(self._store, f"{self._artifact_dir}/{name}", text.encode("utf-8"))

    def read_artifact(self, where: str) -> str:
        """Return the text `save_artifact` kept, from any machine.

        Args:
            where: What `save_artifact` returned.

        Raises:
            FileNotFoundError: Nothing is kept there.
        """
        return artifacts.read(self._store, where).decode("utf-8")

    def event(self, message: str) -> None:
        """Add a line to the run's events, which `tui-agent show` and the TUI's run screen list.

        It says what the agent noticed or did outside its journal, such as a check it makes on every claim. It is
        not journaled, so a replay that passes the same call adds the line again. Use `note` for a line said
        once. The write is fenced, so a worker that lost the run cannot add it.

        Args:
            message: The line.
        """
        with self._journal.write() as conn:
            self._journal.event(conn, EventKind.AGENT, message)

    def progress(self, value: Any) -> None:
        """Report how far the run has come, journaled, so that the same value reported too often is a plateau.

        The same value `Plateau.repeats` times in a row is a plateau, and the run then does what the plateau's
        `action` says. An agent without a `plateau` of its own gets 5 in a row, then waits for a person. A
        resumed run rebuilds the streak by replay and counts on.

        Args:
            value: The run's measure, such as the tests passing or the files done. Any JSON value.
        """
        self._report(EntryKind.PROGRESS, value, lambda detector: detector.progress(value))

    def failure(self, error: BaseException | str, fingerprint: str | None = None) -> None:
        """Report a failure the run handled and goes on after, journaled, so that one repeating is a plateau.

        The same fingerprint `Plateau.failures` times in a row is a plateau. An agent without a `plateau` of its
        own gets 3 in a row, then waits for a person. Retries of temporary errors are not failures.

        Args:
            error: The exception, or a line that describes the failure.
            fingerprint: What makes two failures the same. By default it is the exception's type and message
                with the digits removed, so "timeout after 31s" and "timeout after 45s" are one failure.
        """
        print_ = fingerprint or plateau_fingerprint(error)
        self._report(EntryKind.FAILURE, {"fingerprint": print_, "error": str(error)},
                     lambda detector: detector.failure(print_))

    def spent(self, name: str, *, model_calls: int, cost_usd: float | None, unpriced_calls: int = 0) -> None:
        """Journal what a program spent that tui-agent cannot see itself, counted against the budget once.

        A command-line coding agent's model calls, as it reported them, are the example. They count as a model
        call's usage does, and a replay passes them without counting again.

        Args:
            name: The entry's name in the journal.
            model_calls: How many model calls the program made.
            cost_usd: What they cost in all. None means nothing was reported, so every call counts as unpriced.
            unpriced_calls: How many more calls had no price.
        """
        position, recorded, _ = self._journal.next(name)
        if recorded:
            return
        unpriced = model_calls if cost_usd is None else unpriced_calls
        self._journal.record(position, name, kind=EntryKind.STEP,
                             value={"model_calls": model_calls, "cost_usd": cost_usd, "unpriced_calls": unpriced},
                             started_at=self.clock.now(), duration_s=0.0,
                             usage=Usage(model_calls=model_calls, cost_usd=cost_usd or 0.0, unpriced_calls=unpriced),
                             cost=cost_usd)

    def note(self, name: str, message: str) -> None:
        """Add `message` to the run's events once, journaled, so that a replay passes it silently.

        It is journaled as a step named `name` with its event, of kind `note`, in the same commit. `tui-agent
        show` and the TUI's run screen list it.

        Args:
            name: The entry's name in the journal.
            message: The line.
        """
        position, recorded, _ = self._journal.next(name)
        if not recorded:
            at = self.clock.now()
            self._journal.record(position, name, kind=EntryKind.STEP, value=message, started_at=at, duration_s=0.0,
                                 also=lambda conn: self._journal.event(conn, EventKind.NOTE, message, at))

    def _report(self, kind: EntryKind, value: Any, feed: Callable[[PlateauDetector], str | None]) -> None:
        name = kind.value   # the entry's name is its kind's, a plain string as a recorded name is
        position, recorded, _ = self._journal.next(name)
        if not recorded:
            self._journal.record(position, name, kind=kind, value=value, started_at=self.clock.now(), duration_s=0.0)
        detector = self._plateau
        if detector is None:
            return
        found = feed(detector)
        if found and not recorded:  # a replay passes the same point again, only rebuilding the streaks
            action = detector.plateau.action
            raise Suspend(ACTIONS[action], Reason.PLATEAU, f"plateau: {found} ({action})")

    def sleep(self, name: str, seconds: float) -> None:
        """Wait `seconds` durably, with no process kept alive, after which any worker wakes the run.

        The wake time is journaled on the first pass. Until it comes, the run is `waiting` with reason `sleep`
        and no worker holds it.

        Args:
            name: The wait's name in the journal.
            seconds: How long to wait, counted from the first pass.
        """
        waits.sleep(self._journal, name, seconds)

    def sleep_until(self, name: str, when: float | str | datetime) -> None:
        """Wait durably until the instant `when`, with no process kept alive, as `sleep` does.

        Args:
            name: The wait's name in the journal.
            when: Epoch seconds, an ISO-8601 instant or a datetime. A naive one is taken as UTC.
        """
        waits.sleep_until(self._journal, name, when)

    def approval(self, name: str, question: str, on_deny: str = "cancel") -> dict:
        """Wait durably for a person to approve or deny, and return the decision, which is journaled.

        The run waits with reason `approval` and no worker holds it, until a person answers with
        `tui-agent approve RUN [--deny] [--note TEXT]` or in the TUI.

        Args:
            name: The question's name in the journal.
            question: What the person is asked, shown with the waiting run.
            on_deny: `cancel` ends the run `cancelled` with reason `denied`. `return` hands the denial back.
                Any other value raises ValueError.

        Returns:
            The decision, a dict of `approved`, the person's `note`, who decided (`by`) and when (`at`).
        """
        return waits.approval(self._journal, name, question, on_deny)

    def effect(self, name: str, *, key: str, do: Callable[[str], Any] | Callable[[str, AttemptToken], Any],
               lookup: Callable[[str], Any] | None = None,
               dedupe_ttl_s: float | None = None, lookup_ttl_s: float | None = None,
               service: str | None = None, timeout_s: float | None | Unset = UNSET) -> Any:
        """Change the world outside the run at most once per key, through the effect ledger.

        The effect is recorded `intended` with its key before the first attempt and `attempted` before `do` is
        called, and the fence is read again just before. A key confirmed anywhere in the database is never done
        again, and the call returns that result. An attempt whose outcome nobody saw is `unknown`. It is never
        simply sent again but reconciled, by `lookup`, by a resend the service will ignore, or by a person with
        `tui-agent reconcile`. What `do` raises decides what follows:

        - `EffectNotDone` says the service did nothing, so the retry policy may send again with the same key.
        - `EffectDeclined` says nothing was done this time, and `effect` returns its outcome.
        - `ParkRun` says the service did nothing until a person fixes what the message names. The run parks,
          and `resume` attempts it again with the same key.
        - `StaleAttempt` says the service has seen a newer token from this run. This worker then stops.
        - Any other exception leaves the outcome unknown, and it is reconciled.

        What holds against a crash, and against a worker paused past its lease that wakes after a takeover,
        depends on what the service offers. A service that deduplicates, inside its `dedupe_ttl_s`, delivers
        once either way, since a resend or a late send carries the same key. With a lookup only, the lookup
        tells after a crash, inside `lookup_ttl_s`. After a pause, the run waits while the attempting worker's
        process lives and has not let go, so there is one delivery unless a person answers "not done"
        meanwhile, and they are warned. With neither, a person decides. A woken worker is refused past the
        fence's second reading only by a service that records tokens.

        Args:
            name: The effect's name in the journal and in `tui-agent reconcile`.
            key: The idempotency key, built from what the effect means, such as `report:2026-12-01:team-a`.
            do: Does it, called as `do(key)` or `do(key, token)`. A second positional parameter receives the
                attempt's `AttemptToken`, so a service that records tokens can refuse an older attempt. What it
                returns is the effect's result, which must be JSON.
            lookup: Asks the service whether the key was done, called as `lookup(key)`. It returns the result
                when it was, and None when the service has no record of it.
            dedupe_ttl_s: How long the service ignores a second send with the same key. None means it does not.
            lookup_ttl_s: How long `lookup` can tell. Past it, the service's silence proves nothing. None means
                always.
            service: The service's name, kept with the effect.
            timeout_s: How long `do` may run. One still running then is never retried. Its outcome is `unknown`,
                and the run's next claim reconciles it as after a crash. The default is the agent's
                `step_timeout_s`, and None means no deadline.

        Returns:
            What `do` returned, or the recorded result, or the declined outcome.
        """
        journal = self._journal
        return perform(journal, name, key=key, do=do, lookup=lookup, dedupe_ttl_s=dedupe_ttl_s,
                       lookup_ttl_s=lookup_ttl_s, service=service,
                       timeout_s=journal.step_timeout if timeout_s is UNSET else timeout_s)

    def run_command(self, name: str, argv: Sequence[str], *, cwd: str | Path | None, stdin: str | bytes | None = None,
                    env: Mapping[str, str] | None = None, timeout_s: float | None,
                    output_limit: int = OUTPUT_LIMIT) -> dict:
        """Run a program as a journaled step, without a shell, and kill all of it when the step must stop.

        The program runs in a process group of its own. The group and its start time are recorded before the
        program runs, so the next claim after a worker died kills what is left of it. The whole group is killed
        past `timeout_s`, and the attempt then fails with `StepTimedOut`, a temporary error the retry policy
        sees. It is killed too when the run is taken away, parked, cancelled or handed back. A replay returns
        the recorded result without running the program. The exit code is not judged, so the caller decides
        what a non-zero exit means.

        Args:
            name: The step's name in the journal.
            argv: The program and its arguments, passed as they are.
            cwd: The folder to run it in. None means the worker's.
            stdin: The program's standard input. None gives it an empty one.
            env: Variables laid over the worker's environment.
            timeout_s: How long the program may run. None means no limit.
            output_limit: How many of the last bytes of stdout and of stderr the entry keeps.

        Returns:
            A dict of the `argv`, the names `env` set but never their values, the `exit` code, which is negative
            for the signal that ended it, the `duration_s`, the last bytes of `stdout` and `stderr` as text, and
            where the whole of each is kept (`stdout_artifact`, `stderr_artifact`).
        """
        return self._step(name, run_program, (self, name, list(argv), cwd, stdin, env, timeout_s, output_limit),
                          NO_KWARGS, None)   # its own timeout kills the program: no deadline on top of it


def run_program(ctx: Context, name: str, argv: list[str], cwd: str | Path | None, stdin: str | bytes | None,
                env: Mapping[str, str] | None, timeout_s: float | None, output_limit: int) -> dict:
    """Run a program inside the journaled call in progress, as `run_command` does, without journaling it.

    Its arguments stay positional: `run_command` journals a step of this function with them as its argument
    tuple, which agents with `journal_inputs` digest as it is.

    A built-in agent whose effect's `do` runs a program calls it (agents/harness.py); the caller records what
    it returns.
    """
    return commands.run(ctx._journal, ctx.artifact_dir, name=name, argv=argv, cwd=cwd, stdin=stdin, env=env,
                        timeout_s=timeout_s, output_limit=output_limit)


def last_entry_at(ctx: Context) -> float:
    """When the claim's last journal entry was committed, or the run claimed: where its running time counts from."""
    return ctx._journal.last_at


def asking(ctx: Context, model: str | None) -> tuple[str, list[dict]]:
    """The model a call with `model=` asks now, and the previous model call's messages: what a replay compares."""
    return ctx._model_id(model), ctx._last_messages


def programs_started(ctx: Context, position: int, name: str) -> int:
    """How many programs named `name` were started inside the journaled call at `position`, a dead worker's too."""
    return commands.started(ctx._journal, position, name)


class Within:
    """What `ctx.within(seconds)` returns, whose calls have that deadline in place of the agent's."""

    __slots__ = ("_ctx", "_timeout_s")

    def __init__(self, ctx: Context, timeout_s: float | None) -> None:
        self._ctx, self._timeout_s = ctx, timeout_s

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` as `Context.step` does, with this deadline."""
        return self._ctx._step(name, fn, args, kwargs, self._timeout_s)
