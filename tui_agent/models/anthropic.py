"""Claude through the official `anthropic` SDK, behind the `Provider` interface.

The SDK never retries (`max_retries=0`): our retry policy decides, durably, with the attempt count
kept across crashes. Every failure becomes a `TemporaryError` or a `PermanentError`. The key is read
from the environment at each call and never kept, logged or journaled. The SDK is imported at the
first call, so a process that only ever runs scripted models never pays for importing it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

from ..errors import PermanentError, TemporaryError
from .pricing import PRICES_DATE

KEY_VARIABLE = "ANTHROPIC_API_KEY"
# The newest Sonnet in pricing.py's table (dated PRICES_DATE): the model when neither the run nor the agent names one.
DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MODEL_DATE = PRICES_DATE
DEFAULT_DEADLINE_S = 600.0  # a whole call, however slowly its bytes trickle in
READ_TIMEOUT_S = 120.0  # silence between two reads
CONNECT_TIMEOUT_S = 10.0

TEMPORARY_STATUSES = {408, 409, 429}  # and every 5xx: 500-504, 529 overloaded
SPEND_LIMITS = ("EnforcedSpendLimitReachedError", "ContractSpendLimitReachedError", "RampLimitExceededError")


class DeadlinePassed(Exception):
    """Raised inside the response stream once the call's wall-clock deadline has passed."""


def _deadlined(chunks, deadline_at: float) -> Iterator[bytes]:
    for chunk in chunks:
        if time.monotonic() > deadline_at:
            raise DeadlinePassed()
        yield chunk


def _transport(provider: AnthropicProvider):
    """An httpx2 transport that checks the provider's deadline at every chunk: the SDK's timeout is per
    read, so a reply trickled byte by byte would otherwise outlive any timeout."""
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
        try:
            seconds = float(value) / scale
        except (TypeError, ValueError):
            continue
        if seconds >= 0:
            return seconds
    return None


def classify(error: Exception) -> Exception:
    """Our error for an SDK error: temporary when asking again later may work, permanent otherwise.
    `x-should-retry` from the server wins over the status; spend limits are 429s that no wait cures."""
    import anthropic

    if isinstance(error, anthropic.APIStatusError):
        headers = error.response.headers
        said = str(headers.get("x-should-retry", "")).lower()
        message = f"Claude answered {error.status_code}: {error}"
        spend_limits = tuple(getattr(anthropic, name) for name in SPEND_LIMITS if hasattr(anthropic, name))
        if said in ("true", "false"):
            temporary = said == "true"
        else:
            temporary = not isinstance(error, spend_limits) and (
                error.status_code in TEMPORARY_STATUSES or error.status_code >= 500)
        if temporary:
            return TemporaryError(message, retry_after_s=retry_after_s(headers))
        return PermanentError(message)
    if isinstance(error, anthropic.APITimeoutError):
        return TemporaryError(f"Claude did not answer in time: {error}")
    if isinstance(error, anthropic.APIConnectionError):
        return TemporaryError(f"could not reach Claude: {error}")
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

    def missing(self) -> str | None:
        """What the environment lacks for a call (the runtime parks the run rather than failing it)."""
        return None if os.environ.get(KEY_VARIABLE) else f"{KEY_VARIABLE} is not set"

    def _client(self):
        import anthropic
        import httpx2

        return anthropic.Anthropic(max_retries=0, http_client=httpx2.Client(transport=_transport(self)),
                                   timeout=anthropic.Timeout(self.read_timeout_s, connect=CONNECT_TIMEOUT_S))

    def create(self, *, model: str | None, messages: list[dict], max_tokens: int,
               system: str | None = None, tools: list[dict] | None = None,
               call_index: int = 0) -> dict:
        import anthropic

        extra = {**({"system": system} if system is not None else {}), **({"tools": tools} if tools else {})}
        self.deadline_at = time.monotonic() + self.deadline_s
        read_s = min(self.read_timeout_s, self.deadline_s)
        raw = None
        with self._client() as client:
            try:
                raw = client.messages.with_raw_response.create(
                    model=self.pinned or model or self.model, messages=messages, max_tokens=max_tokens,
                    timeout=anthropic.Timeout(read_s, connect=min(CONNECT_TIMEOUT_S, read_s)), **extra)
                message = raw.parse()
            except Exception as e:
                if time.monotonic() > self.deadline_at or isinstance(e, DeadlinePassed):
                    raise TemporaryError(f"Claude gave no complete reply within {self.deadline_s:g}s") from None
                if isinstance(e, anthropic.APIError) or raw is None:
                    raise classify(e) from None
                raise PermanentError(f"Claude answered {raw.status_code} with something that is not a message "
                                     f"({type(e).__name__}: {str(e)[:200]})") from None
        return _reply(message, raw.request_id)


def _reply(message, request_id: str | None) -> dict:
    """The reply as the API's JSON (what the journal keeps) with the request id beside it; a 200 whose
    body is not a Message is a permanent error, since asking again gets the same."""
    import anthropic

    reply = json.loads(message.to_json(indent=None)) if isinstance(message, anthropic.types.Message) else None
    if not (isinstance(reply, dict) and reply.get("type") == "message" and isinstance(reply.get("content"), list)
            and isinstance(reply.get("usage"), dict) and isinstance(reply.get("model"), str)):
        shown = str(message)[:200]
        raise PermanentError(f"Claude answered 200 with something that is not a message: {shown!r}")
    return {**reply, "_request_id": request_id}
