"""Claude through the official `anthropic` SDK, behind the `Provider` interface.

Every call streams. The SDK never retries (`max_retries=0`): the run's retry policy decides, durably. Every
failure becomes a `TemporaryError` or a `PermanentError`, and one that says Claude is not reachable now is a
`NotReachable`, which the policy's patience waits out. The key is read at each call and never kept, logged or
journaled; the SDK is imported at the first call. Why: docs/architecture.md, section 8."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator

from ..errors import NotReachable, PermanentError, TemporaryError
from .pricing import PRICES_DATE
from .tokens import estimate_tokens

KEY_VARIABLE = "ANTHROPIC_API_KEY"
# The newest Sonnet in pricing.py's table (dated PRICES_DATE): the model when neither the run nor the agent names one.
DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MODEL_DATE = PRICES_DATE
DEFAULT_DEADLINE_S = 600.0  # a whole call, however slowly its bytes trickle in
READ_TIMEOUT_S = 120.0  # silence between two reads
CONNECT_TIMEOUT_S = 10.0

TEMPORARY_STATUSES = {408, 409, 429}  # and every 5xx: 500-504, 529 overloaded
UNREACHABLE_STATUSES = {408, 429}     # and every 5xx: a timeout, a rate limit or the server away, not a conflict
# An error event mid-stream has no status of its own (the stream began with a 200): only its type tells.
TEMPORARY_STREAM_ERRORS = {"api_error", "timeout_error", "overloaded_error"}  # the 5xx kinds
# The field of each delta kind that carries reply output, counted as it streams in.
DELTA_OUTPUT = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}
SPEND_LIMITS = ("EnforcedSpendLimitReachedError", "ContractSpendLimitReachedError", "RampLimitExceededError")


class DeadlinePassed(Exception):
    """Raised inside the response stream once the call's wall-clock deadline has passed."""


def _deadlined(chunks, deadline_at: float) -> Iterator[bytes]:
    for chunk in chunks:
        if time.monotonic() > deadline_at:
            raise DeadlinePassed()
        yield chunk


def _transport(provider: AnthropicProvider):
    """An httpx2 transport that checks the provider's deadline at every chunk.

    The SDK's timeout is per read, so a reply trickled byte by byte would otherwise outlive any timeout."""
    import httpx2

    class DeadlineTransport(httpx2.HTTPTransport):
        def handle_request(self, request):
            response = super().handle_request(request)
            chunks, deadline_at = response.stream, provider.deadline_at

            class Stream(httpx2.SyncByteStream):
                def __iter__(self):
                    return _deadlined(chunks, deadline_at)

                def close(self):
                    chunks.close()

            response.stream = Stream()
            return response

    return DeadlineTransport()


