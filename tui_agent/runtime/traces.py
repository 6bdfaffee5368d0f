"""Traces of runs for OpenTelemetry: a run is one trace, each worker turn a span in it, each journaled call a span.

Tracing is on when the environment sets an OTLP endpoint or `TUI_AGENT_TRACES=console`, off with
`TUI_AGENT_TRACES=off` or `OTEL_SDK_DISABLED=true`, decided once per process at its first turn. While it is
off nothing of OpenTelemetry is imported and `turn` returns None. The turn's span is current while the agent's
code runs. Why: docs/traces.md ("Turning it on", "How the spans hang together", "What is lost")."""

from __future__ import annotations

import atexit
import hashlib
import importlib
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal

from ..states import TERMINAL, EntryKind, RunStatus
from ..store import Claim
from ..store.model_calls import Spent
from .clock import Clock, iso
from .outcomes import StepFailed

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_INSTALL = ("install the otel extra: pip install -e '.[otel]' in tui-agent's checkout (or pip install "
            "opentelemetry-sdk opentelemetry-exporter-otlp-proto-http)")
_EXPORTERS = {   # OTEL_EXPORTER_OTLP_PROTOCOL -> the exporter's module and the package that has it
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                      "opentelemetry-exporter-otlp-proto-http"),
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "opentelemetry-exporter-otlp-proto-grpc"),
}
_PACKAGES = {package for _, package in _EXPORTERS.values()}
EXIT_FLUSH_S = 2.0   # how long a process's exit waits at most for its last spans to go out

_lock = threading.Lock()
_tracing: _Tracing | None | Literal[False] = None   # None: not decided yet; False: off


def trace_id(run_id: str) -> str:
    """The trace id of a run's trace (32 hex digits), the same in every process: what to look up in a
    tracing tool."""
    return f"{_trace_id(run_id):032x}"


def _trace_id(run_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"tui-agent trace {run_id}".encode()).digest()[:16], "big") or 1


def _run_span_id(run_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"tui-agent run {run_id}".encode()).digest()[:8], "big") or 1


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _say(line: str) -> None:
    print(f"tui-agent: {line}", file=sys.stderr, flush=True)


def turn(claim: Claim, clock: Clock) -> Turn | None:
    """The span of a worker's turn on `claim`, started at the claim, its times read from the run's `clock`; None
    while tracing is off. Use it as a context manager around the turn (an exception escaping it is recorded), and
    call its methods at the points the runtime reaches."""
    tracing = _decided()
    return None if tracing is None else Turn(tracing, claim, clock)


def export_to(exporter: Any | None) -> None:
    """Send this process's spans to `exporter` (an OpenTelemetry SDK `SpanExporter`), each as it ends, in place
    of what the environment says; None turns tracing off. For tests, and programs that embed the runtime."""
    global _tracing
    with _lock:
        if isinstance(_tracing, _Tracing):
            _tracing.close()
        _tracing = False if exporter is None else _Tracing(_simple(exporter))


def close() -> None:
    """Send the spans still held and stop tracing, waiting at most EXIT_FLUSH_S: before a process exits
    without running its atexit hooks (os._exit)."""
    global _tracing
    with _lock:
        if isinstance(_tracing, _Tracing):
            _tracing.close()
        _tracing = False


def _decided() -> _Tracing | None:
    global _tracing
    if _tracing is None:
        with _lock:
            if _tracing is None:
                _tracing = _from_environment() or False
    return _tracing or None


def _from_environment() -> _Tracing | None:
    """The tracing the environment asks for, or None: off, or asked for and not installed (said in one line)."""
    mode = os.environ.get("TUI_AGENT_TRACES", "").strip().lower()
    variable = next((name for name in _ENDPOINTS if os.environ.get(name)), None)
    if mode == "off" or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if mode not in ("", "console"):
        _say(f"TUI_AGENT_TRACES={mode!r} is neither console nor off; this process runs untraced")
        return None
    if mode != "console" and variable is None:
        return None
    asked = "TUI_AGENT_TRACES=console" if mode == "console" else f"{variable} is set"
    try:
        processor = _otlp(os.environ[variable]) if mode != "console" and variable is not None else _console()
        if processor is None:
            return None
        tracing = _Tracing(processor)
    except ImportError as e:
        missing = e.name if e.name in _PACKAGES else "opentelemetry-sdk"
        _say(f"{asked} but {missing} is not installed: {_INSTALL}; this process runs untraced")
        return None
    atexit.register(close)
    return tracing


