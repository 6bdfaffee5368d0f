"""Traces for OpenTelemetry (runtime/traces.py, docs/traces.md): a run is one trace whose id comes from the run id,
each worker turn a span in it, each journaled call a span under its turn (model calls with the GenAI semantic
conventions), a resumed turn's replayed calls one span; off, nothing of OpenTelemetry is imported; asked for and not
installed, one line and the run goes on."""

import json
import os
import signal
import socket
import sys
import textwrap

import pytest
from helpers import later, ok, registry_of, show_json, until, work
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tui_agent import Agent
from tui_agent.errors import PermanentError
from tui_agent.operate import start
from tui_agent.runtime import traces
from tui_agent.runtime.clock import iso
from tui_agent.runtime.registry import load_registry
from tui_agent.store import open_store

AGENT = "nightly-report"
OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TUI_AGENT_TRACES",
                  "OTEL_SDK_DISABLED")


@pytest.fixture
def spans():
    """This process's spans, kept in memory as each ends; tracing off again afterwards."""
    exporter = InMemorySpanExporter()
    traces.export_to(exporter)
    yield exporter
    traces.export_to(None)


@pytest.fixture
def untraced_env(monkeypatch) -> dict[str, str]:
    """The test's environment without any variable that turns tracing on."""
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return {name: value for name, value in os.environ.items() if name not in OTEL_VARIABLES}


def _rows(store, sql: str, *params) -> list[dict]:
    return list(store.query(sql, params))


def _by_name(finished) -> dict[str, list]:
    named: dict[str, list] = {}
    for span in finished:
        named.setdefault(span.name, []).append(span)
    return named


def test_a_nightly_report_run_is_one_trace_with_a_span_per_call_and_genai_attributes(db_path, spans):
    store = open_store(db_path)
    registry = load_registry()
    run_id, _ = start(store, registry, agent_name=AGENT, request={}, model="scripted")
    outcome = work(store, registry, run_id)
    assert outcome.status == "succeeded", outcome
    run = _rows(store, "SELECT * FROM runs WHERE id = ?", run_id)[0]
    journal = _rows(store, "SELECT * FROM journal WHERE run_id = ? ORDER BY position", run_id)
    (call,) = _rows(store, "SELECT * FROM model_calls WHERE run_id = ?", run_id)
    (effect,) = _rows(store, "SELECT * FROM effects WHERE run_id = ?", run_id)
    store.close()
    finished = spans.get_finished_spans()

    assert {span.context.trace_id for span in finished} == {int(traces.trace_id(run_id), 16)}
    named = _by_name(finished)
    (run_span,) = named[f"run {AGENT}"]
    (turn,) = named[f"turn {AGENT}"]
    assert run_span.parent is None and turn.parent.span_id == run_span.context.span_id
    assert run_span.attributes["tui_agent.run.status"] == "succeeded"
    assert {key: turn.attributes[f"tui_agent.{key}"] for key in ("run.id", "agent", "generation", "attempt", "fence")} \
        == {"run.id": run_id, "agent": AGENT, "generation": run["generation"], "attempt": run["attempt"],
            "fence": journal[0]["fence"]}
    calls = sorted((span for span in finished if span.parent and span.parent.span_id == turn.context.span_id),
                   key=lambda span: span.attributes["tui_agent.call.position"])
    # one span per journal entry, in its order, named by its kind (a model call by the model it asked for)
    assert [span.name for span in calls] == [f"chat {call['model']}" if e["kind"] == "model" else f"{e['kind']} {e['name']}"
                                             for e in journal]
    assert all(span.attributes["tui_agent.run.id"] == run_id for span in calls)
    (chat,) = (span for span in calls if span.attributes["tui_agent.call.kind"] == "model")
    assert {key: chat.attributes[key] for key in (
        "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens", "tui_agent.cost_usd")} == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": call["provider"],
        "gen_ai.request.model": call["model"], "gen_ai.usage.input_tokens": call["input_tokens"],
        "gen_ai.usage.output_tokens": call["tokens"], "gen_ai.usage.cache_read.input_tokens": call["cache_read_tokens"],
        "gen_ai.usage.cache_creation.input_tokens": call["cache_write_tokens"], "tui_agent.cost_usd": call["cost_usd"]}
    assert chat.attributes["gen_ai.response.finish_reasons"] == (json.loads(journal[chat.attributes[
        "tui_agent.call.position"]]["result"])["stop_reason"],)
    (sent,) = (span for span in calls if span.attributes["tui_agent.call.kind"] == "effect")
    assert (sent.attributes["tui_agent.effect.name"], sent.attributes["tui_agent.effect.key"],
            sent.attributes["tui_agent.effect.state"]) == (effect["name"], effect["key"], effect["state"])
    assert "replay" not in named   # a first turn replays nothing


