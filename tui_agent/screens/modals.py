"""Decisions, one small modal each: confirm, approve, reconcile, raise a budget, start a run, fork.
Each returns its answer through `dismiss`; the caller acts through operate.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Select, Static

from ..errors import UserError
from ..format import stopwatch
from ..operate import answered, parse_budget, why_not_ceiling
from ..runtime.agent import BUDGET_DIMENSIONS, UNBOUNDED
from ..runtime.clock import CLOCK, Clock, iso
from ..runtime.effects import sender_warning
from ..states import IN_DOUBT
from ..strict_json import parse_json
from ..widgets.safe import safe

SHORT_BELOW = 30   # rows: on a shorter terminal a dialog is compact (app.tcss, `.-short .dialog`)


class Dialog(ModalScreen):
    """A modal with a title, a body and two buttons named by what they do.

    The buttons are `DO` and `DONT`, never a bare "Confirm"/"Cancel", which reads backwards in "Cancel r-…?";
    escape is the harmless one. Its title is the
    screen's `title`: a subclass names it in `TITLE`, or sets `title` when it depends on what is decided.

    The title and the buttons stay on the screen; a body taller than the screen scrolls between them (to the
    focused field by itself, page up and page down otherwise). An answer that ends the run (`confirmation`) is
    asked about first, however it was given: the button, or enter in any of the dialog's fields."""

    BINDINGS = [Binding("escape", "cancel", "Close"),
                Binding("pageup", "scroll_body(-1)", "Scroll up", show=False),
                Binding("pagedown", "scroll_body(1)", "Scroll down", show=False)]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (SHORT_BELOW, "-tall")]
    TITLE = ""
    DO = "Confirm"
    DONT = "Close"

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(safe(self.title or ""), classes="title")      # it may name an effect, a run's question
            with VerticalScroll(classes="dialog-body", can_focus=False):   # the focus goes to its fields
                yield from self.body()
            with Horizontal(classes="buttons"):
                yield Button(self.DO, variant="primary", id="confirm")
                yield Button(self.DONT, id="cancel")

    def body(self) -> ComposeResult:
        yield from ()

    def answer(self) -> Any:
        return True

    def confirmation(self, answer: Any) -> ConfirmModal | None:
        """The question to ask before giving `answer` when it ends the run, which cannot be undone; None gives
        it at once."""
        return None

    @on(Button.Pressed, "#confirm")
    def _confirm(self) -> None:
        self.submit()

    @on(Button.Pressed, "#cancel")
    def _close(self) -> None:
        self.dismiss(None)

    def on_input_submitted(self) -> None:
        self.submit()

    def submit(self) -> None:
        """Give the answer, once `answer` has one and, for one that cannot be undone, the person said yes to
        its question; a no comes back to this dialog as it was left."""
        answer = self.answer()
        if answer is None:
            return
        question = self.confirmation(answer)
        if question is None:
            self.dismiss(answer)
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.dismiss(answer)

        self.app.push_screen(question, confirmed)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_scroll_body(self, pages: int) -> None:
        scroll_pages(self.query_one(".dialog-body", VerticalScroll), pages)


def scroll_pages(body: VerticalScroll, pages: int) -> None:
    """Scroll `body` by whole pages, a line of the last one kept in view."""
    body.scroll_relative(y=pages * max(1, body.scrollable_content_region.height - 1), animate=False)


def pressed_id(choices: RadioSet) -> str | None:
    """The id of the choice pressed in `choices`, or None while none is; every choice of these dialogs has one."""
    pressed = choices.pressed_button
    return None if pressed is None else pressed.id


def chosen(select: Select[Any]) -> str:
    """The option chosen in a Select made with `allow_blank=False`, which always holds one of its options."""
    value = select.value
    assert isinstance(value, str)   # never Select.NULL: it has no blank to go back to
    return value


