"""A fake Messages API on 127.0.0.1, shared by every test that talks to "Claude" (never the real API).

It plays scripted answers in order, one per request, and records every request, so a test can count what
was asked. A streamed request (`"stream": true`) whose answer is a message gets it as the real event
stream, so the SDK's own accumulation rebuilds it.

An answer is a dict: `status`, `body` (a dict sent as JSON, or bytes sent as they are), `headers` (over
the defaults, content-length included), `trickle_s` (sleep after each byte), `event_delay_s` (sleep after
each event), `hang_s` (sleep after the headers, before any body), `error_event` (the `error` of an
`event: error` sent after the first content delta, ending the stream). `down()` and `up()` take it off its
address and put it back, as a dropped network would.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tui_agent.models.anthropic import DEFAULT_MODEL

DUMMY_KEY = "sk-ant-test-dummy-0123456789-never-real"
MESSAGE_FIELDS = {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 1000,
         "cache_read_input_tokens": 2000}


def message(text: str = "Hello from the fake", model: str = DEFAULT_MODEL) -> dict:
    return {"id": "msg_fake01", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": USAGE}


def error_body(status: int, code: str | None = None) -> dict:
    details = {"details": {"error_code": code}} if code else {}
    return {"type": "error", "error": {"type": "api_error", "message": f"status {status}", **details}}


def sse(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _block_events(index: int, block: dict) -> list[bytes]:
    """One content block as the API streams it: an empty start, its text by words or its tool input in
    pieces, then a stop; a block of another type arrives whole in its start."""
    if block.get("type") == "text":
        start, kind, field = {**block, "text": ""}, "text_delta", "text"
        pieces = re.findall(r"\S*\s*", block["text"])[:-1] or [""]
    elif block.get("type") == "tool_use":
        start, kind, field = {**block, "input": {}}, "input_json_delta", "partial_json"
        whole = json.dumps(block["input"])
        pieces = [whole[i:i + 8] for i in range(0, len(whole), 8)]
    else:
        start, pieces = block, []
    deltas = [sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": kind, field: piece}}) for piece in pieces]
    return [sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
            *deltas, sse("content_block_stop", {"type": "content_block_stop", "index": index})]


def stream_events(reply: dict, error: dict | None = None) -> list[bytes]:
    """`reply` as the events of a streamed response; with `error`, an error event after the first delta
    ends it, as when the API fails mid-reply."""
    usage = reply["usage"]
    start = {**reply, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    events = [sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(reply["content"]):
        events += _block_events(index, block)
    events += [sse("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": reply["stop_reason"],
                                               "stop_sequence": reply["stop_sequence"]},
                                     "usage": {"output_tokens": usage["output_tokens"]}}),
               sse("message_stop", {"type": "message_stop"})]
    if error is not None:
        first = next(i for i, event in enumerate(events) if event.startswith(b"event: content_block_delta"))
        events = [*events[:first + 1], sse("error", {"type": "error", "error": error})]
    return events


def _payload(answer: dict, streamed: bool) -> tuple[str, list[bytes]]:
    """The content type and the pieces of an answer's body: events when a message is streamed."""
    body = answer["body"]
    if isinstance(body, bytes):
        return "application/json", [body]
    if streamed and answer.get("status", 200) == 200 and body.keys() >= MESSAGE_FIELDS:
        return "text/event-stream", stream_events(body, answer.get("error_event"))
    return "application/json", [json.dumps(body).encode()]


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request, client_address):
        """A client that hung up (a deadline, a killed worker) is expected, not a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeMessages:
    """A Messages API that answers from `script` (one answer per request) and keeps what it was asked."""

    def __init__(self) -> None:
        self.script: list[dict] = []
        self.requests: list[dict] = []
        self.max_requests = 10  # checked at teardown: no test loops on the fake unless it raises this
        self.received = threading.Condition()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                fake._record({"path": self.path, "body": body,
                              "headers": {name.lower(): value for name, value in self.headers.items()}})
                answer = fake.script.pop(0) if fake.script else {"status": 500, "body": error_body(500)}
                kind, pieces = _payload(answer, body.get("stream") is True)
                self.send_response(answer.get("status", 200))
                for name, value in {"content-type": kind, "request-id": "req_fake01",
                                    "content-length": str(sum(map(len, pieces))),
                                    **answer.get("headers", {})}.items():
                    self.send_header(name, value)
                self.end_headers()
                time.sleep(answer.get("hang_s", 0))
                for piece in pieces:
                    self._write(piece, answer.get("trickle_s"))
                    time.sleep(answer.get("event_delay_s", 0))

            def _write(self, piece: bytes, trickle_s: float | None) -> None:
                if not trickle_s:
                    self.wfile.write(piece)
                    return
                for i in range(len(piece)):
                    self.wfile.write(piece[i:i + 1])
                    time.sleep(trickle_s)

        self._handler = Handler
        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def _record(self, request: dict) -> None:
        with self.received:
            self.requests.append(request)
            self.received.notify_all()

    def play(self, *answers: dict) -> None:
        self.script.extend(answers)

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> bool:
        """Whether `n` requests arrived within `timeout`: a test kills a worker while its call is in flight."""
        with self.received:
            return self.received.wait_for(lambda: len(self.requests) >= n, timeout)

    def serve(self) -> None:
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def down(self) -> None:
        """The API goes away as a dropped network makes it: nothing listens on its port, so a connection is refused."""
        self.close()

    def up(self) -> None:
        """Back on the same address (a test's `down()` first)."""
        self.server = Server(("127.0.0.1", self.port), self._handler)
        self.serve()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
