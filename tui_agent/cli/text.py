"""How commands print: `echo` (the only caller of click.echo), the table, JSON, `ProgressLine` and show's lines."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import click

from ..format import COST_UNKNOWN, bar, pace, usd_exact
from ..report import REPORT_KEYS, live_line, retry_said
from ..runtime.clock import now
from ..safe_text import json_text, one_line, visible
from ..strict_json import finite


def echo(text: str = "", err: bool = False, nl: bool = True) -> None:
    """Print what a command prints, on a terminal and into a pipe alike, with what a terminal would act on made visible.

    A pipe's reader may print it to a terminal, and the runs' rows, messages and results hold text that agents,
    models and services wrote, so it goes through safe_text.visible. Only `artifact` writes bytes as stored, into
    a pipe or a file."""
    click.echo(visible(text), err=err, nl=nl)


def print_table(columns: tuple[tuple[str, int], ...], rows: list[tuple]) -> None:
    """Every text listing the same way: a header, then one line per row; a negative width aligns right."""
    def line(cells) -> str:
        return "  ".join(f"{str(cell):>{-width}}" if width < 0 else f"{str(cell):<{width}}"
                         for cell, (_, width) in zip(cells, columns)).rstrip()

    echo(line([name for name, _ in columns]))
    for row in rows:
        echo(line(row))


def json_out(value: Any) -> None:
    """Print `value` as strict JSON for scripts, with NaN and infinities written as null. Rows stored before input was
    read strictly may hold them, and JSON cannot write them; a bare NaN would break every reader."""
    echo(json_text(finite(value), indent=2, allow_nan=False))


PROGRESS_CHARS = 200   # of the progress line, which a long step name must not wrap (\r rewrites one line only)


class ProgressLine:
    """`step i/n name` rewritten in place on a terminal, and silent when stderr is not one.

    It has a bar, the steps a second and the time left once the run has said its length (`ctx.plan`), and a
    streaming model call's tokens and seconds (`summarize · Claude · 312 tokens · 4.1 s`), at most ten times a
    second."""

    def __init__(self) -> None:
        self.shown = sys.stderr.isatty()
        self._live_at = 0.0
        self._started: tuple[int, float] | None = None   # the first step this process ran: (position, time)

    def __call__(self, ctx, position: int, name: str, replayed: bool) -> None:
        self._write(self.line(ctx.total_steps, position, name, replayed, time.monotonic()))

    def line(self, total: int | None, position: int, name: str, replayed: bool, at: float) -> str:
        if not total:
            return f"step {position + 1} {name}" + (" (recorded)" if replayed else "")
        if not replayed and self._started is None:
            self._started = (position, at)
        done = position + 1
        rate = pace(done - self._started[0] - 1, total - self._started[0] - 1, at - self._started[1]) \
            if self._started and not replayed else ""
        return " ".join(part for part in (bar(done, total), f"{done}/{total}", name,
                                          "(recorded)" if replayed else "", f"· {rate}" if rate else "") if part)

    def live(self, ctx, name: str, provider: str, tokens: int, elapsed_s: float) -> None:
        if elapsed_s - self._live_at >= 0.1 or elapsed_s < self._live_at:
            self._live_at = elapsed_s
            total = f"/{ctx.total_steps}" if ctx.total_steps else ""
            self._write(f"step {ctx.position}{total} {live_line(name, provider, tokens, elapsed_s)}")

    def _write(self, line: str) -> None:
        if self.shown:   # a step's name is the agent's: one visible line, after this line's own control codes
            sys.stderr.write(f"\r\x1b[2K  {one_line(line, PROGRESS_CHARS)}")
            sys.stderr.flush()

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


def retrying(wait: dict) -> str:
    return retry_said(wait, now()) + (f"; the last: {wait['last_error']}" if wait["last_error"] else "")


def json_streamed(summary: dict, lists: dict[str, Iterator[dict]]) -> None:
    """Write the report as one JSON object in REPORT_KEYS order, the long lists an item at a time. That way memory does
    not grow with the run's length. It is the same document `json_out` would write, compact inside lists."""
    def dumped(value: Any, indent: int | None = 2) -> str:
        try:
            return json_text(value, indent=indent, allow_nan=False)
        except ValueError:   # a NaN stored before input was read strictly: written as null
            return json_text(finite(value), indent=indent, allow_nan=False)

    out = sys.stdout
    out.write("{")
    for i, key in enumerate(REPORT_KEYS):
        out.write(("," if i else "") + f"\n  {json.dumps(key)}: ")
        if key not in lists:
            out.write(dumped(summary[key]).replace("\n", "\n  "))
            continue
        out.write("[")
        for j, item in enumerate(lists[key]):
            out.write(("," if j else "") + "\n    " + dumped(item, None))
        out.write("\n  ]")
    out.write("\n}\n")
    out.flush()


def step_line(s: dict) -> str:
    cost = f"  {usd_exact(s['cost_usd'])}" if s["cost_usd"] else "  cost unknown" if s["kind"] == "model" \
        and s["cost_usd"] is None else ""
    return f"  {s['position']:>4}  {s['name']:<28} {s['kind']:<7}{s['duration_ms']:>10.1f} ms{cost}"


def section(title: str | None, items: Iterator[dict], line: Callable[[dict], str]) -> None:
    """A list printed as it is read (a page at a time), under its title when it has an item."""
    for i, item in enumerate(items):
        if i == 0 and title:
            echo(f"\n{title}")
        echo(line(item))


def call_state(call: dict) -> str:
    if call["state"] == "died":
        held = call["reserved_usd"]
        return "in flight when the worker died, possibly billed " + (usd_exact(held) if held is not None else
                                                                     "(cost unknown)")
    if call["state"] == "in_flight":
        return f"in flight: {call['tokens'] or 0} tokens, {call['elapsed_s']:.1f} s"
    if call["state"] == "failed":
        return f"failed: {call['error']}"
    cost = usd_exact(call["cost_usd"]) if call["cost_usd"] is not None else COST_UNKNOWN
    return f"answered {call['request_id'] or ''} {call['tokens']} tokens {cost}".replace("  ", " ")


def usage_cell(name: str, d: dict) -> str:
    used = usd_exact(d["used"]) if name == "cost_usd" else f"{d['used']:g}"
    limit = "" if d["limit"] is None else (f"/${d['limit']:.2f}" if name == "cost_usd" else
                                           f"/{d['limit']:.0f}" if float(d["limit"]).is_integer() else
                                           f"/{d['limit']:g}")
    return f"{name.removesuffix('_usd')} {used}{limit}" + (" (default)" if d.get("default") else "")


def bounds_line(budget: dict) -> str:
    """`show`'s line on how the run is bounded, when that is not just the ceilings on the budget line."""
    if budget["bounds"] == "unbounded":
        return "unbounded: this run opted out of the default ceilings; only the ceilings above (if any) hold"
    if budget["bounds"] == "legacy":
        return ("made before default ceilings: no default applies, so it is unbounded wherever no ceiling is "
                "shown; tui-agent resume RUN --budget NAME=VALUE sets one")
    return ""


def unpriced_note(budget: dict) -> str:
    count = budget["unpriced_model_calls"]
    return f"  (cost unknown for {count} model call{'s' * (count != 1)})" if count else ""