def retry_after_s(headers) -> float | None:
    """The server's `retry-after-ms` or `retry-after` (seconds), when it gave one we can read."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name) if headers is not None else None
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except (TypeError, ValueError):
            continue
        if seconds >= 0:
            return seconds
    return None


def classify(error: Exception) -> Exception:
    """Our error for an SDK error: temporary when asking again later may work, permanent otherwise.

    A temporary one is `NotReachable` when Claude is away (no connection, a timeout, a 5xx or its kind of error
    event, a rate limit). `x-should-retry` from the server wins over the status; spend limits are 429s that no wait
    cures."""
    import anthropic

    if isinstance(error, anthropic.APIStatusError):
        headers = error.response.headers
        said = str(headers.get("x-should-retry", "")).lower()
        mid_stream = error.status_code < 400  # an error event in a stream that began with a 200
        message = (f"Claude broke off its reply with {error.type}: {error.api_message}" if mid_stream
                   else f"Claude answered {error.status_code}: {error}")
        spend_limits = tuple(getattr(anthropic, name) for name in SPEND_LIMITS if hasattr(anthropic, name))
        if said in ("true", "false"):
            temporary = said == "true"
        elif mid_stream:
            temporary = error.type in TEMPORARY_STREAM_ERRORS
        else:
            temporary = not isinstance(error, spend_limits) and (
                error.status_code in TEMPORARY_STATUSES or error.status_code >= 500)
        if not temporary:
            return PermanentError(message)
        away = (error.type in TEMPORARY_STREAM_ERRORS if mid_stream else
                error.status_code in UNREACHABLE_STATUSES or error.status_code >= 500)
        kind = NotReachable if away and not isinstance(error, spend_limits) else TemporaryError
        return kind(message, retry_after_s=retry_after_s(headers))
    if isinstance(error, anthropic.APITimeoutError):
        return NotReachable(f"Claude did not answer in time: {error}")
    if isinstance(error, anthropic.APIConnectionError):
        return NotReachable(f"could not reach Claude: {error}")
    return error


class AnthropicProvider:
    """A `Provider` calling Claude's Messages API; `pinned` is the run's `anthropic:MODEL_ID`."""

    def __init__(self, pinned: str | None = None, *, deadline_s: float = DEFAULT_DEADLINE_S,
                 read_timeout_s: float = READ_TIMEOUT_S, name: str = "anthropic"):
        self.name = name
        self.pinned = pinned
        self.model = pinned or DEFAULT_MODEL
        self.deadline_s = deadline_s
        self.read_timeout_s = read_timeout_s
        self.deadline_at = float("inf")

    def missing(self, worker: str) -> str | None:
        """What `worker`'s environment lacks for a call, and the way out (the runtime parks the run rather
        than failing it). Asked before each new call, so the SDK's import (seconds, once per process) is
        paid here, not inside the call's time."""
        if not os.environ.get(KEY_VARIABLE):
            return f"{KEY_VARIABLE} is not set for worker {worker}; set it and resume"
        try:
            import anthropic  # noqa: F401
        except ImportError as e:
            return (f"the anthropic package cannot be imported by worker {worker} ({e}); "
                    "install tui-agent's dependencies where it runs and resume")
        return None

    def _client(self):
        import anthropic
        import httpx2

        return anthropic.Anthropic(max_retries=0, http_client=httpx2.Client(transport=_transport(self)),
                                   timeout=anthropic.Timeout(self.read_timeout_s, connect=CONNECT_TIMEOUT_S))

    def create(self, *, model: str | None, messages: list[dict], max_tokens: int,
               system: str | list | None = None, tools: list[dict] | None = None,
               call_index: int = 0, on_tokens: Callable[[int], None] | None = None) -> dict:
        """Streamed, so a long reply shows life: `on_tokens` gets the output tokens so far at every delta."""
        import anthropic

        extra = {**({"system": system} if system is not None else {}), **({"tools": tools} if tools else {})}
        self.deadline_at = time.monotonic() + self.deadline_s
        read_s = min(self.read_timeout_s, self.deadline_s)
        request = {"model": model or self.model, "messages": messages, "max_tokens": max_tokens,
                   "timeout": anthropic.Timeout(read_s, connect=min(CONNECT_TIMEOUT_S, read_s)), **extra}
        received = ""
        with self._client() as client:
            for item in self._stream(client, request):
                if isinstance(item, str):
                    received += item
                    if on_tokens is not None:
                        on_tokens(estimate_tokens(received))
        assert isinstance(item, dict)   # the last item is the reply
        return item

    def _stream(self, client, request: dict) -> Iterator[str | dict]:
        """The reply's output text piece by piece, then the reply itself as the last item. Every failure on
        the way, from the request to the last byte, comes out as our error here, in the generator, so
        what the consumer raises between two pieces (its `on_tokens`) passes unchanged."""
        started = False
        try:
            with client.messages.stream(**request) as stream:
                started = True
                carried, complete = set(), False
                for event in stream:
                    if event.type == "message_start":
                        carried |= event.message.to_dict().keys()
                    elif event.type == "message_delta":
                        carried |= event.delta.to_dict().keys()
                    elif event.type == "content_block_delta":
                        field = DELTA_OUTPUT.get(event.delta.type)
                        yield getattr(event.delta, field) if field else ""
                    complete = complete or event.type == "message_stop"
                if not carried:
                    raise PermanentError("Claude answered 200 with something that is not a message "
                                         "(no message event in it)")
                if not complete:
                    raise NotReachable("Claude's reply stream ended before the message did")
                yield _reply(_as_sent(stream.get_final_message(), carried), stream.request_id)
        except (TemporaryError, PermanentError):
            raise
        except Exception as e:  # noqa: BLE001 - every failure becomes ours: _failure sorts them
            raise self._failure(e, started) from None

    def _failure(self, error: Exception, started: bool) -> Exception:
        """Our error for a failed call. Once the stream has begun, a broken connection may heal and
        anything unexpected means the body is not a message."""
        import anthropic
        import httpx2

        if isinstance(error, DeadlinePassed) or time.monotonic() > self.deadline_at:
            return NotReachable(f"Claude gave no complete reply within {self.deadline_s:g}s")
        if not started or isinstance(error, anthropic.APIError):
            return classify(error)
        if isinstance(error, httpx2.TransportError):
            return NotReachable(f"the connection to Claude broke mid-reply: {error!r}")
        return PermanentError(f"Claude answered 200 with something that is not a message "
                              f"({type(error).__name__}: {str(error)[:200]})")


def _as_sent(message, carried: set[str]) -> dict:
    """The streamed message as the JSON a plain `Message` gives.

    That is the SDK's accumulated snapshot with only the top-level fields the stream carried; the snapshot sets
    `stop_details` whether or not one was sent."""
    dumped = json.loads(message.to_json(indent=None))
    return {name: value for name, value in dumped.items() if name in carried}


def _reply(reply: dict, request_id: str | None) -> dict:
    """The reply as the API's JSON, which the journal keeps, with the request id beside it.

    A 200 whose body is not a message is a permanent error, since asking again gets the same."""
    if not (reply.get("type") == "message" and isinstance(reply.get("content"), list)
            and isinstance(reply.get("usage"), dict) and isinstance(reply.get("model"), str)):
        raise PermanentError(f"Claude answered 200 with something that is not a message: {str(reply)[:200]!r}")
    return {**reply, "_request_id": request_id}


def as_message(reply: dict):
    """The reply as the SDK's `Message`, for code that wants typed blocks. The journal keeps the raw JSON,
    so a reply this SDK cannot type (a newer block type) comes back as that dict, unchanged."""
    import anthropic
    import pydantic

    fields = {name: value for name, value in reply.items() if name != "_request_id"}
    try:
        message = anthropic.types.Message.model_validate_json(json.dumps(fields))
    except pydantic.ValidationError:
        return reply
    message._request_id = reply.get("_request_id")
    return message
