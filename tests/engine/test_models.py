"""Model providers and prices: costs computed by hand from the table, scripted replies that are
deterministic, shaped like the Messages API, capped by max_tokens, and scripts that run out loudly."""

import dataclasses
import json

import pytest

from tui_agent.errors import PermanentError, UserError
from tui_agent.models import (
    PRICES_DATE,
    PRICES_SOURCE,
    ScriptedProvider,
    cost_usd,
    provider_for,
)
from tui_agent.models.pricing import PRICES

USER = [{"role": "user", "content": "Summarize the nightly numbers for the platform team please"}]


def ask(provider, messages=USER, max_tokens=100, call_index=0, **kw):
    return provider.create(model=None, messages=messages, max_tokens=max_tokens, call_index=call_index, **kw)


# --- prices -----------------------------------------------------------------------------------

def test_plain_usage_costs_input_and_output_at_table_prices():
    # sonnet-4-5: $3 in, $15 out per million
    assert cost_usd("claude-sonnet-4-5", {"input_tokens": 1000, "output_tokens": 500}) == pytest.approx(0.0105)


def test_cache_creation_without_split_is_priced_at_the_5m_rate():
    # opus-4-5: 2000*5 + 10000*6.25 + 50000*0.50 + 1000*25 = 122,500 per million
    usage = {"input_tokens": 2000, "output_tokens": 1000,
             "cache_creation_input_tokens": 10000, "cache_read_input_tokens": 50000}
    assert cost_usd("claude-opus-4-5", usage) == pytest.approx(0.1225)


def test_cache_creation_split_prices_5m_and_1h_separately():
    # 2000*5 + 4000*6.25 + 6000*10 + 50000*0.50 + 1000*25 = 145,000 per million
    usage = {"input_tokens": 2000, "output_tokens": 1000,
             "cache_creation_input_tokens": 10000, "cache_read_input_tokens": 50000,
             "cache_creation": {"ephemeral_5m_input_tokens": 4000, "ephemeral_1h_input_tokens": 6000}}
    assert cost_usd("claude-opus-4-5", usage) == pytest.approx(0.145)


def test_missing_or_none_cache_fields_count_as_zero():
    usage = {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": None,
             "cache_read_input_tokens": None, "cache_creation": None}
    assert cost_usd("claude-haiku-4-5", usage) == pytest.approx((100 * 1 + 10 * 5) / 1e6)


def test_unknown_model_has_unknown_cost():
    usage = {"input_tokens": 10, "output_tokens": 10}
    assert cost_usd("gpt-4o", usage) is None
    assert cost_usd("claude-sonnet-5-1", usage) is None  # not silently priced as claude-sonnet-5
    assert cost_usd("claude-haiku-4-5-latest", usage) is None


def test_dated_model_id_costs_as_its_base_model():
    usage = {"input_tokens": 1234, "output_tokens": 567, "cache_read_input_tokens": 89}
    assert cost_usd("claude-haiku-4-5-20251001", usage) == cost_usd("claude-haiku-4-5", usage) is not None
    assert cost_usd("claude-opus-5-20260101", usage) == cost_usd("claude-opus-5", usage)
    assert cost_usd("claude-opus-5-20260101", usage) != cost_usd("claude-opus-5-5", usage)


def test_unconfirmed_price_makes_cost_unknown_only_when_used():
    # haiku-5-5: cache read not confirmed; input $0.10, output $0.50
    assert cost_usd("claude-haiku-5-5", {"input_tokens": 1000, "output_tokens": 1000}) == pytest.approx(0.0006)
    assert cost_usd("claude-haiku-5-5", {"input_tokens": 1000, "output_tokens": 1000,
                                         "cache_read_input_tokens": 0}) == pytest.approx(0.0006)
    assert cost_usd("claude-haiku-5-5", {"input_tokens": 1000, "output_tokens": 1000,
                                         "cache_read_input_tokens": 5}) is None


def test_haiku_5_5_prices_hold_only_up_to_100k_prompt_tokens():
    assert cost_usd("claude-haiku-5-5", {"input_tokens": 100_000, "output_tokens": 1}) is not None
    assert cost_usd("claude-haiku-5-5", {"input_tokens": 60_000, "output_tokens": 1,
                                         "cache_creation_input_tokens": 50_000}) is None


def test_table_rows_cover_every_listed_model():
    assert PRICES["claude-opus-4-7"] == PRICES["claude-opus-5"]
    assert (PRICES["claude-opus-4-6"].cache_write_1h, PRICES["claude-opus-4-8"].output) == (10, 25)
    assert PRICES["claude-sonnet-5"] == PRICES["claude-sonnet-5-5"]
    assert PRICES["claude-sonnet-4-6"].cache_read == 0.30
    assert PRICES["claude-opus-5-5"].cache_write_5m == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        PRICES["claude-haiku-4-5"].input = 0
    assert PRICES_DATE == "2026-11-29"
    assert PRICES_SOURCE
    assert "\n" not in PRICES_SOURCE


# --- scripted replies ---------------------------------------------------------------------------

