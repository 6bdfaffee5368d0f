"""The journal viewer: one timeline entry rendered for people (a model reply as its text and tool
calls with a usage and cost line, a step result as pretty JSON, or as a unified diff when it carries one,
an effect with its ledger row), or as raw JSON (`v`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.json import JSON
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..format import clock, cost, duration_ms, span, usd
from ..report import PROVIDERS, effect_shown
from ..runtime.clock import now, parse_instant
from ..safe_text import json_text
from ..states import IN_DOUBT, CallState, EffectState, EntryKind
from .safe import safe
from .theme import OFFLINE, Palette, style
from .timeline import PENDING, TimelineItem

LABEL = 9
GOOD, DOUBT, BAD = "text-success", "text-warning", "text-error"
EFFECT_TONES = {EffectState.CONFIRMED: GOOD, EffectState.UNKNOWN: DOUBT, EffectState.ATTEMPTED: DOUBT}


def pretty_json(value: Any) -> Text:
    """Indented, highlighted JSON, with the characters a terminal would act on as \\u escapes.

    The escapes are those `show --json` writes. Anything json cannot encode is shown by its str."""
    return JSON(json_text(value, indent=2, default=str)).text


def key_window(effect: dict, at: float | None = None) -> str:
    """How much longer the service remembers the effect's key (dedupe_ttl_s minus time since attempted_at)."""
    window = effect.get("dedupe_ttl_s")
    if window is None:
        return "no dedupe"
    attempted = effect.get("attempted_at")
    if not attempted:
        return f"{span(window)} once sent"
    left = window - ((at or now()) - attempted)
    return f"{span(left)} left" if left > 0 else "expired"


def _field(text: Text, label: str, value: str | Text, style: str | None = None) -> None:
    text.append(f"{label:<{LABEL}}", style="dim")
    text.append(value if isinstance(value, Text) else Text(str(value), style=style or ""))
    text.append("\n")


def effect_lines(effect: dict, at: float | None = None, colours: Palette = OFFLINE) -> Text:
    """A ledger row for people: state, key, service and how long it remembers the key, attempts, fence."""
    at = at or now()
    text = Text()
    state = effect["state"]
    when = (f" (attempted {clock(effect['attempted_at'], at)} by {effect.get('attempted_by') or '–'}, "
            f"fence {effect.get('fence')})") if effect.get("attempted_at") else ""
    _field(text, "state", Text.assemble((state, style(colours, EFFECT_TONES.get(state, ""))), when))
    _field(text, "key", effect["key"])
    window = effect.get("dedupe_ttl_s")
    service = [effect.get("service") or "the service"]
    service.append(f"dedupes keys {span(window)}" if window else "does not deduplicate")
    if window and effect.get("attempted_at"):
        left = window - (at - effect["attempted_at"])
        service.append(f"remembers this key {span(left)} more" if left > 0 else
                       f"forgot this key {span(-left)} ago")
    lookup = effect.get("lookup_ttl_s")
    service.append(("lookup available" + (f" for {span(lookup)}" if lookup else "")) if effect.get("has_lookup")
                   else "no lookup")
    _field(text, "service", " · ".join(service))
    first = effect.get("first_attempted_at")
    _field(text, "attempts", f"{effect['attempts']}" + (f" (first {clock(first, at)})" if first and
                                                         effect["attempts"] > 1 else ""))
    if effect.get("done_by"):
        _field(text, "done by", f"{effect['done_by']} (this run reused its confirmed result)")
    if effect.get("decided_by"):
        _field(text, "decided", f"by {effect['decided_by']} at {clock(effect.get('decided_at'), at)}"
               + (f": {effect['note']}" if effect.get("note") else ""))
    if state in IN_DOUBT:
        text.append("may or may not have happened: c reconciles\n", style=style(colours, DOUBT))
    return text


def model_lines(reply: Any, cost: float | None) -> Text:
    """A Messages API reply: model, usage and cost first (they fit a small screen), then its text
    blocks and tool calls with their inputs."""
    text = Text()
    if not isinstance(reply, dict):
        return pretty_json(reply)
    usage = reply.get("usage") or {}
    parts = [f"{usage.get('input_tokens', 0):,} in", f"{usage.get('output_tokens', 0):,} out"]
    for key, label in (("cache_read_input_tokens", "cache read"), ("cache_creation_input_tokens", "cache write")):
        if usage.get(key):
            parts.append(f"{label} {usage[key]:,}")
    text.append("usage ", style="dim")
    text.append(" · ".join(parts))
    text.append(" · cost ", style="dim")
    text.append(usd(cost) if cost is not None else "unknown (no price for this model)", style="bold")
    head = " · ".join(str(p) for p in (reply.get("model"), reply.get("stop_reason") and
                                          f"stop {reply['stop_reason']}") if p)
    if head:
        text.append(f"\n{head}", style="dim")
    text.append("\n\n")
    for block in reply.get("content") or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            text.append(block.get("text", "").rstrip() + "\n\n")
        elif kind == "tool_use":
            text.append(f"tool_use {block.get('name')}", style="bold")
            text.append(f"  {block.get('id', '')}\n", style="dim")
            text.append(pretty_json(block.get("input", {})))
            text.append("\n\n")
        elif kind in ("thinking", "redacted_thinking"):
            text.append("thinking\n", style="dim bold")
            text.append((block.get("thinking") or "(redacted)").rstrip() + "\n\n", style="dim italic")
        else:
            text.append(f"{kind or 'block'}\n", style="dim bold")
            text.append(pretty_json(block))
            text.append("\n\n")
    text.rstrip()
    return text


