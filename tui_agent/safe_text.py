"""The one sanitiser of text that others control (agents, models, tools, services, stored rows), for a terminal.

Every command's output, the notices and the TUI pass such text through `visible`, which writes each character
a terminal would act on (ESC, the other C0 controls but newline and tab, DEL, the C1 and bidi controls, a lone
surrogate) as its escape. `json_text` is `json.dumps` with the same escapes. Pure functions, no Textual.
Why: docs/architecture.md, section 11 (Exit codes and machine-readable output)."""

from __future__ import annotations

import json
import re
from typing import Any

# C0 but tab and newline, DEL, C1, the bidi controls (ALM, LRM, RLM, LRE..RLO, LRI..PDI) and lone surrogates
ACTED_ON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_SPACES = re.compile(r"\s+")


def _escape(found: re.Match) -> str:
    code = ord(found.group())
    return "\\r" if code == 0x0D else f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every character a terminal would act on written as its escape.

    The escapes are as Python writes them: `\\x1b`, `\\r`, `\\x9b`, `\\u202e`. Newlines, tabs and the length of
    what is there are kept."""
    return ACTED_ON.sub(_escape, text)


def one_line(text: str | None, limit: int) -> str:
    """`visible` text for one line, such as a notice, a progress line or a desktop notification.

    Line breaks and runs of spaces are made one space, and the text is clipped to `limit` characters with an
    ellipsis."""
    text = _SPACES.sub(" ", visible(text or "")).strip()
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def json_text(value: Any, **dumps: Any) -> str:
    """`json.dumps(value, ensure_ascii=False, **dumps)`, with what `visible` would escape written as `\\uXXXX`.

    json.dumps escapes the C0 characters already. Such a character can only stand inside a string there, so
    the text stays JSON and decodes to the same value; other text stays as it is."""
    return ACTED_ON.sub(lambda found: f"\\u{ord(found.group()):04x}", json.dumps(value, ensure_ascii=False, **dumps))
