"""Text that others control (agents, models, tools, services, stored rows) as a widget is given it.

`safe(...)` makes it Rich text, never markup, with what a terminal would act on made visible by the one
sanitiser (safe_text.visible). Textual reads a str as markup and passes ESC, C1 and bidi controls on to the
terminal, so every widget that shows such text is given `safe(...)` of it, a str or a Text of our own styles.
Why: docs/architecture.md, section 11 (Exit codes and machine-readable output); tests/engine/test_terminal_text.py."""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

from rich.text import Span, Text

from ..safe_text import ACTED_ON, visible


def safe(text: str | Text) -> Text:
    """`text` as Text, with every character a terminal would act on written as its escape.

    A Text keeps its styles on the same characters: a span grows with the escapes inside it."""
    if isinstance(text, str):
        return Text(visible(text))
    plain = text.plain
    starts = [found.start() for found in ACTED_ON.finditer(plain)]
    if not starts:
        return text
    grown = list(accumulate(len(visible(plain[at])) - 1 for at in starts))

    def moved(offset: int) -> int:
        before = bisect_left(starts, offset)       # the escapes that start before `offset`
        return offset + (grown[before - 1] if before else 0)

    return Text(visible(plain), style=text.style, justify=text.justify, overflow=text.overflow,
                no_wrap=text.no_wrap, end=text.end, tab_size=text.tab_size,
                spans=[Span(moved(span.start), moved(span.end), span.style) for span in text.spans])