_CALL_STATES = {CallState.ANSWERED: "answered", CallState.FAILED: "failed", CallState.IN_FLIGHT: "in flight",
                CallState.DIED: "in flight when the worker died"}


def call_lines(calls: list[dict], colours: Palette = OFFLINE) -> Text:
    """Each attempt of a model call: who answered it, or that its worker died while it was in flight (the
    API may have billed it, so its reservation stays counted)."""
    text = Text("calls\n", style="dim")
    for call in calls:
        request = call["request"]
        state = _CALL_STATES.get(call["state"], call["state"])
        text.append(f"  {call['call']}  ")
        tone = DOUBT if call["state"] == CallState.DIED else BAD if call["state"] == CallState.FAILED else ""
        text.append(state, style=style(colours, tone, bold=tone == BAD) or None)
        parts = [f"{PROVIDERS.get(call['provider'], call['provider'])} {call['model']}", call.get("request_id"),
                 f"{call['tokens']:,} tokens" if call.get("tokens") is not None else None,
                 duration_ms(call["elapsed_s"] * 1000), f"fence {call['fence']}"]
        if call["state"] == CallState.ANSWERED:
            parts.append(cost(call["cost_usd"]))
        elif call["state"] == CallState.DIED:
            held = call["reserved_usd"]
            parts.append(f"possibly billed {usd(held)}" if held is not None else cost(None))
        text.append(" · " + " · ".join(p for p in parts if p) + "\n", style="dim")
        if call.get("error"):
            text.append(f"     {call['error']}\n", style=style(colours, BAD, bold=True))
        new = len(request.get("messages") or [])
        text.append(f"     asked: max_tokens {request.get('max_tokens')} · {new} new message{'s' * (new != 1)}"
                    + (f" after {request['after']}" if request.get("after") else "")
                    + (" · system" if request.get("system") else "") + (" · tools" if request.get("tools") else "")
                    + "\n", style="dim")
    return text


DIFF_TONES = (("+++", "text-muted"), ("---", "text-muted"), ("@@", "text-secondary"), ("+", GOOD), ("-", BAD))


def diff_lines(result: dict, colours: Palette = OFFLINE) -> Text:
    """The result of a step that changed a file, as its other fields and then its unified `diff`.

    Each line of the diff is in the colour of what it is, and keeps its + or - sign, which says it without
    colour."""
    text = Text()
    for name, value in result.items():
        if name != "diff":
            _field(text, name, value if isinstance(value, str) else json.dumps(value))
    text.append("\n")
    for line in result["diff"].splitlines():
        tone = next((tone for sign, tone in DIFF_TONES if line.startswith(sign)), "")
        text.append(line + "\n", style=style(colours, tone) if tone else "")
    return text


# What each kind of entry shows below its meta line: `(text, item, at, colours)`, adding to `text`. One that
# returns False leaves the entry to _result, as does a kind not in _BODIES.
Body = Callable[[Text, TimelineItem, float, Palette], bool]


def _model(text: Text, item: TimelineItem, at: float, colours: Palette) -> bool:
    if item.entry is None:
        return False
    text.append(model_lines(item.entry["result"], (item.step or {}).get("cost_usd")))
    if item.calls:
        text.append("\n\n")
        text.append(call_lines(item.calls, colours))
    return True


def _effect(text: Text, item: TimelineItem, at: float, colours: Palette) -> bool:
    entry = item.entry
    if item.effect:
        text.append(effect_lines(item.effect, at, colours))
    if entry is not None:
        text.append("\nresult\n", style="dim")
        text.append(pretty_json(entry["result"]))
    elif item.effect and item.effect.get("result") is not None:
        text.append("\nresult\n", style="dim")
        text.append(pretty_json(json.loads(item.effect["result"]) if isinstance(item.effect["result"], str)
                                else item.effect["result"]))
    return True


def _sleep(text: Text, item: TimelineItem, at: float, colours: Palette) -> bool:
    entry = item.entry
    if entry is None:
        return False
    wake = entry["result"].get("wake_at") if isinstance(entry["result"], dict) else None
    if wake:
        left = wake - at
        _field(text, "wakes at" if left > 0 else "woke at", clock(wake, at) + (f" (in {span(left)})" if left > 0
                                                                              else ""))
    text.append(pretty_json(entry["result"]))
    return True