class ConfirmModal(Dialog):
    """A yes/no question whose buttons say what each does, such as "Cancel the run" and "Keep it".

    Focus starts on the harmless one, so an enter pressed by reflex changes nothing."""

    AUTO_FOCUS = "#cancel"

    def __init__(self, title: str, question: str, do: str, dont: str) -> None:
        super().__init__()
        self.title, self.question = title, question
        self.DO, self.DONT = do, dont

    def body(self) -> ComposeResult:
        yield Static(safe(self.question))


class ApproveModal(Dialog):
    """Approve or deny what a run asks, with a note."""

    DO = "Record the decision"

    def __init__(self, run_id: str, question: str) -> None:
        super().__init__()
        self.title = f"Approve {run_id}"
        self.run_id, self.question = run_id, question

    def body(self) -> ComposeResult:
        yield Static(safe(self.question))
        with RadioSet(id="decision"):
            yield RadioButton("Approve", value=True, id="approve")
            yield RadioButton("Deny", id="deny")
        yield Input(placeholder="note (optional)", id="note")

    def answer(self) -> tuple[bool, str | None]:
        deny = pressed_id(self.query_one("#decision", RadioSet)) == "deny"   # Approve starts pressed
        return deny, self.query_one("#note", Input).value.strip() or None

    def confirmation(self, answer: tuple[bool, str | None]) -> ConfirmModal | None:
        deny, _ = answer
        if not deny:
            return None
        return ConfirmModal(f"Deny {self.run_id}?", f"{self.run_id} is {answered(True)}.", "Deny it", "Don't deny")


class Choices(RadioSet):
    """A RadioSet whose cursor stops at the first and the last choice it can take instead of wrapping round.

    Up on the first choice must not land on the last one ("Abandon the run")."""

    def _step(self, direction: int) -> None:
        buttons = list(self.children)
        index = (0 if direction > 0 else len(buttons) - 1) if self._selected is None else self._selected + direction
        while 0 <= index < len(buttons):
            if not buttons[index].disabled:
                self._selected = index
                return
            index += direction

    def action_next_button(self) -> None:
        self._step(1)

    def action_previous_button(self) -> None:
        self._step(-1)


RECONCILE_CHOICES = [("ask", "Ask the service", "look the key up, then decide"),
                     ("happened", "It happened", "record it as done (optional result)"),
                     ("not-done", "It did not happen", "send again with the same key"),
                     ("abandon", "Abandon the run", "cancel it; the doubt stays on record")]


