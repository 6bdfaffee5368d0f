"""An offline, deterministic model: the same call always gets the same reply, so runs replay
and tests compare replies byte for byte without a key or a network.

A script is a callable `script(messages, max_tokens, call_index) -> str | dict`; a str becomes
one text block, a dict is a (partial) Messages API reply whose missing fields are filled in.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import PermanentError, UserError
from ..strict_json import parse_json
from .tokens import estimate_prompt_tokens, estimate_tokens, text_of

Script = Callable[[list[dict], int, int], str | dict]

DEFAULT_MODEL = "claude-haiku-4-5"


def generic_reply(messages: list[dict], max_tokens: int, call_index: int) -> str:
    """The reply when no script is given: names the call and echoes the last user message."""
    last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    words = text_of(last_user.get("content", "")).split()[:8] if last_user else []
    said = " ".join(words) or "(nothing)"
    return f"Scripted reply to model call {call_index + 1}: you said {said!r}."


def read_replies(path: str | Path) -> list:
    """The replies a script file holds, read and checked now, or a one-line UserError saying what is wrong.

    They are what a run started with `scripted:FILE` keeps, so that a worker in another folder, or on another
    machine, answers from them without the file."""
    spec = f"scripted:{path}"
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        where = "" if Path(path).is_absolute() else f" (looked for {Path(path).absolute()})"
        raise UserError(f"{spec}: no such file{where}; give a JSON file holding a list of replies") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{spec}: cannot read it ({e})") from None
    return check_replies(parse_json(text, spec, example="it must hold a list of replies"), spec)


def check_replies(replies: object, spec: str) -> list:
    """`replies` when it is a list a script can answer from (each a string or a reply object); else a one-line
    UserError naming `spec`."""
    if not isinstance(replies, list):
        raise UserError(f"{spec}: holds a JSON {type(replies).__name__}; it must hold a list of replies")
    for i, reply in enumerate(replies, 1):
        if not isinstance(reply, (str, dict)):
            raise UserError(f"{spec}: reply {i} is a JSON {type(reply).__name__}; "
                            "each reply must be a string or a reply object")
        content = reply.get("content", []) if isinstance(reply, dict) else ""
        if not (isinstance(content, str) or
                isinstance(content, list) and all(isinstance(b, dict) for b in content)):
            raise UserError(f"{spec}: reply {i} has a bad \"content\"; "
                            "give a string or a list of block objects")
    return replies


def file_script(path: str | Path, replies: list | None = None) -> Script:
    """A script answering from a JSON list of replies: model call N of a run gets entry N. `replies`: the list as
    the run keeps it (read from the file when it was started); without it, the file is read now."""
    replies = read_replies(path) if replies is None else check_replies(replies, f"scripted:{path}")

    def script(messages: list[dict], max_tokens: int, call_index: int) -> str | dict:
        if call_index >= len(replies):
            count = f"{len(replies)} repl{'y' if len(replies) == 1 else 'ies'}"
            raise PermanentError(f"the script {path} has {count}; "
                                 f"model call {call_index + 1} asked for another")
        return replies[call_index]

    return script


def _cap(content: list[dict], max_tokens: int) -> list[dict]:
    """The blocks that fit in about `max_tokens * 4` characters; the last text block is cut."""
    room = max_tokens * 4
    kept = []
    for block in content:
        size = len(text_of(block))
        if block.get("type") == "text" and size > room:
            kept.append({**block, "text": block["text"][:room]})
            break
        if size > room:
            break
        kept.append(block)
        room -= size
    return kept


class ScriptedProvider:
    """A `Provider` that answers from a script (or a generic reply), offline and deterministic."""

    def __init__(self, script: Script | None = None, *, name: str = "scripted",
                 model: str = DEFAULT_MODEL):
        self.script = script or generic_reply
        self.name = name
        self.model = model

    def create(self, *, model: str | None, messages: list[dict], max_tokens: int,
               system: str | list | None = None, tools: list[dict] | None = None,
               call_index: int = 0, on_tokens: Callable[[int], None] | None = None) -> dict:
        """The reply comes whole, so `on_tokens` hears its output tokens once."""
        answer = self.script(messages, max_tokens, call_index)
        reply: dict[str, Any]
        if isinstance(answer, str):
            reply = {"content": [{"type": "text", "text": answer}]}
        elif isinstance(answer, dict):
            reply = copy.deepcopy(answer)  # the caller may change the reply; the script must not change
        else:
            raise PermanentError(f"the script returned a {type(answer).__name__}; "
                                 "it must return a string or a reply dict")
        content = reply.get("content", [])
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        content = [{"id": f"toolu_scripted_{call_index}_{i}", "input": {}, **block}
                   if block.get("type") == "tool_use" else block for i, block in enumerate(content)]
        stop_reason = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
        output_tokens = estimate_tokens(text_of(content))
        if output_tokens > max_tokens:
            content, output_tokens = _cap(content, max_tokens), max_tokens
            reply["stop_reason"] = "max_tokens"
        input_tokens = estimate_prompt_tokens(system, messages, tools)
        digest = hashlib.sha256(json.dumps([call_index, content], sort_keys=True).encode()).hexdigest()
        if on_tokens is not None:
            on_tokens(output_tokens)
        return {
            "id": f"msg_scripted_{digest[:16]}",
            "type": "message",
            "role": "assistant",
            "model": model or self.model,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            **reply,
            "content": content,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                      **reply.get("usage", {})},
        }
