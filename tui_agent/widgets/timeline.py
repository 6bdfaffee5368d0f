"""The run's timeline: each journal entry of the current generation in order, a mark for its state,
its duration, `↺N` when it took N attempts, its kind and (for a model call) its model and cost, then the
position the run stands at (an effect in doubt, an approval it waits on, a model call in flight or one
whose worker died mid-call, the step it stopped at)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rich.text import Text
from textual.binding import Binding
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ..format import clock, cost, duration_ms, span, usd_narrow
from ..report import PROVIDERS, live_line, retry_said, retry_wait
from ..runtime.clock import now, parse_instant
from ..states import IN_DOUBT, CallState, EffectState, EntryKind, Reason, RunStatus, needs_person
from .safe import safe
from .status import NEEDS_YOU, bold_of, mark_of, tone_of
from .theme import palette, style

DONE, DOUBT, FAILED, WAITING = "✓", "?", "✗", "◔"
DONE_TONE, FAILED_TONE, WAITING_TONE = "text-success", "text-error", "text-secondary"
TAGS: dict[str, str] = {   # a row's kind (a str) to its tag; PENDING has none
    EntryKind.MODEL: "model", EntryKind.EFFECT: "effect", EntryKind.SLEEP: "sleep", EntryKind.APPROVAL: "ask",
    EntryKind.PROGRESS: "progress", EntryKind.FAILURE: "failure", EntryKind.TOOL: "tool"}
PENDING = "pending"   # the kind of the row that says where the run stands, which is no journal entry


@dataclass
class TimelineItem:
    """One row: a journal entry, or the pending position (`entry` None)."""

    position: int
    name: str
    kind: str
    mark: str
    tone: str                          # the theme variable the mark (and a spread note) is painted with
    note: str = ""
    duration_ms: float | None = None
    attempts: int = 1
    cost_usd: float | None = None
    entry: dict | None = None          # the report's journal entry
    step: dict | None = None           # the report's step row (attempts, duration, cost)
    effect: dict | None = None         # the ledger row (epoch times), for effects
    approval: dict | None = None       # the approvals row, for approvals
    calls: list[dict] = field(default_factory=list)  # a model call's attempts (the report's model_calls)
    run: dict = field(default_factory=dict)
    bold: bool = False

    @property
    def key(self) -> str:
        return f"p{self.position}"

    @property
    def pending(self) -> bool:
        return self.entry is None

    @property
    def in_doubt(self) -> bool:
        return bool(self.effect and self.effect["state"] in IN_DOUBT)

    @property
    def possibly_billed(self) -> float:
        """What the calls that died in flight here reserved: the API may have billed them."""
        return sum(c["reserved_usd"] or 0 for c in self.calls if c["state"] == CallState.DIED)


def shown_names(items: list[TimelineItem]) -> list[str]:
    """Names as the timeline shows them, an agent loop's entries nested under the loop's name.

    The entries are such as `fix/turn 2` and `fix/read_file`; the loop's name is written out on the first row of
    each stretch only. A name with a colon
    before its first slash is a step about a path (`file:src/app.py`), shown whole."""
    shown, group = [], None
    for item in items:
        head, nested, part = item.name.partition("/")
        if not nested or ":" in head:
            shown.append(item.name)
            group = None
            continue
        shown.append(f"{head} › {part}" if head != group else f"{' ' * len(head)} › {part}")
        group = head
    return shown


def iteration_note(outcome: dict) -> str:
    """A harness iteration's row, verdict first, for a narrow pane.

    From agents/harness.py's outcome: its status and the passing tests before and after, the diff stat, the cost
    and the task, as in `done 2→4 · 1f +9 · $.0025 · add-median-...`."""
    said = [outcome["status"]]
    if outcome.get("passing_before") is not None and outcome.get("passing") is not None:
        said[0] += f" {outcome['passing_before']}→{outcome['passing']}"
    if outcome.get("diff"):
        counts = {kind: n for n, kind in re.findall(r"(\d+) (file|insertion|deletion)", outcome["diff"])}
        said.append(" ".join(form.format(counts[kind]) for kind, form in
                             (("file", "{}f"), ("insertion", "+{}"), ("deletion", "−{}")) if kind in counts))
    if outcome.get("cost_usd") is not None:
        said.append(usd_narrow(outcome["cost_usd"]))
    said.append(outcome["task_id"])
    return " · ".join(said)


def model_label(call: dict) -> str:
    """`sonnet-5-5` for a Claude call, `scripted` for the offline provider: short enough for a row."""
    if call["provider"] != "anthropic":
        return PROVIDERS.get(call["provider"], call["provider"])
    return call["model"].removeprefix("claude-")


def timeline_items(view: dict, rows: list[dict], beside: dict, to_end: bool = True) -> list[TimelineItem]:
    """The timeline's items for a stretch of the current generation's entries.

    The entries are `rows`, from report.timeline_page, with what stands `beside` them. When the stretch reaches
    the run's end (`to_end`), where the run stands comes last."""
    run, checkpoint = view["run"], view["checkpoint"]
    ledger, asked, calls = beside["effects"], beside["approvals"], beside["calls"]
    items = []
    for row in rows:
        entry, step = row["entry"], row["step"]
        position, kind = entry["position"], entry["kind"]
        mark, tone, bold, note = DONE, DONE_TONE, False, ""
        if kind == EntryKind.FAILURE:
            mark, tone, bold = FAILED, FAILED_TONE, True
            note = (entry["result"] or {}).get("fingerprint", "") if isinstance(entry["result"], dict) else ""
        elif kind == EntryKind.SLEEP and run["status"] == RunStatus.WAITING and run["reason"] == Reason.SLEEP \
                and position == checkpoint.get("current_step", 0) - 1:
            mark, tone = WAITING, WAITING_TONE
            wake = (entry["result"] or {}).get("wake_at") if isinstance(entry["result"], dict) else None
            note = f"until {clock(wake, now())}" if wake else "sleeping"
        elif kind == EntryKind.APPROVAL and isinstance(entry["result"], dict) \
                and not entry["result"].get("approved", True):
            note = "denied"
        elif kind == EntryKind.EFFECT and isinstance(entry["result"], dict) \
                and {"task_id", "status"} <= set(entry["result"]):
            note = iteration_note(entry["result"])
        items.append(TimelineItem(position, entry["name"], kind, mark, tone, note, step.get("duration_ms"),
                                  step.get("attempts") or 1, step.get("cost_usd"), entry, step,
                                  ledger.get(position), asked.get(position), calls.get(position, []), run, bold))
    pending = _pending(view, beside, {i.position for i in items}) if to_end else None
    if pending:
        items.append(pending)
    return items