def _simple(exporter: Any) -> Any:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    return SimpleSpanProcessor(exporter)


def _console() -> Any:
    """Each span a line of JSON on stderr as it ends (`jq` reads them)."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    return _simple(ConsoleSpanExporter(out=sys.stderr, formatter=lambda span: span.to_json(indent=None) + "\n"))


def _otlp(endpoint: str) -> Any | None:
    """The span processor that sends to a collector by OTLP, over HTTP/protobuf or gRPC as the variables ask. The
    OTEL_EXPORTER_OTLP_* variables default to HTTP/protobuf, and the exporter reads the endpoint, headers and timeout
    from them too. Batched: a slow or dead collector never holds up a run, and its errors are said once
    (`_ExportTrouble`)."""
    protocol = next((os.environ[name] for name in _PROTOCOLS if os.environ.get(name)), "http/protobuf").strip()
    if protocol not in _EXPORTERS:
        _say(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: tui-agent sends {' or '.join(_EXPORTERS)}; this process "
             "runs untraced")
        return None
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    module, package = _EXPORTERS[protocol]
    try:
        exporter = importlib.import_module(module).OTLPSpanExporter
    except ImportError as e:
        raise ImportError(str(e), name=package) from e
    logger = logging.getLogger("opentelemetry")
    logger.addHandler(_ExportTrouble(endpoint))
    logger.propagate = False
    return BatchSpanProcessor(exporter())


class _ExportTrouble(logging.Handler):
    """A log handler that says the exporter's complaints about an unreachable collector as one line, once per process.
    The exporter warns per retry, with a traceback's worth of text; the runs go on, their spans dropped while the
    collector is away. `last`: when the newest came (time.monotonic), so an exit does not wait out the retries of a dead
    collector."""

    last = float("-inf")
    said = False

    def __init__(self, endpoint: str) -> None:
        super().__init__(logging.WARNING)
        self.endpoint = endpoint

    def emit(self, record: logging.LogRecord) -> None:
        _ExportTrouble.last = time.monotonic()
        if _ExportTrouble.said:
            return
        _ExportTrouble.said = True
        text = record.getMessage()
        why = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
        _say(f"traces: the collector at {self.endpoint} did not take spans "
             f"({why.group(1) if why else text.splitlines()[0][:120]}); runs go on, their spans are dropped while it "
             "does not answer (said once)")


class _Ids:
    """Random span and trace ids, except the run's span, whose ids come from its run id: one per thread, taken
    by the next span that thread starts."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        self._random = RandomIdGenerator()
        self.next = threading.local()

    def generate_span_id(self) -> int:
        forced = getattr(self.next, "span_id", None)
        self.next.span_id = None
        return forced or self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        forced = getattr(self.next, "trace_id", None)
        self.next.trace_id = None
        return forced or self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return False   # asked for a root span alone: the run's, whose trace id is derived from its run id


