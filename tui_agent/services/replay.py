"""Replay: a recorded run used as a cassette for the agent's current code.

Every journaled call is answered from the journal and nothing is executed; the first call it cannot answer
stops the replay. The database is opened query-only, but the agent's code runs in the caller's thread, so
`tui-agent replay` runs this on a copy (replay_copy.py). Why: docs/architecture.md, section 6.1a.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import ParkRun, UserError
from ..models import provider_for
from ..models.scripted import ScriptedProvider
from ..runtime.clock import now
from ..runtime.context import Context, asking, shared_prefix
from ..runtime.journal import UNSET, Recorder, Unset
from ..runtime.outcomes import CodeChanged, Suspend
from ..runtime.registry import Registry
from ..runtime.results import decode, digest
from ..states import TERMINAL, RunStatus
from ..store import Store, model_calls, open_store
from ..store.journal import Checkpoint, load_checkpoint, load_entries, recorded_inputs
from ..store.runs import Claim, get_run, last_finished, resolve_run

# What a divergence can be: the code calls another name at a position; makes a call the recorded run never
# made; sends a model another request; calls a step with other arguments; ends otherwise (another result,
# another error, a different ending); or tries a side effect outside a journaled call.
KINDS = ("name", "new-call", "model-request", "inputs", "result", "ending", "side-effect")
DIFF_LINES = 14   # a compact diff: enough to see what changed, short enough for one screen of a CI log


@dataclass(frozen=True)
class Divergence:
    """Where and how the agent's current code stopped matching its recorded run.

    Attributes:
        position: The journal position at which it diverged.
        kind: One of `name`, `new-call`, `model-request`, `inputs`, `result`, `ending` and `side-effect`.
        recorded: The name the journal holds at `position`, or None past its end.
        name: What the code called there, or None when it returned or raised.
        message: What differs, in one line.
        diff: A short diff of the recorded and the new value, when there is one.
    """

    position: int
    kind: str
    recorded: str | None   # the name the journal holds at `position` (None past its end)
    name: str | None       # what the code called there (None when it returned or raised)
    message: str
    diff: tuple[str, ...] = ()


@dataclass(frozen=True)
class Replay:
    """What replaying a recorded run against the current code found.

    Attributes:
        run_id: The run replayed.
        agent: Its agent's name.
        status: The recorded run's status.
        entries: How many journal entries the run recorded.
        answered: How many calls the journal answered before the replay ended.
        note: How it ended, in one line.
        divergence: Where the code stopped matching the run, or None when it reproduced it.
    """

    run_id: str
    agent: str
    status: str            # the recorded run's
    entries: int           # journal entries the run recorded
    answered: int          # calls the journal answered before the replay ended
    note: str              # how it ended, one line
    divergence: Divergence | None = None

    @property
    def reproduced(self) -> bool:
        """True when the current code made the recorded calls and ended as the run did."""
        return self.divergence is None

    def to_json(self) -> dict:
        """Return the replay as `tui-agent replay --json` prints it."""
        shown = asdict(self)
        shown["reproduced"] = self.reproduced
        if self.divergence is not None:
            shown["divergence"]["diff"] = list(self.divergence.diff)
        return shown


class _Stop(BaseException):
    """Ends the replay at a call (a BaseException, so an agent's `except Exception` cannot swallow it)."""

    def __init__(self, position: int, name: str | None, divergence: Divergence | None = None) -> None:
        super().__init__(name)
        self.position, self.name, self.divergence = position, name, divergence


class _Tape(Recorder):
    """A recorder that answers every call from the journal; a call it cannot answer stops the replay."""

    def next(self, name: str, **needs: float) -> tuple[int, bool, Any]:
        position = self.position
        if position >= len(self.entries):
            raise _Stop(position, name)
        try:
            return super().next(name, **needs)
        except CodeChanged:
            recorded = self.entries[position][1]
            raise _Stop(position, name, Divergence(
                position, "name", recorded, name,
                f"#{position}: the journal holds {recorded!r} here, the code now calls {name!r}")) from None


class _Cassette(Context):
    """A Context whose journal is a `_Tape`, which also compares a step's arguments and a model call's request
    with what the run recorded."""

    def __init__(self, store: Store, claim: Claim, *, request: Any, artifact_dir: str, checkpoint: Checkpoint,
                 entries: list[tuple], provider: Any, agent: Any, registry: Registry, check_inputs: bool) -> None:
        super().__init__(store, claim, request=request, artifact_dir=artifact_dir, checkpoint=checkpoint,
                         entries=entries, provider=provider, agent=agent, registry=registry, recorder=_Tape)
        self._db, self._names, self._check_inputs = store, [entry[1] for entry in entries], check_inputs

    def _recorded_name(self, position: int) -> str | None:
        return self._names[position] if position < len(self._names) else None

    def event(self, message: str) -> None:
        """Nothing: a replay writes no event (the database is opened query-only)."""

    def step(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        position = self.position
        if self._check_inputs and self._recorded_name(position) == name:
            recorded = recorded_inputs(self._db, self.run_id, self.generation, position)
            if recorded is not None and recorded != digest(args, kwargs):
                raise _Stop(position, name, Divergence(
                    position, "inputs", name, name,
                    f"#{position} {name}: called with other arguments than the run recorded (digest {recorded}, "
                    f"now {digest(args, kwargs)})"))
        return super().step(name, fn, *args, **kwargs)

    def model(self, name: str, *, messages: list[dict], max_tokens: int, model: str | None = None,
              system: str | None = None, tools: list[dict] | None = None, cache: bool = False,
              timeout_s: float | None | Unset = UNSET) -> dict:
        position = self.position
        if self._recorded_name(position) == name:
            recorded = model_calls.answered_request(self._db, self.run_id, self.generation, position)
            if recorded is not None:
                chosen, previous = asking(self, model)
                diff = self._request_diff(recorded, chosen, previous=previous, max_tokens=max_tokens, system=system,
                                          tools=tools, messages=messages)
                if diff:
                    raise _Stop(position, name, Divergence(
                        position, "model-request", name, name,
                        f"#{position} {name}: the model is asked something else than the run recorded", diff))
        return super().model(name, messages=messages, max_tokens=max_tokens, model=model, system=system,
                             tools=tools, cache=cache, timeout_s=timeout_s)

    def _request_diff(self, recorded: dict, model_id: str, *, previous: list[dict], max_tokens: int, system: Any,
                      tools: Any, messages: list[dict]) -> tuple[str, ...]:
        """The fields that differ from the recorded request, compactly. The calls before this one matched,
        so the recorded messages are the previous call's first `after` and the ones it added."""
        lines: list[str] = []
        for field, was, is_now in (("model", recorded["model"], model_id),
                                   ("max_tokens", recorded["max_tokens"], max_tokens)):
            if was != is_now:
                lines.append(f"{field}: recorded {was!r}, now {is_now!r}")
        for field, value in (("system", system), ("tools", tools)):
            if recorded[field] != model_calls.part_digest(value):
                lines += _text_diff(field, model_calls.part(self._db, self.run_id, recorded[field]), value)
        was = _normal(previous[:recorded["after"]] + recorded["messages"])
        is_now = _normal(messages)
        if was != is_now:
            lines += _messages_diff(was, is_now)
        return tuple(lines)

    def start_run(self, agent: str, request: Any, key: str | None = None, model: str = "default") -> list:
        raise _Stop(self.position, None, Divergence(
            self.position, "side-effect", None, None,
            f"the code starts a run of {agent!r} outside a step; a replay cannot answer that from the journal"))


def _normal(value: Any) -> Any:
    """As the journal holds it (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _lines(value: Any) -> list[str]:
    if value is None:
        return []
    return value.splitlines() if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True,
                                                                       ensure_ascii=False).splitlines()


def _text_diff(field: str, was: Any, is_now: Any) -> list[str]:
    body = list(difflib.unified_diff(_lines(was), _lines(is_now), f"{field} (recorded)", f"{field} (now)",
                                     n=1, lineterm=""))
    return body[:DIFF_LINES] + ([f"... {len(body) - DIFF_LINES} more lines"] if len(body) > DIFF_LINES else [])


def _short(value: Any, width: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width - 3] + "..."


def _messages_diff(was: list, is_now: list) -> list[str]:
    first = shared_prefix(was, is_now)
    lines = [f"messages: the first {first} agree; recorded {len(was)}, now {len(is_now)}"]
    if first < len(was):
        lines.append(f"- [{first}] {was[first].get('role', '?')}: {_short(was[first].get('content'))}")
    if first < len(is_now):
        lines.append(f"+ [{first}] {is_now[first].get('role', '?')}: {_short(is_now[first].get('content'))}")
    return lines


def _provider(run: Mapping[str, Any], agent) -> Any:
    """The run's provider, for the model id it pins; it is never asked (a file script may be gone)."""
    spec = run["model"] or "scripted"
    try:
        return provider_for(spec, agent.script)
    except UserError:
        return ScriptedProvider(agent.script, name=spec)


def _recorded_result(store: Store, run: Mapping[str, Any]) -> Any:
    return decode(store, run["result"], run["result_artifact"])


def _ending(store: Store, run: Mapping[str, Any], *, position: int, result: Any = None,
            raised: BaseException | None = None, suspended: Suspend | None = None) -> tuple[str, Divergence | None]:
    """How the code ended against how the run ended."""
    status, recorded_error = run["status"], run["error"]
    if raised is not None:
        error = f"{type(raised).__name__}: {raised}"
        if status == RunStatus.FAILED and recorded_error == error:
            return f"the code raised {error}, as the run did", None
        return "", Divergence(position, "ending", None, None, f"the code raised {error}; the run ended {status}"
                              + (f" ({recorded_error})" if recorded_error else ""))
    if suspended is not None:
        if status == suspended.status:
            return f"the code stopped {suspended.status} ({suspended.message}), as the run did", None
        return "", Divergence(position, "ending", None, None,
                              f"the code stopped {suspended.status} ({suspended.message}); the run ended {status}")
    if run["result"] is None and run["result_artifact"] is None:
        if status in TERMINAL:
            return "", Divergence(position, "ending", None, None, f"the code returned; the run ended {status}"
                                  + (f" ({recorded_error})" if recorded_error else ""))
        return f"the code returned; the run ({status}) has not recorded its end yet", None
    was, is_now = _normal(_recorded_result(store, run)), _normal(result)
    if was == is_now:
        return "the code returned the recorded result", None
    return "", Divergence(position, "result", None, None, "the code returns another result than the run recorded",
                          tuple(_text_diff("result", was, is_now)))


def _failed_at(run: Mapping[str, Any]) -> tuple[int, str] | None:
    """The position and name of the step a failed run failed at, from its error (outcomes.StepFailed's)."""
    if run["status"] != RunStatus.FAILED:
        return None
    found = re.match(r"step (\d+) ('.*?'|\".*?\") raised ", run["error"] or "")
    return None if found is None else (int(found[1]), ast.literal_eval(found[2]))


def _past_the_end(run: Mapping[str, Any], stop: _Stop) -> tuple[str, Divergence | None]:
    """The code made a call the journal does not hold: where the run stopped, unless it had ended."""
    position, name, status = stop.position, stop.name, run["status"]
    failed = _failed_at(run)
    if failed is not None and failed[0] == position:
        if failed[1] == name:
            return f"the code reached #{position} {name}, where the run failed", None
        return "", Divergence(position, "name", failed[1], name,
                              f"#{position}: the run failed at {failed[1]!r} here, the code now calls {name!r}")
    if status not in (RunStatus.SUCCEEDED, RunStatus.FAILED):
        return f"the code reached #{position} {name}, where the run ({status}) goes on when resumed", None
    return "", Divergence(position, "new-call", None, name, f"#{position}: the code calls {name!r}; the run "
                          f"made no call there (it ended {status})")


@contextmanager
def _query_only(db_path: str | os.PathLike) -> Iterator[Store]:
    store = open_store(db_path, create=False)
    try:
        store.read_only()
        yield store
    finally:
        store.close()


def replay_run(db_path: str | os.PathLike, registry: Registry, run_ref: str, on_copy: bool = False) -> Replay:
    """Replay one run against the registry's code for its agent. `on_copy`: `db_path` is a copy nothing else
    writes to (replay_copy.py's), so whatever commits to it while the code runs was the code's own write."""
    with _query_only(db_path) as store:
        return _replay(store, registry, get_run(store, resolve_run(store, run_ref)), on_copy)


def replay_last(db_path: str | os.PathLike, registry: Registry, agent_name: str, count: int,
                on_copy: bool = False) -> list[Replay]:
    """Replay an agent's last `count` finished runs, newest first: a check before releasing new code."""
    registry.get(agent_name)   # an unknown agent is a mistake, not "no runs"
    with _query_only(db_path) as store:
        return [_replay(store, registry, get_run(store, run_id), on_copy)
                for run_id in last_finished(store, agent_name, count)]


def _replay(store: Store, registry: Registry, run: Mapping[str, Any], on_copy: bool) -> Replay:
    version = store.data_version() if on_copy else None
    replayed = _replay_code(store, registry, run)
    if version is None or not replayed.reproduced or store.data_version() == version:
        return replayed
    wrote = Divergence(replayed.answered, "side-effect", None, None,
                       "the code wrote to the database through a connection of its own, outside any journaled call "
                       "(the replay ran on a copy, which took the write: the database is unchanged)")
    return replace(replayed, note=wrote.message, divergence=wrote)


def _replay_code(store: Store, registry: Registry, run: Mapping[str, Any]) -> Replay:
    agent = registry.get(run["agent"])
    entries = load_entries(store, run["id"], run["generation"])
    at = now()
    claim = Claim(run["id"], run["agent"], run["code_version"], run["generation"], run["attempt"], run["fence"],
                  "replay", float("inf"), at)
    ctx = _Cassette(store, claim, request=json.loads(run["request"]), artifact_dir=run["artifact_dir"],
                    checkpoint=load_checkpoint(store, run["id"]), entries=entries, provider=_provider(run, agent),
                    agent=agent, registry=registry, check_inputs=agent.journal_inputs)
    done: dict[str, Any] = {"run_id": run["id"], "agent": run["agent"], "status": run["status"],
                            "entries": len(entries)}
    try:
        result = agent.run(ctx, ctx.request)
        note, divergence = _ending(store, run, position=ctx.position, result=result)
    except _Stop as stop:
        note, divergence = (("", stop.divergence) if stop.divergence is not None else _past_the_end(run, stop))
        return Replay(**done, answered=stop.position, note=_note(note, divergence), divergence=divergence)
    except Suspend as e:
        note, divergence = _ending(store, run, position=ctx.position, suspended=e)
    except ParkRun as e:
        note, divergence = _ending(store, run, position=ctx.position,
                                   suspended=Suspend(RunStatus.PARKED, "environment", str(e)))
    except Exception as e:  # the agent's own code raised where the run may have too
        note, divergence = _ending(store, run, position=ctx.position, raised=e)
    return Replay(**done, answered=ctx.position, note=_note(note, divergence), divergence=divergence)


def _note(note: str, divergence: Divergence | None) -> str:
    """How a replay ended, in one line: `note`, or the divergence's message when the ending left no note."""
    if note or divergence is None:
        return note
    return divergence.message
