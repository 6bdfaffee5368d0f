"""The Anthropic provider: the real SDK against the fake Messages API on 127.0.0.1 (tests/fake_messages.py),
never the real API."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import anthropic
import pytest
from fake_messages import DUMMY_KEY, error_body, message, stream_events
from helpers import dump, on_sqlite, registry_of, work

from tui_agent import Agent, RetryPolicy
from tui_agent.errors import NotReachable, PermanentError, TemporaryError, UserError
from tui_agent.models import as_message, provider_for
from tui_agent.models.anthropic import DEFAULT_MODEL, AnthropicProvider
from tui_agent.models.pricing import price_for
from tui_agent.operate import approve, resume, start
from tui_agent.runtime.retry import is_temporary, is_unreachable
from tui_agent.store.journal import journal_for
from tui_agent.store.runs import events_for, get_run

TOOL_USE = {"type": "tool_use", "id": "toolu_fake01", "name": "lookup",
            "input": {"city": "Paris", "days": [1, 2, 3], "note": "a longer input, streamed in pieces"}}


def ask(provider=None, **kwargs):
    return (provider or AnthropicProvider()).create(
        **{"model": None, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, **kwargs})


# -- errors --------------------------------------------------------------------------------------

SPEND = [pytest.param(429, "enforced_spend_limit_reached", PermanentError, id="429-spend-limit")] if hasattr(
    anthropic, "EnforcedSpendLimitReachedError") else []


@pytest.mark.parametrize("status, code, expected", [
    *[(s, None, PermanentError) for s in (400, 401, 403, 404, 413)],
    (409, None, TemporaryError),
    *[(s, None, NotReachable) for s in (408, 429, 500, 502, 503, 504, 529)],   # waited out with patience
    *SPEND,
])
def test_each_status_maps_to_its_error_class(fake, status, code, expected):
    fake.play({"status": status, "body": error_body(status, code)})
    with pytest.raises((TemporaryError, PermanentError)) as raised:
        ask()
    assert type(raised.value) is expected
    assert is_temporary(raised.value) is (expected is not PermanentError)
    assert is_unreachable(raised.value) is (expected is NotReachable)
    assert len(fake.requests) == 1  # the SDK never retries by itself


@pytest.mark.parametrize("status, header, expected", [
    (400, "true", TemporaryError), (503, "false", PermanentError), (429, "false", PermanentError),
    (503, "true", NotReachable)])
def test_x_should_retry_overrides_the_status(fake, status, header, expected):
    fake.play({"status": status, "body": error_body(status), "headers": {"x-should-retry": header}})
    with pytest.raises((TemporaryError, PermanentError)) as raised:
        ask()
    assert type(raised.value) is expected


@pytest.mark.parametrize("headers, seconds", [({"retry-after": "7"}, 7.0), ({"retry-after-ms": "1500"}, 1.5),
                                              ({}, None)])
def test_retry_after_is_carried_on_the_error(fake, headers, seconds):
    fake.play({"status": 429, "body": error_body(429), "headers": headers})
    with pytest.raises(TemporaryError) as raised:
        ask()
    assert raised.value.retry_after_s == seconds


def test_connection_refused_is_not_reachable(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ANTHROPIC_API_KEY", DUMMY_KEY)
    with pytest.raises(NotReachable):
        ask()


def test_a_slow_trickle_hits_our_deadline(fake):
    fake.play({"body": message(), "trickle_s": 0.05})  # about 40 s for the whole stream; each read is quick
    t0 = time.monotonic()
    with pytest.raises(NotReachable, match="within 1s"):
        ask(AnthropicProvider(deadline_s=1.0, read_timeout_s=5.0))
    assert time.monotonic() - t0 < 4
    assert fake.requests[0]["body"]["stream"] is True


def test_the_fake_tells_when_a_request_is_in_flight(fake):
    fake.play({"body": message("late"), "hang_s": 0.5})
    replies = []
    caller = threading.Thread(target=lambda: replies.append(ask()))
    caller.start()
    assert fake.wait_for_requests(1)  # asked, and not answered yet
    assert not replies
    assert not fake.wait_for_requests(2, timeout=0.1)
    caller.join()
    assert replies[0]["content"][0]["text"] == "late"


def test_a_stream_that_stays_silent_hits_the_read_timeout(fake):
    fake.play({"body": message(), "hang_s": 3})
    t0 = time.monotonic()
    with pytest.raises(NotReachable):
        ask(AnthropicProvider(read_timeout_s=0.5))
    assert time.monotonic() - t0 < 2.5


@pytest.mark.parametrize("error, expected", [
    ({"type": "overloaded_error", "message": "Overloaded"}, NotReachable),
    ({"type": "api_error", "message": "Internal server error"}, NotReachable),
    ({"type": "invalid_request_error", "message": "bad"}, PermanentError)])
def test_an_error_event_mid_stream_is_classified_by_its_type(fake, error, expected):
    fake.play({"body": message("several words to stream"), "error_event": error})
    told = []
    with pytest.raises((TemporaryError, PermanentError)) as raised:
        ask(on_tokens=told.append)
    assert type(raised.value) is expected
    assert error["type"] in str(raised.value)  # it failed after the first delta
    assert len(told) == 1


@pytest.mark.parametrize("claimed", [10_000, None], ids=["connection-dropped", "stream-cut-short"])
def test_a_stream_that_breaks_off_is_not_reachable(fake, claimed):
    partial = b"".join(stream_events(message("one two three four"))[:4])  # the start, a block and one delta
    headers = {"content-type": "text/event-stream", **({"content-length": str(claimed)} if claimed else {})}
    fake.play({"body": partial, "headers": headers})
    with pytest.raises(NotReachable):
        ask()


@pytest.mark.parametrize("body, kind", [
    (b"plain text, not JSON", "text/plain"), (b"plain text, not JSON", "application/json"),
    ({"hello": "world"}, "application/json"), ({"type": "message"}, "application/json"),
    (json.dumps(message()).encode(), "application/json"),  # a whole message, but not the stream asked for
    (b"event: message_start\ndata: {not json\n\n", "text/event-stream")])
def test_a_200_that_is_not_a_message_is_permanent(fake, body, kind):
    fake.play({"body": body, "headers": {"content-type": kind}})
    with pytest.raises(PermanentError, match="not a message"):
        ask()


def test_a_reply_is_the_api_json_with_the_request_id(fake):
    fake.play({"body": message("four")})
    reply = ask(system="be brief")
    assert reply["content"] == [{"type": "text", "text": "four"}]
    assert reply["usage"]["cache_read_input_tokens"] == 2000
    assert reply["_request_id"] == "req_fake01"
    sent = fake.requests[0]
    assert sent["path"] == "/v1/messages"
    assert sent["body"]["stream"] is True
    assert sent["body"]["model"] == DEFAULT_MODEL
    assert sent["body"]["system"] == "be brief"
    assert sent["headers"].get("x-stainless-retry-count") == "0"


def test_a_streamed_reply_is_exactly_the_message_sent(fake):
    sent = {**message("Let me look that up for you."), "stop_reason": "tool_use",
            "content": [{"type": "text", "text": "Let me look that up for you."}, TOOL_USE]}
    fake.play({"body": sent, "event_delay_s": 0.001})
    assert ask() == {**sent, "_request_id": "req_fake01"}  # no field the SDK's accumulation adds


def test_on_tokens_counts_the_reply_as_it_streams(fake):
    text = " ".join(f"word{i}" for i in range(60))
    sent = {**message(text), "content": [{"type": "text", "text": text}, TOOL_USE]}
    fake.play({"body": sent})
    told = []
    ask(on_tokens=told.append)
    whole = len(text) + len(json.dumps(TOOL_USE["input"]))
    assert len(told) > 60
    assert told == sorted(told)
    assert told[0] < told[-1]
    assert told[-1] == pytest.approx(whole / 4, abs=1)


def test_what_on_tokens_raises_passes_unchanged(fake):
    class LeaseLost(Exception):
        pass

    def lose(tokens):
        raise LeaseLost()

    fake.play({"body": message("many words here")})
    with pytest.raises(LeaseLost):  # the caller's own error, not mistaken for Claude's
        ask(on_tokens=lose)


# -- which provider and model ---------------------------------------------------------------------

def test_specs_name_the_provider_and_the_pinned_model(fake):
    assert provider_for("anthropic").model == DEFAULT_MODEL
    assert price_for(DEFAULT_MODEL) is not None
    assert DEFAULT_MODEL.startswith("claude-sonnet-")
    pinned = provider_for("anthropic:claude-haiku-4-5")
    fake.play({"body": message(model="claude-haiku-4-5")}, {"body": message(model="claude-opus-5")})
    ask(pinned)
    ask(pinned, model="claude-opus-5")  # the runtime chose: the provider sends what it is given
    assert [r["body"]["model"] for r in fake.requests] == ["claude-haiku-4-5", "claude-opus-5"]
    with pytest.raises(UserError, match="anthropic:MODEL_ID"):
        provider_for("claude")


def test_the_suite_never_inherits_a_key():
    import os
    assert "ANTHROPIC_API_KEY" not in os.environ
    assert "ANTHROPIC_AUTH_TOKEN" not in os.environ
    assert os.environ["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"  # even a leaked key reaches nothing


# -- as_message -------------------------------------------------------------------------------------

def test_as_message_rebuilds_the_sdks_message(fake):
    sent = {**message("typed"), "content": [{"type": "text", "text": "typed"}, TOOL_USE]}
    fake.play({"body": sent})
    rebuilt = as_message(ask())
    assert isinstance(rebuilt, anthropic.types.Message)
    assert rebuilt._request_id == "req_fake01"
    assert json.loads(rebuilt.to_json(indent=None)) == sent
    assert rebuilt.content[1].input == TOOL_USE["input"]
    assert rebuilt.usage.cache_read_input_tokens == 2000


def test_as_message_keeps_a_reply_it_cannot_type_as_it_is():
    reply = {**message(), "content": [{"type": "future_block", "payload": 1}], "_request_id": "req_1"}
    assert as_message(reply) is reply


def test_a_scripted_reply_is_a_message_too_and_tells_its_tokens_once():
    told = []
    reply = provider_for("scripted").create(model=None, messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=64, on_tokens=told.append)
    rebuilt = as_message(reply)
    assert isinstance(rebuilt, anthropic.types.Message)
    assert rebuilt.content[0].text == reply["content"][0]["text"]
    assert told == [reply["usage"]["output_tokens"]]


# -- through the runtime --------------------------------------------------------------------------

def _ask_then_approve(ctx, request):
    reply = ctx.model("summarize", messages=[{"role": "user", "content": "sum up"}], max_tokens=64)
    ctx.approval("ok", "send it?")
    return {"text": reply["content"][0]["text"], "request_id": reply["_request_id"]}


ASKER = Agent(name="asker", run=_ask_then_approve)


def test_a_reply_is_journaled_with_its_cost_and_replayed_without_a_request(fake, store):
    registry = registry_of(ASKER)
    fake.play({"body": message("summed")})
    run_id, _ = start(store, registry, agent_name="asker", request={}, model="anthropic")
    first = work(store, registry, run_id, worker="w-one")
    assert (first.status, first.reason) == ("waiting", "approval")
    entry = journal_for(store, run_id)[0]
    assert json.loads(entry["result"])["content"][0]["text"] == "summed"
    # claude-sonnet-5-5: 100 in x $2, 1000 cache writes x $2.50, 2000 cache reads x $0.20, 20 out x $10
    assert entry["cost_usd"] == pytest.approx(3300 / 1_000_000)
    approve(store, run_id, note="yes")
    second = work(store, registry, run_id, worker="w-two")
    assert second.status == "succeeded"
    assert second.result == {"text": "summed", "request_id": "req_fake01"}
    assert len(fake.requests) == 1  # the replay asked nothing again


def test_retry_after_is_the_back_off(fake, store):
    registry = registry_of(Agent(name="asker", run=_ask_then_approve, retry=RetryPolicy(attempts=3, base_s=50)))
    fake.play({"status": 429, "body": error_body(429), "headers": {"retry-after-ms": "100"}}, {"body": message()})
    run_id, _ = start(store, registry, agent_name="asker", request={}, model="anthropic")
    assert work(store, registry, run_id).status == "waiting"  # not a durable 50 s-scale back-off
    retries = [e["message"] for e in events_for(store, run_id) if e["kind"] == "retry"]
    assert len(retries) == 1
    assert "next in 0.1s" in retries[0]
    assert len(fake.requests) == 2


def test_a_long_retry_after_becomes_a_durable_wait(fake, store):
    registry = registry_of(ASKER)
    fake.play({"status": 529, "body": error_body(529), "headers": {"retry-after": "3600"}})
    run_id, _ = start(store, registry, agent_name="asker", request={}, model="anthropic")
    outcome = work(store, registry, run_id)
    assert (outcome.status, outcome.reason) == ("waiting", "retry")
    assert get_run(store, run_id)["wake_at"] == pytest.approx(time.time() + 3600, abs=60)
    assert len(fake.requests) == 1


def test_an_sdk_that_cannot_be_imported_parks_the_run_like_a_missing_key(fake, store, monkeypatch):
    registry = registry_of(ASKER)
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as on a worker whose environment lacks the package
    run_id, _ = start(store, registry, agent_name="asker", request={}, model="anthropic")
    parked = work(store, registry, run_id, worker="w-nosdk")
    assert (parked.status, parked.reason) == ("parked", "environment")
    assert parked.message.startswith("the anthropic package cannot be imported by worker w-nosdk (")
    assert parked.message.endswith("; install tui-agent's dependencies where it runs and resume")
    assert fake.requests == []


def test_no_key_parks_the_run_and_resume_with_a_key_succeeds(fake, store, monkeypatch):
    registry = registry_of(ASKER)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    run_id, _ = start(store, registry, agent_name="asker", request={}, model="anthropic")
    parked = work(store, registry, run_id, worker="w-nokey")
    assert (parked.status, parked.reason) == ("parked", "environment")
    assert parked.message == "ANTHROPIC_API_KEY is not set for worker w-nokey; set it and resume"
    assert fake.requests == []
    monkeypatch.setenv("ANTHROPIC_API_KEY", DUMMY_KEY)
    fake.play({"body": message()})
    resume(store, run_id)
    assert work(store, registry, run_id, worker="w-key").status == "waiting"
    approve(store, run_id)
    assert work(store, registry, run_id, worker="w-key").status == "succeeded"
    assert len(fake.requests) == 1


def test_the_key_never_lands_on_disk(fake, store, tmp_path):
    registry = registry_of(Agent(name="asker", run=_ask_then_approve, retry=RetryPolicy(attempts=2, base_s=0.01)))
    fake.play({"body": message()}, {"status": 500, "body": error_body(500)})
    run_id, _ = start(store, registry, agent_name="asker", request={}, model="anthropic")
    work(store, registry, run_id)
    approve(store, run_id)
    work(store, registry, run_id)
    run_id, _ = start(store, registry, agent_name="asker", request={}, model="anthropic:claude-haiku-4-5")
    work(store, registry, run_id)  # fails on the 500s: errors and events are written too
    assert fake.requests[0]["headers"].get("authorization") == f"Bearer {DUMMY_KEY}"  # the key did go out
    files = [p for p in Path(tmp_path).rglob("*") if p.is_file()]
    assert any(p.name.startswith("runs.db") for p in files) or not on_sqlite(store)
    leaked = [p for p in files if DUMMY_KEY.encode() in p.read_bytes()]
    assert leaked == []
    rows = dump(store.path)
    assert any(run_id in row for row in rows) and not any(DUMMY_KEY in row for row in rows)


def test_the_pinned_model_is_the_one_reserved_against_a_cost_ceiling(fake, store):
    def ask_unpriced(ctx, request):
        return ctx.model("ask", messages=[{"role": "user", "content": "hi"}], max_tokens=8, model="no-such-model")

    registry = registry_of(Agent(name="unpriced", run=ask_unpriced))
    fake.play({"body": message(model="claude-haiku-4-5")})
    run_id, _ = start(store, registry, agent_name="unpriced", request={}, model="anthropic:claude-haiku-4-5",
                      budget={"cost_usd": 1.0})
    assert work(store, registry, run_id).status == "succeeded"  # priced as the pinned model, not refused
    assert fake.requests[0]["body"]["model"] == "claude-haiku-4-5"