class _Tracing:
    """This process's tracer provider, its one span processor and tui-agent's tracer."""

    def __init__(self, processor: Any) -> None:
        from opentelemetry import context, trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        from .. import __version__
        self.api, self.context = trace, context
        named = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "tui-agent"}
        self.ids = _Ids()   # an IdGenerator but for its base class, which would import the SDK with this module
        self.provider = TracerProvider(resource=Resource.create({**named, "service.version": __version__}),
                                       id_generator=self.ids, shutdown_on_exit=False)  # type: ignore[arg-type]
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("tui_agent", __version__)

    def run_context(self, run_id: str) -> Any:
        """The parent of every turn of the run: its run span, by id (emitted when the run ends)."""
        trace = self.api
        parent = trace.SpanContext(_trace_id(run_id), _run_span_id(run_id), is_remote=True,
                                   trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
        return trace.set_span_in_context(trace.NonRecordingSpan(parent))

    def close(self) -> None:
        """The spans still held sent, for EXIT_FLUSH_S at most, and less when the collector fails meanwhile."""
        began = time.monotonic()
        shutting = threading.Thread(target=self.provider.shutdown, name="tui-agent-traces-flush", daemon=True)
        shutting.start()
        while shutting.is_alive() and _ExportTrouble.last < began and time.monotonic() - began < EXIT_FLUSH_S:
            shutting.join(0.02)


class Turn:
    """One worker turn's span and the spans of its calls. The runtime calls `replayed` for each call the journal
    answers, `recorded` for each call it journals, `settled` when the worker writes the run's new status, and
    `outcome` with the turn's outcome; the `with` block ends the span."""

    def __init__(self, tracing: _Tracing, claim: Claim, clock: Clock) -> None:
        self._tracing, self._tracer, self._claim, self._clock = tracing, tracing.tracer, claim, clock
        self.common: dict[str, Any] = {
            "tui_agent.run.id": claim.run_id, "tui_agent.agent": claim.agent, "tui_agent.generation": claim.generation,
            "tui_agent.attempt": claim.attempt, "tui_agent.fence": claim.fence, "tui_agent.worker": claim.worker}
        self.span = self._tracer.start_span(f"turn {claim.agent}", context=tracing.run_context(claim.run_id),
                                            start_time=_ns(claim.claimed_at), attributes=self.common)
        self._context = tracing.api.set_span_in_context(self.span)
        self._token: Any = None
        self._replays = 0
        self._replay: tuple[int, int, str, str] | None = None   # (started ns, first position, first name, last)
        self._last_end = _ns(claim.claimed_at)

    def __enter__(self) -> Turn:
        self._token = self._tracing.context.attach(self._context)
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, _tb: Any) -> None:
        at = self._now()
        self._replayed_until(at)
        if error is not None:
            self.span.record_exception(error, timestamp=at)
            self._failed(self.span, f"the turn ended with {type(error).__name__}: {error}")
        self.span.end(end_time=at)
        self._tracing.context.detach(self._token)

    def _span(self, name: str, started: int, ended: int, attributes: Mapping[str, Any], client: bool = False) -> Any:
        kind = self._tracing.api.SpanKind.CLIENT if client else self._tracing.api.SpanKind.INTERNAL
        span = self._tracer.start_span(name, context=self._context, kind=kind, start_time=started,
                                       attributes={**self.common, **attributes})
        self._last_end = ended
        return span

    def _now(self) -> int:
        return _ns(self._clock.now())

    def _failed(self, span: Any, description: str) -> None:
        span.set_status(self._tracing.api.Status(self._tracing.api.StatusCode.ERROR, description[:500]))

    def replayed(self, position: int, name: str) -> None:
        """The journal answered the call at `position`: counted into the turn's one replay span."""
        if self._replay is None:
            self._replay = (self._now(), position, name, name)
        else:
            self._replay = (*self._replay[:3], name)
        self._replays += 1

    def _replayed_until(self, ended: int) -> None:
        if self._replay is None:
            return
        started, first, first_name, last_name = self._replay
        self._replay = None
        self._span("replay", started, ended, {
            "tui_agent.replayed.calls": self._replays, "tui_agent.replayed.first_position": first,
            "tui_agent.replayed.first_name": first_name, "tui_agent.replayed.last_position": first + self._replays - 1,
            "tui_agent.replayed.last_name": last_name}).end(end_time=ended)

    def recorded(self, position: int, name: str, *, kind: str, value: Any, started_at: float, duration_s: float,
                 attempts: int, cost: float | None, detail: Mapping[str, Any] | None) -> None:
        """Write the span of a call the turn made and journaled, after the fact. The call is a step, a model call (GenAI
        semantic conventions), an effect, a tool call, a sleep or an approval. `detail`: what the journal entry does not
        hold (the model asked for, the effect's key and state)."""
        started, ended = _ns(started_at), _ns(started_at + duration_s)
        self._replayed_until(started)
        attributes: dict[str, Any] = {"tui_agent.call.position": position, "tui_agent.call.name": name,
                                      "tui_agent.call.kind": kind, "tui_agent.attempts": attempts}
        if cost is not None:
            attributes["tui_agent.cost_usd"] = cost
        span_name, client = kind if name == kind else f"{kind} {name}", False
        if kind == EntryKind.MODEL and isinstance(value, dict):
            span_name, client = _model_call(value, detail or {}, attributes), True
        elif kind == EntryKind.TOOL and isinstance(value, dict):
            span_name = _tool_call(name, value, attributes)
        elif kind in (EntryKind.SLEEP, EntryKind.APPROVAL, EntryKind.EFFECT) and detail:
            attributes.update({f"tui_agent.{kind}.{k}": v for k, v in detail.items() if v is not None})
        if kind == EntryKind.SLEEP and isinstance(value, dict):
            attributes["tui_agent.wait.until"] = iso(value.get("wake_at"))
        elif kind == EntryKind.APPROVAL and isinstance(value, dict):
            attributes.update({"tui_agent.approval.approved": bool(value.get("approved")),
                               "tui_agent.approval.by": str(value.get("by") or "")})
        self._span(span_name, started, ended, attributes, client).end(end_time=ended)

    def settled(self, status: str, reason: str, *, message: str, wake_at: float | None, raised: BaseException | None,
                created_at: float | None) -> None:
        """Write the spans due once the worker has written the run's new status. They are a wait's span (what and until
        when), a failed call's span (its exception), and the run's own span when the run ended."""
        at = self._now()
        self._replayed_until(at)
        if status == RunStatus.WAITING:
            waiting = {"tui_agent.wait.reason": reason, "tui_agent.wait.what": message}
            if wake_at is not None:
                waiting["tui_agent.wait.until"] = iso(wake_at)
            self._span(f"wait {reason}", at, at, waiting).end(end_time=at)
        if isinstance(raised, StepFailed):
            failed = self._span(f"call {raised.name}", self._last_end, at, {
                "tui_agent.call.position": raised.position, "tui_agent.call.name": raised.name,
                "tui_agent.attempts": raised.attempts, "error.type": _qualified(type(raised.error))})
            failed.record_exception(raised.error, timestamp=at)
            self._failed(failed, str(raised))
            failed.end(end_time=at)
        elif raised is not None:
            self.span.record_exception(raised, timestamp=at)
        if status in TERMINAL and created_at is not None:
            self._run_span(status, reason, message, _ns(created_at), at)

    def _run_span(self, status: str, reason: str, message: str, started: int, ended: int) -> None:
        run_id = self._claim.run_id
        ids = self._tracing.ids
        ids.next.trace_id, ids.next.span_id = _trace_id(run_id), _run_span_id(run_id)
        span = self._tracer.start_span(f"run {self._claim.agent}", context=self._tracing.context.Context(),
                                       start_time=started, attributes={
                                           "tui_agent.run.id": run_id, "tui_agent.agent": self._claim.agent,
                                           "tui_agent.run.status": status, "tui_agent.run.reason": reason})
        if status == RunStatus.FAILED:
            self._failed(span, message)
        span.end(end_time=ended)

    def outcome(self, outcome: Any) -> Any:
        """The turn's outcome (runtime/worker.Outcome) on its span; returns it."""
        self.span.set_attributes({"tui_agent.outcome.status": outcome.status,
                                  "tui_agent.outcome.reason": outcome.reason or "",
                                  "tui_agent.outcome.message": outcome.message or ""})
        if outcome.status == RunStatus.FAILED:
            self._failed(self.span, outcome.error or outcome.message or "failed")
        return outcome