def test_a_step_that_fails_marks_its_span_with_the_exception_type(db_path, spans):
    def fails(ctx, request):
        ctx.step("fine", lambda: 1)
        ctx.step("boom", _refuse)
        return {}

    store = open_store(db_path)
    registry = registry_of(Agent(name="fails", run=fails))
    run_id, _ = start(store, registry, agent_name="fails", request={}, model="scripted")
    assert work(store, registry, run_id).status == "failed"
    store.close()
    named = _by_name(spans.get_finished_spans())
    (failed,) = named["call boom"]
    assert failed.status.status_code == StatusCode.ERROR
    qualified = f"{PermanentError.__module__}.{PermanentError.__qualname__}"
    assert failed.attributes["error.type"] == qualified
    assert [event.attributes["exception.type"] for event in failed.events] == [qualified]
    assert named["step fine"][0].status.status_code == StatusCode.UNSET
    assert named["turn fails"][0].status.status_code == StatusCode.ERROR
    assert named["run fails"][0].status.status_code == StatusCode.ERROR


def _refuse():
    raise PermanentError("the service refused it")


def test_a_sleeping_run_says_what_it_waits_for_and_until_when(db_path, spans):
    def naps(ctx, request):
        ctx.sleep("nap", 3600)
        return {}

    store = open_store(db_path)
    registry = registry_of(Agent(name="naps", run=naps))
    run_id, _ = start(store, registry, agent_name="naps", request={}, model="scripted")
    assert work(store, registry, run_id).status == "waiting"
    wake_at = _rows(store, "SELECT wake_at FROM runs WHERE id = ?", run_id)[0]["wake_at"]
    store.close()
    named = _by_name(spans.get_finished_spans())
    assert named["sleep nap"][0].attributes["tui_agent.wait.until"] == iso(wake_at)
    (wait,) = named["wait sleep"]
    assert (wait.attributes["tui_agent.wait.reason"], wait.attributes["tui_agent.wait.until"]) == ("sleep", iso(wake_at))
    assert "nap" in wait.attributes["tui_agent.wait.what"]
    assert "run naps" not in named   # waiting is not an ending