class ReconcileModal(Dialog):
    """What happened to an effect whose outcome is unknown: the facts, then the choices. The simulator
    hands its scenario's clock (the key window is counted on the scenario's time) and the choices it allows;
    a `scenario`'s modal has no sender check (its workers are not processes here) and no result or note
    (the scenario records neither)."""

    DO = "Record the decision"

    def __init__(self, effect: Mapping[str, Any], clock: Clock = CLOCK, allowed: tuple[str, ...] | None = None,
                 scenario: bool = False) -> None:
        super().__init__()
        self.effect, self.clock, self.scenario = effect, clock, scenario
        self.allowed = allowed or tuple(value for value, _, _ in RECONCILE_CHOICES)
        self.title = f'Reconcile "{effect["name"]}"'

    def _dedupe_left_s(self) -> float | None:
        """How much longer the service throws away a repeat of this key, or None when it does not now."""
        at, window = self.effect.get("attempted_at"), self.effect.get("dedupe_ttl_s")
        left = window - (self.clock.now() - at) if window and at else None
        return left if left is not None and left > 0 else None

    def body(self) -> ComposeResult:
        e = self.effect
        at = e.get("attempted_at")
        since = self.clock.now() - at if at else None
        service = e.get("service") or "the service"
        left = self._dedupe_left_s()
        remembers = f"dedupes this key {stopwatch(left)} more" if left is not None else "does not deduplicate it now"
        yield Static(safe("The worker stopped after it tried this and before it could record whether it succeeded."
                          if e["state"] in IN_DOUBT else f"The effect is {e['state']}."))
        yield Static(safe(f"key        {e['key']}"))
        yield Static(safe(f"attempted  {iso(at) if at else '-'}" + (f" ({stopwatch(since)} ago)" if since is not None
                                                                      else "")
                          + f" by {e.get('attempted_by') or '-'} · attempts {e['attempts']}"))
        yield Static(safe(f"service    {service} · {remembers} · {'has lookup' if e['has_lookup'] else 'no lookup'}"))
        warning = self.sender_warning()
        if warning:
            yield Static(safe(f"warning: {warning}."), id="sender-warning", classes="warning")
        with Choices(id="decision"):
            for value, label, hint in (choice for choice in RECONCILE_CHOICES if choice[0] in self.allowed):
                if value == "ask" and not e["has_lookup"]:     # said in words and dimmed, not by colour alone
                    yield RadioButton(Text(f"{label:<20} not available: no lookup", style="dim"), id=value,
                                      disabled=True)
                else:
                    yield RadioButton(f"{label:<20} {hint}", id=value, value=value == self.allowed[0])
        if not self.scenario:
            yield Input(placeholder='result as JSON (with "It happened", optional)', id="result")
            yield Input(placeholder="note (optional)", id="note")

    def sender_warning(self) -> str | None:
        """Before a person answers "It did not happen": the worker that attempted it may still send it."""
        session = getattr(self.app, "session", None)     # none in the Simulator's own app
        reader = session and session.reader
        if self.scenario or reader is None or not self.effect.get("attempted_by") or "run_id" not in self.effect:
            return None
        return sender_warning(reader.conn, self.effect)

    def answer(self) -> tuple[str, Any, str | None] | None:
        decision = pressed_id(self.query_one("#decision", RadioSet))
        if decision is None:
            self.notify("choose what happened first", severity="warning")
            return None
        if self.scenario:
            return decision, None, None
        text = self.query_one("#result", Input).value.strip()
        try:
            result = parse_json(text, "the result") if text else None
        except UserError as e:
            self.notify(str(e), severity="error")
            return None
        return decision, result, self.query_one("#note", Input).value.strip() or None

    def confirmation(self, answer: tuple[str, Any, str | None]) -> ConfirmModal | None:
        e = self.effect
        if answer[0] == "not-done" and not self.scenario and self._dedupe_left_s() is None:
            return ConfirmModal(f"Send {e['name']} of {e['run_id']} again?",
                                f"The next worker does it again under key {e['key']}, and "
                                f"{e.get('service') or 'the service'} does not deduplicate it now: if it did happen, "
                                "it happens twice.", "Send it again", "Don't send")
        if answer[0] != "abandon":
            return None
        return ConfirmModal(f"Abandon {e['run_id']}?",
                            f"The run ends for good, cancelled at {e['name']}; {e['name']} is not tried again and "
                            f"stays on record as {e['state']}. Its journal stays readable.",
                            "Abandon the run", "Don't abandon")


BULK_LABELS = {"park": "Park", "resume": "Resume", "cancel": "Cancel", "approve": "Approve", "deny": "Deny",
               "reconcile-ask": "Ask the service"}