def _qualified(kind: type) -> str:
    """An exception's class as the semantic conventions name it (`error.type`, as `exception.type` has it)."""
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _model_call(reply: dict, detail: Mapping[str, Any], attributes: dict[str, Any]) -> str:
    """A model call's GenAI attributes (OpenTelemetry semantic conventions); its span's name."""
    spent = Spent.of(reply.get("usage") or {})
    requested = str(detail.get("model") or reply.get("model") or "")
    attributes.update({
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": str(detail.get("provider") or ""),
        "gen_ai.request.model": requested,
        "gen_ai.usage.input_tokens": spent.input_tokens, "gen_ai.usage.output_tokens": spent.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": spent.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": spent.cache_write_tokens})
    if reply.get("model"):
        attributes["gen_ai.response.model"] = str(reply["model"])
    if reply.get("id"):
        attributes["gen_ai.response.id"] = str(reply["id"])
    if reply.get("stop_reason"):
        attributes["gen_ai.response.finish_reasons"] = [str(reply["stop_reason"])]
    return f"chat {requested}"


def _tool_call(name: str, result: dict, attributes: dict[str, Any]) -> str:
    """A tool call's GenAI attributes (the execute_tool operation); its span's name."""
    tool = name.rpartition("/")[2]
    attributes.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                       "tui_agent.tool.is_error": bool(result.get("is_error"))})
    if result.get("tool_use_id"):
        attributes["gen_ai.tool.call.id"] = str(result["tool_use_id"])
    return f"execute_tool {tool}"