def _pending(view: dict, beside: dict, recorded: set[int]) -> TimelineItem | None:
    run, checkpoint = view["run"], view["checkpoint"]
    ledger, asked, calls = beside["effects"], beside["approvals"], beside["calls"]
    status, reason = run["status"], run["reason"]
    waiting_effects = [e for p, e in sorted(ledger.items()) if p not in recorded]
    if waiting_effects:
        e = waiting_effects[-1]
        if e["state"] in IN_DOUBT:
            mark, tone = DOUBT, NEEDS_YOU
        elif e["state"] == EffectState.CONFIRMED:
            mark, tone = DONE, DONE_TONE
        else:
            mark, tone = WAITING, WAITING_TONE
        return TimelineItem(e["position"], e["name"], "effect", mark, tone, e["state"], attempts=e["attempts"],
                            effect=e, run=run, bold=tone == NEEDS_YOU)
    questions = [a for p, a in sorted(asked.items()) if p not in recorded]
    if questions:
        a = questions[-1]
        asks = needs_person(status, reason)
        note = "waits for you" if a["decision"] is None else a["decision"]
        return TimelineItem(a["position"], a["name"], "approval", WAITING, NEEDS_YOU if asks else WAITING_TONE, note,
                            approval=a, run=run, bold=asks)
    if status in (RunStatus.SUCCEEDED, RunStatus.CANCELLED) and not run.get("error"):
        return None
    if status == RunStatus.WAITING and reason == Reason.SLEEP:
        return None                       # the sleep entry itself carries the wait
    position = checkpoint.get("current_step") or 0
    if position in recorded:
        return None
    asking = _asking(position, calls[position], view) if position in calls else None
    if asking is not None:
        return asking
    failing = re.search(rf"step {position} '([^']+)'", run.get("error") or "")
    name = failing.group(1) if failing else "next step"
    if wait := retry_wait(run, checkpoint.get("step_attempts")):
        label = f"waiting to retry: {retry_said(wait)}"
    elif status in (RunStatus.PARKED, RunStatus.WAITING) and reason:
        label = reason
    elif status == RunStatus.RUNNING and run.get("worker"):   # in flight since the last entry, or the claim
        since = max(parse_instant(t) for t in (run["updated_at"], checkpoint.get("updated_at")) if t)
        label = f"in flight for {span(now() - since)} on {run['worker']}"   # the age first: a narrow column cuts
    else:
        label = status
    return _standing(run, position, name, label,
                     attempts=(checkpoint.get("step_attempts") or 0) + (status == RunStatus.RUNNING))


