"""The one interface the runtime calls a model through, and the choice of provider by name.

Replies are plain dicts in the Messages API's shape, so they journal as JSON and replay
unchanged whichever provider produced them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from ..errors import UserError
from .anthropic import KEY_VARIABLE, AnthropicProvider
from .scripted import ScriptedProvider, file_script, read_replies

SPECS = ("'default' (Claude with ANTHROPIC_API_KEY, else a built-in script), "
         "'scripted' (a built-in script or a generic reply), 'scripted:PATH' (a JSON list of replies), "
         "'anthropic' (Claude, with ANTHROPIC_API_KEY) or 'anthropic:MODEL_ID'")
DEFAULT = "default"


class Provider(Protocol):
    """A model behind one call; `call_index` is the Nth model call of the run, from 0. `model` is the id the
    runtime chose (None: the provider's own). `on_tokens(n)` hears the output tokens so far while the reply
    is written, monotone, as often as the provider learns more: the caller throttles."""

    name: str

    def create(self, *, model: str | None, messages: list[dict], max_tokens: int,
               system: str | list | None = None, tools: list[dict] | None = None,
               call_index: int = 0, on_tokens: Callable[[int], None] | None = None) -> dict: ...


class Unresolved:
    """`--model default` before the run's first new model call.

    The choice belongs to the worker that makes that call, whose environment holds the key or not, so nothing is
    decided when the run is started."""

    name = DEFAULT

    def __init__(self, script: Callable | None = None):
        self.script = script

    def resolve(self) -> str | None:
        """The spec `default` means here: Claude when this process has a key, else the agent's built-in
        script; None when neither serves the run."""
        if os.environ.get(KEY_VARIABLE):
            return "anthropic"
        return "scripted" if self.script is not None else None

    def create(self, **request) -> dict:
        raise RuntimeError("--model default must be resolved before its first call")


def kept_replies(spec: str) -> list | None:
    """What a run keeps of its model beside the spec, or None for a spec other than `scripted:FILE`.

    For `scripted:FILE` it is the file's replies, read and checked now (a one-line UserError says what is
    wrong), so a worker anywhere answers from them."""
    kind, _, path = spec.partition(":")
    return read_replies(path) if kind == "scripted" and path else None


def provider_for(spec: str, script: Callable | None = None, replies: list | None = None) -> Provider:
    """The provider a spec names.

    `script` is the agent's own script for plain 'scripted'. `replies` is the list a `scripted:FILE` run keeps
    (`kept_replies`); without it, FILE is read now, as for a run an older tui-agent started."""
    if spec == DEFAULT:
        return Unresolved(script)
    if spec == "scripted":
        return ScriptedProvider(script)
    kind, _, path = spec.partition(":")
    if kind == "scripted" and path:
        return ScriptedProvider(file_script(path, replies), name=spec)
    if spec == "anthropic" or kind == "anthropic" and path:
        return AnthropicProvider(path or None, name=spec)
    raise UserError(f"unknown model provider {spec!r}: use {SPECS}")