def _approval(text: Text, item: TimelineItem, at: float, colours: Palette) -> bool:
    entry, a = item.entry, item.approval or {}
    if a.get("question"):
        _field(text, "question", a["question"])
    if entry is not None and isinstance(entry["result"], dict):
        r = entry["result"]
        _field(text, "decision", "approved" if r.get("approved") else "denied",
               style(colours, GOOD) if r.get("approved") else style(colours, BAD, bold=True))
        _field(text, "by", f"{r.get('by') or '–'} at {r.get('at') or '–'}")
        if r.get("note"):
            _field(text, "note", r["note"])
    elif a.get("decision"):
        _field(text, "decision", f"{a['decision']} by {a.get('decided_by') or '–'}")
    else:
        text.append("waits for your answer: a approves or denies\n", style=style(colours, DOUBT))
    return True


def _tool(text: Text, item: TimelineItem, at: float, colours: Palette) -> bool:
    if item.entry is None or not isinstance(item.entry["result"], dict):
        return False
    r = item.entry["result"]
    _field(text, "for", r.get("tool_use_id", ""))
    if r.get("is_error"):
        _field(text, "error", "went back to the model as an error result", style(colours, BAD, bold=True))
    text.append("\n" + str(r.get("content", "")))
    return True


def _failure(text: Text, item: TimelineItem, at: float, colours: Palette) -> bool:
    if item.entry is None or not isinstance(item.entry["result"], dict):
        return False
    _field(text, "error", item.entry["result"].get("error", ""), style(colours, BAD, bold=True))
    _field(text, "print", item.entry["result"].get("fingerprint", ""))
    return True


def _result(text: Text, item: TimelineItem, colours: Palette) -> None:
    """Any other entry: its result, as a diff when it carries one, else as JSON."""
    entry = item.entry
    if entry is None:
        return
    if isinstance(entry["result"], dict) and isinstance(entry["result"].get("diff"), str):
        text.append(diff_lines(entry["result"], colours))
    else:
        text.append(pretty_json(entry["result"]))


_BODIES: dict[str, Body] = {EntryKind.MODEL: _model, EntryKind.EFFECT: _effect, EntryKind.SLEEP: _sleep,
                            EntryKind.APPROVAL: _approval, EntryKind.TOOL: _tool, EntryKind.FAILURE: _failure}


def human(item: TimelineItem, situation: str = "", at: float | None = None, colours: Palette = OFFLINE) -> Text:
    """The selected entry for people: its meta line, then what its kind shows (_BODIES)."""
    at = at or now()
    text = Text()
    entry = item.entry
    if entry is not None:
        meta = [item.kind, f"attempts {item.attempts}" if item.attempts > 1 else None,
                duration_ms(item.duration_ms) or None, f"started {clock(_epoch(entry.get('started_at')), at)}",
                f"fence {entry.get('fence')}"]
        text.append(" · ".join(m for m in meta if m) + "\n", style="dim")
        if entry.get("artifact"):
            text.append(f"artifact {entry['artifact']}\n", style="dim")
        text.append("\n")
    body = _BODIES.get(item.kind)
    if body is None or not body(text, item, at, colours):
        _result(text, item, colours)
    if item.pending and item.kind == PENDING:
        text.append(situation or item.note)
        text.append("\n")
        if item.calls:
            text.append("\n")
            text.append(call_lines(item.calls, colours))
    return text


def raw(item: TimelineItem, view: dict) -> Text:
    """The selected entry as stored, in `show --json`'s shapes.

    That is the journal entry, its ledger row or approval; for the pending row, where the run stands
    (report.run_view's run and checkpoint)."""
    shown: dict[str, Any] = {}
    if item.entry is not None:
        shown = dict(item.entry)
        if item.step:
            shown.update(attempts=item.step.get("attempts"), duration_ms=item.step.get("duration_ms"),
                         cost_usd=item.step.get("cost_usd"))
    if item.effect is not None:
        shown["ledger" if shown else "effect"] = effect_shown(item.effect)
    if item.approval is not None:
        shown["approval"] = item.approval
    if not shown:
        shown = {"position": item.position, "status": view["run"]["status"], "reason": view["run"]["reason"],
                 "checkpoint": view["checkpoint"]}
    return pretty_json(shown)


def _epoch(stamp: str | None) -> float | None:
    return parse_instant(stamp) if stamp else None


class JournalViewer(VerticalScroll):
    """A scrolling view of one entry, shown `safe` (an entry is the agent's, the model's or a tool's text);
    `plain` is what it shows, as text."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.text = Text()
        self.shown: tuple | None = None

    def compose(self):
        yield Static(id="viewer-body")

    def show(self, text: Text, key: tuple | None = None) -> None:
        """Show `text`; back to the top only when a different entry (`key`) is shown."""
        text = safe(text)
        if text == self.text and key == self.shown:
            return
        moved = key != self.shown
        self.text, self.shown = text, key
        self.query_one("#viewer-body", Static).update(text)
        if moved:
            self.scroll_home(animate=False)

    @property
    def plain(self) -> str:
        return self.text.plain