def test_reply_has_the_messages_api_shape():
    reply = ask(ScriptedProvider())
    assert set(reply) == {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
    assert reply["id"].startswith("msg_scripted_")
    assert (reply["type"], reply["role"], reply["stop_reason"], reply["stop_sequence"]) == \
        ("message", "assistant", "end_turn", None)
    assert reply["model"] == "claude-haiku-4-5"
    [block] = reply["content"]
    assert block["type"] == "text"
    assert isinstance(block["text"], str)
    assert set(reply["usage"]) == {"input_tokens", "output_tokens"}
    assert cost_usd(reply["model"], reply["usage"]) is not None
    assert json.loads(json.dumps(reply)) == reply


def test_model_argument_is_echoed():
    reply = ScriptedProvider().create(model="claude-sonnet-4-5", messages=USER, max_tokens=50)
    assert reply["model"] == "claude-sonnet-4-5"


def test_same_call_gives_an_identical_reply():
    a = ask(ScriptedProvider(), call_index=3, system="be brief")
    b = ask(ScriptedProvider(), call_index=3, system="be brief")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert ask(ScriptedProvider(), call_index=4, system="be brief")["id"] != a["id"]


def test_generic_reply_names_the_call_and_the_last_user_words():
    messages = USER + [{"role": "assistant", "content": "ok"},
                       {"role": "user", "content": [{"type": "text", "text": "Now list the failing jobs"}]}]
    text = ask(ScriptedProvider(), messages=messages, call_index=1)["content"][0]["text"]
    assert "2" in text
    assert "Now list the failing jobs" in text
    assert "nightly" not in text


def test_usage_is_estimated_from_the_text_at_four_characters_a_token():
    provider = ScriptedProvider(lambda messages, max_tokens, call_index: "y" * 41)
    messages = [{"role": "user", "content": "x" * 20},
                {"role": "assistant", "content": [{"type": "text", "text": "x" * 20}]}]
    reply = ask(provider, messages=messages, system="s" * 40)
    assert reply["usage"] == {"input_tokens": 20, "output_tokens": 11}
    tiny = ScriptedProvider(lambda m, t, i: "")
    assert ask(tiny, messages=[{"role": "user", "content": ""}])["usage"] == {"input_tokens": 1, "output_tokens": 1}


def test_reply_longer_than_max_tokens_is_cut():
    provider = ScriptedProvider(lambda messages, max_tokens, call_index: "z" * 100)
    reply = ask(provider, max_tokens=5)
    assert reply["stop_reason"] == "max_tokens"
    assert reply["content"][0]["text"] == "z" * 20
    assert reply["usage"]["output_tokens"] == 5
    assert ask(provider, max_tokens=25)["stop_reason"] == "end_turn"


def test_callable_script_sees_messages_max_tokens_and_call_index():
    seen = []

    def script(messages, max_tokens, call_index):
        seen.append((messages, max_tokens, call_index))
        return f"call {call_index}"

    reply = ask(provider_for("scripted", script), max_tokens=77, call_index=2)
    assert seen == [(USER, 77, 2)]
    assert reply["content"] == [{"type": "text", "text": "call 2"}]


def test_partial_dict_reply_is_filled_in_and_not_shared():
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "fetch", "input": {"source": "db"}}
    script_reply = {"content": [{"type": "text", "text": "Fetching."}, tool_use]}
    provider = ScriptedProvider(lambda m, t, i: script_reply)
    reply = ask(provider)
    assert reply["stop_reason"] == "tool_use"
    assert reply["content"] == script_reply["content"]
    assert reply["type"] == "message"
    assert reply["usage"]["output_tokens"] >= 1
    reply["content"][1]["input"]["source"] = "changed"
    assert ask(provider)["content"][1]["input"] == {"source": "db"}


def test_dict_reply_keeps_the_fields_it_gives():
    provider = ScriptedProvider(lambda m, t, i: {"content": "No.", "stop_reason": "refusal",
                                                 "usage": {"output_tokens": 42}})
    reply = ask(provider)
    assert reply["content"] == [{"type": "text", "text": "No."}]
    assert reply["stop_reason"] == "refusal"
    assert reply["usage"]["output_tokens"] == 42
    assert reply["usage"]["input_tokens"] >= 1


# --- file scripts and specs ---------------------------------------------------------------------

def test_file_script_is_consumed_in_order_then_runs_out(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps(["first", {"content": [{"type": "text", "text": "second"}]}]))
    provider = provider_for(f"scripted:{path}")
    assert provider.name == f"scripted:{path}"
    assert ask(provider, call_index=1)["content"][0]["text"] == "second"
    assert ask(provider, call_index=0)["content"][0]["text"] == "first"
    with pytest.raises(PermanentError, match=r"has 2 replies; model call 3 asked for another"):
        ask(provider, call_index=2)


def test_file_script_wins_over_the_agents_script(tmp_path):
    path = tmp_path / "one.json"
    path.write_text('["from the file"]')
    provider = provider_for(f"scripted:{path}", lambda m, t, i: "from the agent")
    assert ask(provider)["content"][0]["text"] == "from the file"
    with pytest.raises(PermanentError, match=r"has 1 reply; model call 2"):
        ask(provider, call_index=1)


@pytest.mark.parametrize("spec", ["anthropic:", "scripted:", "", "Scripted", "openai:gpt"])
def test_unknown_spec_is_a_user_error_naming_the_specs(spec):
    with pytest.raises(UserError) as e:
        provider_for(spec)
    assert "'scripted:PATH'" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("content, says", [
    (None, "no such file"),
    ("[1, 2", "not valid JSON"),
    ('{"replies": []}', "must hold a list"),
    ('["ok", 3]', "reply 2"),
    ('[{"content": 3}]', "reply 1"),
])
def test_bad_script_file_is_a_one_line_user_error(tmp_path, content, says):
    path = tmp_path / "script.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=says) as e:
        provider_for(f"scripted:{path}")
    assert "\n" not in str(e.value)