class BulkModal(Dialog):
    """The marked runs together, saying how many are marked and how many of them each action applies to.

    The counts are of the runs as they are now; each run is checked again as it is acted on. Choosing one and pressing
    the button is the one confirmation; escape changes nothing. `preview`: operate.bulk_preview of the marked runs;
    `action` chosen first."""

    DO = "Act on them"

    def __init__(self, marked: int, preview: dict, action: str) -> None:
        super().__init__()
        self.title = f"{marked} run{'s' * (marked != 1)} marked"
        self.marked, self.preview, self.action = marked, preview, action

    def body(self) -> ComposeResult:
        yield Static("Each run is decided in its own transaction, by the same rule as one at a time.")
        first = self.action if self.preview[self.action].done else next(
            (action for action, decided in self.preview.items() if decided.done), None)
        with Choices(id="action"):
            for action, decided in self.preview.items():
                label = f"{BULK_LABELS[action]:<16} {len(decided.done)} of {self.marked}"
                yield RadioButton(label if decided.done else Text(f"{label}: applies to none", style="dim"),
                                  id=f"do-{action}", value=action == first, disabled=not decided.done)
        yield Static(id="refused", classes="warning")
        yield Input(placeholder="note (optional)", id="note")

    def on_mount(self) -> None:
        self._show(pressed_id(self.query_one("#action", RadioSet)))

    @on(RadioSet.Changed, "#action")
    def _changed(self, event: RadioSet.Changed) -> None:
        self._show(event.pressed.id)

    def _show(self, pressed: str | None) -> None:
        """The button says what it does to how many; a line says what stands in the way of the others."""
        decided = self.preview[pressed.removeprefix("do-")] if pressed is not None else None
        count = len(decided.done) if decided else 0
        self.query_one("#confirm", Button).label = (f"{BULK_LABELS[decided.action]} {count} run{'s' * (count != 1)}"
                                                    if decided else self.DO)
        refused = decided.refused if decided else ()
        self.query_one("#refused", Static).update(safe(
            f"not for {len(refused)}: {refused[0]}" + (f" (and {len(refused) - 1} more)" if len(refused) > 1 else "")
            if refused else ""))

    def answer(self) -> tuple[str, str | None] | None:
        pressed = pressed_id(self.query_one("#action", RadioSet))
        if pressed is None:
            self.notify("no action applies to the marked runs", severity="warning")
            return None
        return pressed.removeprefix("do-"), self.query_one("#note", Input).value.strip() or None


class BudgetModal(Dialog):
    """Raise one ceiling of a run, or drop its default ceilings (`unbounded`); the run is resumed with it."""

    TITLE = "Raise a budget ceiling"
    DO = "Raise and resume"

    def __init__(self, budget: dict, exhausted: str | None = None) -> None:
        super().__init__()
        self.budget, self.exhausted = budget, exhausted

    def body(self) -> ComposeResult:
        dims = self.budget["dimensions"]
        options = [(f"{name}  used {dims[name]['used']:g} of {dims[name]['limit']}"
                    + (" (default)" if dims[name].get("default") else ""), name) for name in BUDGET_DIMENSIONS]
        chosen = self.exhausted or max(BUDGET_DIMENSIONS, key=lambda n: dims[n]["fraction"] or 0)
        yield Select(options, value=chosen, allow_blank=False, id="dimension")
        yield Input(placeholder="new ceiling, e.g. 1.50; or unbounded: no default ceilings", id="value")

    def answer(self) -> dict[str, float] | None:
        name = chosen(self.query_one("#dimension", Select))
        text = self.query_one("#value", Input).value.strip()
        if text == UNBOUNDED:   # the run drops the default ceilings still in place (its own ones hold)
            return parse_budget([UNBOUNDED])
        try:
            limits = parse_budget([f"{name}={text}"])
        except UserError as e:
            self.notify(str(e), severity="error")
            return None
        why = why_not_ceiling(limits, {name: self.budget["dimensions"][name]["used"]})
        if why:  # the run would stop again at its next call
            self.notify(why, severity="error")
            return None
        return limits


class GotoModal(Dialog):
    """`g` on the run screen: a position of the run's timeline to go to."""

    TITLE = "Go to a position"
    DO = "Go there"

    def __init__(self, entries: int) -> None:
        super().__init__()
        self.entries = entries

    def body(self) -> ComposeResult:
        last = max(0, self.entries - 1)
        yield Label(f"{self.entries:,} entries: positions 0 to {last:,}")
        yield Input(placeholder=f"a position, e.g. {last // 2}", type="integer", id="position")

    def answer(self) -> int | None:
        text = self.query_one("#position", Input).value.strip()
        if not (text.isascii() and text.isdigit()):   # isdigit alone takes "²", which int() refuses
            self.notify("type a position: a whole number from 0", severity="error")
            return None
        return int(text) if len(text) <= 19 else self.entries   # past any run's end: its last entry