def _standing(run: dict, position: int, name: str, note: str, **fields) -> TimelineItem:
    """The pending row, which says where the run stands, marked and painted as the run's status.

    A queued run's is in the plain foreground, in bold so that it still stands out."""
    status, reason = run["status"], run["reason"]
    return TimelineItem(position, name, PENDING, mark_of(status, reason), tone_of(status, reason), note, run=run,
                        bold=bold_of(status, reason) or status == RunStatus.QUEUED, **fields)


def _asking(position: int, calls: list[dict], view: dict) -> TimelineItem | None:
    """A model call with no reply recorded: streaming now, or in flight when its worker died (else None)."""
    run, checkpoint, last = view["run"], view["checkpoint"], calls[-1]
    if last["state"] not in (CallState.IN_FLIGHT, CallState.DIED):
        return None
    item = _standing(run, position, last["name"], "", attempts=(checkpoint.get("step_attempts") or 0) + 1,
                     calls=calls)
    if last["state"] == CallState.IN_FLIGHT:
        item.note = live_line(last["name"], last["provider"], last["tokens"] or 0, last["elapsed_s"])
    else:
        billed = cost(item.possibly_billed or None)
        item.note = f"in flight when the worker died · possibly billed {billed}"
    return item


class Timeline(OptionList, inherit_bindings=False):
    """An OptionList of TimelineItems; each row is laid out to the widget's width so columns line up. It holds a
    stretch of a run (the screen reads more as the highlight nears an end), so home and end are the screen's:
    the first and last entries of the run, not of the stretch."""

    BINDINGS = [Binding("down", "cursor_down", show=False), Binding("up", "cursor_up", show=False),
                Binding("pagedown", "page_down", show=False), Binding("pageup", "page_up", show=False),
                Binding("enter", "select", show=False)]

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.items: list[TimelineItem] = []
        self._width = 0

    # -- content ----------------------------------------------------------------------------------

    def set_items(self, items: list[TimelineItem], select: str | None = None, follow: bool = True) -> None:
        """Replace the rows in place, keeping the highlighted key or moving to `select`.

        On the last row, `follow` moves on to the new last row: the stretch reaches the run's end, which moved
        on."""
        keep = select or self.selected_key
        if follow and not select and self.items and keep == self.items[-1].key and items:
            keep = items[-1].key
        same_rows = [i.key for i in items] == [i.key for i in self.items]
        self.items = items
        prompts = self._prompts()
        if same_rows:
            for index, prompt in enumerate(prompts):
                if self.get_option_at_index(index).prompt != prompt:
                    self.replace_option_prompt_at_index(index, prompt)
        else:
            self.clear_options()
            self.add_options([Option(prompt, id=item.key) for item, prompt in zip(items, prompts)])
        keys = [i.key for i in items]
        highlight: int | None = None
        if keep in keys:
            highlight = keys.index(keep)
        elif items:
            highlight = len(items) - 1
        if self.highlighted != highlight:
            self.highlighted = highlight

    @property
    def selected_key(self) -> str | None:
        option = self.highlighted_option
        return option.id if option else None

    @property
    def selected(self) -> TimelineItem | None:
        key = self.selected_key
        return next((i for i in self.items if i.key == key), None)

    def select_key(self, key: str) -> bool:
        keys = [i.key for i in self.items]
        if key in keys:
            self.highlighted = keys.index(key)
            return True
        return False

    def on_resize(self) -> None:
        width = self.scrollable_content_region.width
        if width != self._width and self.items:
            self._width = width
            for index, prompt in enumerate(self._prompts()):
                self.replace_option_prompt_at_index(index, prompt)

    # -- layout -----------------------------------------------------------------------------------
    #
    # A row is: mark, name, kind, duration, extra (↺N, a model call's cost). Kind and extra are
    # columns as wide as their widest cell, so rows line up; when the name would get too narrow the
    # kind folds into the extra column (a model call then shows only its cost: only model calls cost).

    @staticmethod
    def _timing(item: TimelineItem) -> str:
        if item.pending or (item.note and not item.duration_ms):
            return item.note
        return duration_ms(item.duration_ms)

    @staticmethod
    def _extra(item: TimelineItem, with_tag: bool) -> str:
        parts = []
        if with_tag and item.kind != EntryKind.MODEL:
            parts.append(TAGS.get(item.kind, ""))
        if item.attempts > 1:
            parts.append(f"↺{item.attempts}")
        if item.kind == EntryKind.MODEL:
            parts.append(usd_narrow(item.cost_usd) if item.cost_usd is not None else "$?")
            if item.possibly_billed:
                parts.append("+" + usd_narrow(item.possibly_billed) + "?")
        elif item.note and item.duration_ms and not item.pending:
            parts.append(item.note)
        return " ".join(p for p in parts if p)

    @staticmethod
    def _tag(item: TimelineItem) -> str:
        """The kind column; a model call names its model there instead (`sonnet-5-5`, `scripted`)."""
        if item.kind == EntryKind.MODEL and item.calls:
            return model_label(item.calls[-1])
        return TAGS.get(item.kind, "")

    @staticmethod
    def _spread(item: TimelineItem) -> bool:
        """A row whose note reads across the rest of the line (the pending row, a long wait)."""
        return item.pending or len(Timeline._timing(item)) > 9

    def _prompts(self) -> list[Text]:
        width = self._width or self.scrollable_content_region.width or 36
        rows = [i for i in self.items if not self._spread(i)]
        names = shown_names(self.items)
        longest = max((len(n) for n in names), default=0)
        time_w = max((len(self._timing(i)) for i in rows), default=0)

        def widths(folded: bool) -> tuple[int, int, int]:
            tag_w = 0 if folded else max((len(self._tag(i)) for i in rows), default=0)
            extra_w = max((len(self._extra(i, folded)) for i in rows), default=0)
            used = 2 + sum(w + 1 for w in (tag_w, time_w, extra_w) if w)
            return tag_w, extra_w, width - used

        tag_w, extra_w, room = widths(False)
        if room < min(14, longest):
            tag_w, extra_w, room = widths(True)
        folded = tag_w == 0
        name_w = max(6, min(room, longest + 1))
        colours = palette(self.app)
        prompts = []
        for item, shown in zip(self.items, names):
            mark = style(colours, item.tone, item.bold) or None
            prompt = safe(self._prompt(item, mark, full=shown, name_w=name_w, tag_w=tag_w, time_w=time_w,
                                       extra_w=extra_w, folded=folded))   # names, notes
            prompt.truncate(width, overflow="ellipsis")
            prompts.append(prompt)
        return prompts

    def _prompt(self, item: TimelineItem, mark: str | None, *, full: str, name_w: int, tag_w: int, time_w: int,
                extra_w: int, folded: bool) -> Text:
        """One row; `mark` is the style of the item's mark in the current theme."""
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(item.mark, style=mark)
        line.append(" ")
        name = full if len(full) <= name_w else full[: max(1, name_w - 1)] + "…"
        if self._spread(item):
            shown = full if len(full) < name_w else name
            line.append(f"{shown:<{min(name_w, len(shown) + 2)}} ", style="bold" if item.pending else None)
            line.append(self._timing(item), style=mark)
            return line
        line.append(f"{name:<{name_w}} ")
        if tag_w:
            line.append(f"{self._tag(item):<{tag_w}} ", style="dim")
        if time_w:
            line.append(f"{self._timing(item):>{time_w}} ", style="dim" if not item.note else mark)
        if extra_w:
            extra = self._extra(item, folded)
            tag = TAGS.get(item.kind, "") if folded and item.kind != EntryKind.MODEL else ""
            if tag:
                line.append(tag, style="dim")
                extra = extra[len(tag):]
            line.append(f"{extra:<{extra_w - len(tag)}}", style="bold" if "↺" in extra else None)
        return line