def _console_spans(stderr: str) -> list[dict]:
    """The spans a process printed with TUI_AGENT_TRACES=console: a JSON line each, among its other lines."""
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_a_run_killed_mid_turn_and_resumed_is_one_trace_and_the_replay_is_one_span(tui_agent, db_path, untraced_env):
    console = {"TUI_AGENT_TRACES": "console"}
    run_id = ok(tui_agent("start", AGENT, "--model", "scripted")).stdout.strip()
    killed = tui_agent("worker", "--once", "--lease", "5", "--name", "w-dead",
                       env={**console, "TUI_AGENT_CRASH_AT": "after-model-commit"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    recorded = len(show_json(tui_agent, run_id)["journal"])
    resumed = ok(tui_agent("worker", "--once", "--name", "w-new", env={**console, "TUI_AGENT_NOW": later(10)}))
    report = show_json(tui_agent, run_id)
    assert report["run"]["status"] == "succeeded"
    first, second = _console_spans(killed.stderr), _console_spans(resumed.stderr)

    trace = "0x" + traces.trace_id(run_id)
    assert {span["context"]["trace_id"] for span in first + second} == {trace}
    # the killed worker's turn never ended, so its own span is missing; its calls are there, under it
    assert [span["name"] for span in first if span["name"].startswith("turn")] == []
    assert len(first) == recorded and len({span["parent_id"] for span in first}) == 1
    (turn,) = (span for span in second if span["name"] == f"turn {AGENT}")
    (run_span,) = (span for span in second if span["name"] == f"run {AGENT}")
    assert turn["parent_id"] == run_span["context"]["span_id"] and run_span["parent_id"] is None
    assert turn["context"]["span_id"] != first[0]["parent_id"]
    assert turn["attributes"]["tui_agent.fence"] > first[0]["attributes"]["tui_agent.fence"]
    # what the second turn replayed is one span saying how many; only what it did anew has a span each
    (replay,) = (span for span in second if span["name"] == "replay")
    assert replay["parent_id"] == turn["context"]["span_id"]
    assert replay["attributes"]["tui_agent.replayed.calls"] == recorded
    assert {span["attributes"]["tui_agent.call.position"] for span in second if span["parent_id"] ==
            turn["context"]["span_id"] and "tui_agent.call.position" in span["attributes"]} == set(
        range(recorded, len(report["journal"])))


def test_with_tracing_off_a_run_imports_nothing_of_opentelemetry(tmp_path, untraced_env):
    program = textwrap.dedent(f"""
        import atexit, sys
        atexit.register(lambda: print("loaded:", [m for m in sys.modules if m.split(".")[0] == "opentelemetry"],
                                      file=sys.stderr))
        from tui_agent.cli import main
        sys.argv = ["tui-agent", "--db", {str(tmp_path / "runs.db")!r}, "run", {AGENT!r}, "--model", "scripted"]
        main()
    """)
    done = ok(_python(program, untraced_env))
    assert "succeeded" in done.stdout
    assert done.stderr.splitlines()[-1] == "loaded: []", done.stderr


def _python(program: str, env: dict[str, str]):
    import subprocess
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60,
                          stdin=subprocess.DEVNULL)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_endpoint_without_the_sdk_installed_is_one_line_and_the_run_goes_on(tui_agent, tmp_path, untraced_env):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(textwrap.dedent("""
        import sys

        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, NotInstalled())
    """))
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    done = ok(tui_agent("--db", str(tmp_path / "runs.db"), "run", AGENT, "--model", "scripted",
                        env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "PYTHONPATH": str(shim)}))
    assert "succeeded (check_passed)" in done.stdout
    said = [line for line in done.stderr.splitlines() if "OTEL_EXPORTER_OTLP_ENDPOINT" in line]
    assert len(said) == 1 and said[0].startswith("tui-agent: "), done.stderr
    assert "opentelemetry-sdk is not installed" in said[0] and "[otel]" in said[0] and "untraced" in said[0]
    assert "Traceback" not in done.stderr


def test_a_dead_collector_neither_fails_a_run_nor_floods_stderr(tui_agent, tmp_path, untraced_env):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    done = ok(tui_agent("--db", str(tmp_path / "runs.db"), "run", AGENT, "--model", "scripted",
                        env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}))
    assert "succeeded (check_passed)" in done.stdout
    lines = done.stderr.splitlines()
    said = [line for line in lines if endpoint in line]
    assert len(said) == 1 and said[0].startswith("tui-agent: traces: "), done.stderr
    assert all(line.startswith(("tui-agent: ", "model: ")) for line in lines), done.stderr


@pytest.fixture
def collector():
    """An OTLP/HTTP receiver on a port of its own: the names of the spans posted to it, with its URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    received: list[str] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            request = ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            received.extend(span.name for spans in request.resource_spans for scope in spans.scope_spans
                            for span in scope.spans)
            body = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
    server.server_close()


def test_a_worker_sends_its_batched_spans_as_it_exits(tui_agent, spawn, db_path, collector, untraced_env):
    url, received = collector
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": url}
    first = ok(tui_agent("start", AGENT, "--model", "scripted")).stdout.strip()
    ok(tui_agent("worker", "--once", env=endpoint))   # exits at once, well inside the batch's 5 s delay
    assert received.count(f"turn {AGENT}") == 1 and received.count(f"run {AGENT}") == 1, received
    # a worker stopped by SIGTERM sends its spans too
    worker = spawn("worker", "--name", "w-term", env=endpoint, label="worker")
    second = ok(tui_agent("start", AGENT, "--model", "scripted", "--key", "second")).stdout.strip()
    until("the second run to end", lambda: show_json(tui_agent, second)["run"]["status"] == "succeeded")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert received.count(f"turn {AGENT}") == 2 and received.count(f"run {AGENT}") == 2, received
    assert first != second