class RuleModal(Dialog):
    """`u` on a harness run that waits for you: one more line for its rulebook, then the run resumes."""

    TITLE = "Add a rule"
    DO = "Add it and resume"

    def body(self) -> ComposeResult:
        yield Label("One line for the run's RULES.md, earned by the failure you see: it is committed in the "
                    "run's worktree, every later iteration reads it, and the run resumes.")
        yield Input(placeholder="e.g. Do not change pkg/base.py.", id="rule")

    def answer(self) -> str | None:
        text = " ".join(self.query_one("#rule", Input).value.split())
        if not text:
            self.notify("type the rule, one line", severity="error")
            return None
        return text


class SaveFilterModal(Dialog):
    """A name to keep the runs list's filter under, which the palette then offers (`filter save` on the CLI)."""

    TITLE = "Save the filter"
    DO = "Save it"

    def __init__(self, words: str) -> None:
        super().__init__()
        self.words = words

    def body(self) -> ComposeResult:
        yield Static(safe(f"Keep {self.words} under a name; ctrl+p offers it on the runs list."))
        yield Input(placeholder="a name, e.g. failed-nightly", id="name")

    def answer(self) -> str | None:
        name = self.query_one("#name", Input).value.strip()
        if not name:
            self.notify("type a name for the filter", severity="error")
            return None
        return name


class NewRunModal(Dialog):
    """Start a run of an agent with its input."""

    TITLE = "Start a run"
    DO = "Start the run"

    def __init__(self, agents: list[str]) -> None:
        super().__init__()
        self.agents = agents

    def body(self) -> ComposeResult:
        first = "hello" if "hello" in self.agents else self.agents[0]   # the quickest to try, offline
        yield Select([(name, name) for name in self.agents], value=first, allow_blank=False, id="agent")
        yield Input(value="{}", placeholder='input as a JSON object, e.g. {"date": "2026-11-29"}', id="input")

    def answer(self) -> tuple[str, dict] | None:
        text = self.query_one("#input", Input).value.strip() or "{}"
        try:
            request = parse_json(text, "the input")
        except UserError as e:
            self.notify(str(e), severity="error")
            return None
        return chosen(self.query_one("#agent", Select)), request


class PredictModal(Dialog):
    """Predict first: the learner commits to numbers before the scenario says them, then steps or runs it."""

    TITLE = "Predict first"
    DO = "Predict"

    def body(self) -> ComposeResult:
        yield Static("How many emails will the team get, and how many fetches will the two workers make in all?")
        yield Input(placeholder="emails the team gets", id="emails", type="integer")
        yield Input(placeholder="fetches made", id="fetches", type="integer")

    def answer(self) -> tuple[int, int] | None:
        said = []
        for field in ("emails", "fetches"):
            text = self.query_one(f"#{field}", Input).value.strip()
            if not (text.isascii() and text.isdigit() and len(text) <= 9):
                self.notify(f"give the {field} as a whole number, such as 1", severity="warning")
                self.query_one(f"#{field}", Input).focus()
                return None
            said.append(int(text))
        return said[0], said[1]


class LogModal(ModalScreen):
    """The coding agent's log of a harness iteration, the whole artifact, to scroll.

    enter on the iteration's timeline row opens it; escape, q, enter or its button close it."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close"),
                Binding("pageup", "scroll(-1)", "Scroll up", show=False),
                Binding("pagedown", "scroll(1)", "Scroll down", show=False)]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_line, self.text = title, text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog log"):
            yield Label(safe(self.title_line), classes="title")
            with VerticalScroll(classes="dialog-body", id="log-body"):
                yield Static(safe(self.text or "(the coding agent printed nothing)"), id="log")
            with Horizontal(classes="buttons"):
                yield Button("Close", id="cancel")

    @on(Button.Pressed, "#cancel")
    def action_dismiss(self) -> None:  # type: ignore[override]  # the key's action takes no result
        self.dismiss(None)

    def action_scroll(self, pages: int) -> None:
        scroll_pages(self.query_one("#log-body", VerticalScroll), pages)
