"""Crash it yourself: the nightly report on the real runtime, one boundary per key press.

The scenario runs in its own thread and throw-away store (sim/stepper.py); this screen sends it commands and
shows each stop. Keys 0-4 walk the document's steps (5-7 go further); a key pressed on the way acts at the
next stop, in order; step back replays the presses less the last one. Notices take the title's line, one at a
time, so nothing covers the counts or the Why. Why: docs/architecture.md, section 9.1."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Static

from ..messages import ScenarioAdvanced
from ..sim import LESSONS, Settings
from ..sim.explain import Prediction, why
from ..sim.settings import CRASH_STORY, LABELS, SETTING_NAMES, STEPS, Lesson, lesson_of
from ..sim.stepper import CRASH, LEAVE, RUN, STEP, Stepper, View
from ..widgets.caption import Caption
from ..widgets.footer import KeysFooter
from ..widgets.simulation import KEYS, keys_line, outcome_text, settings_strip, timeline_text
from ..widgets.theme import follow_theme, palette, style
from .modals import PredictModal, ReconcileModal

PERSON_CHOICES = ("happened", "not-done")
NOTICE_S = 4.0
BY_NUMBER = {lesson.number: lesson for lesson in LESSONS}
FURTHER = [lesson.number for lesson in LESSONS if lesson.further]
NO_COUNTS = dict.fromkeys(("fetches", "model_calls", "reports_written", "send_requests", "emails_received",
                           "lookups"), 0)


def _bindings() -> list[BindingType]:
    keys: list[BindingType] = [Binding("space", "press('step')", "Step"), Binding("enter", "press('run')", "Run"),
            Binding("exclamation_mark", "press('crash')", "Crash", key_display="!"),
            Binding("n", "press('worker_two')", "Worker 2"), Binding("p", "predict", "Predict"),
            Binding("left", "press('back')", "Back", key_display="←"),
            Binding("backspace", "press('back')", "Back: the stop before, by the same presses again", show=False),
            Binding("r", "reset", "Reset to the defaults", show=False)]
    keys += [Binding(str(lesson.number), f"lesson({lesson.number})",
                     f"{'Further lesson' if lesson.further else 'Step' if lesson.number else 'Lesson'} "
                     f"{lesson.number}: {lesson.title}", show=False) for lesson in LESSONS]
    keys += [Binding(KEYS[name], f"cycle('{name}')", f"Next {LABELS[name].lower()} setting", show=False)
             for name in SETTING_NAMES]
    return keys + [Binding("pagedown", "why(1)", "Scroll the Why down", show=False),
                   Binding("pageup", "why(-1)", "Scroll the Why up", show=False),
                   Binding("escape", "leave", "Back to the runs (in the TUI)", show=False)]


class SimulatorScreen(Screen):
    CSS_PATH = "simulator.tcss"
    BINDINGS = _bindings()
    FOOTER = ("space", "enter", "exclamation_mark", "n", "p", "left")

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.settings = settings or Settings()
        self.stepper: Stepper | None = None
        self.view: View | None = None
        self.prediction: Prediction | None = None
        self._busy = False
        self._pending: list[str] = []       # presses the scenario has not reached yet, in order
        self._asking = False                # the reconcile modal is open for the stop in view
        self._notice: str | None = None
        self._notice_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Caption(id="sim-title", classes="summary")
        yield Static(id="sim-settings")
        with Horizontal(id="sim-panes"):
            for worker in (1, 2):
                with VerticalScroll(id=f"sim-worker-{worker}", classes="pane", can_focus=False):
                    yield Static(classes="rows")
            yield Static(id="sim-outcome", classes="pane")
        with VerticalScroll(id="sim-why", classes="pane", can_focus=False):
            yield Static(id="sim-why-text")
        yield Static(id="sim-keys")
        yield KeysFooter()

    def on_mount(self) -> None:
        for pane, title in (("outcome", "Outcome"), ("why", "Why"), ("worker-1", "Worker 1")):
            self.query_one(f"#sim-{pane}").border_title = title
        follow_theme(self, self.show)
        self.begin()

    def on_unmount(self) -> None:
        if self.stepper is not None:
            self.stepper.close()

    @property
    def lesson(self) -> tuple[int, int] | None:
        """The lesson and part the settings are (cycling a setting can land on one), or None."""
        return lesson_of(self.settings)

    # -- the scenario ----------------------------------------------------------------------------

    def begin(self, presses: Sequence[str] = ()) -> None:
        """A new execution with the current settings, through `presses` to the stop after them (the old one,
        if any, is abandoned and removed)."""
        if self.stepper is not None:
            self.stepper.close()
        self.stepper, self.view = Stepper(self.settings, presses), None
        self._busy = True
        self._advance(self.stepper, None)
        self.show()

    def start_over(self) -> None:
        """A new execution from its first stop, with no prediction yet and no press left over: a new lesson or
        new settings."""
        self.prediction, self._pending = None, []
        self.begin()

    @work(thread=True, group="simulator")
    def _advance(self, stepper: Stepper, command: str | None) -> None:
        view = stepper.start() if command is None else stepper.command(command)
        if view is not None:   # None: the stepper was closed on the way (a reset)
            self.post_message(ScenarioAdvanced(stepper, view))

    def send(self, command: str) -> None:
        self._busy = True
        self._advance(self.stepper, command)

    def on_scenario_advanced(self, message: ScenarioAdvanced) -> None:
        if message.stepper is not self.stepper:
            return   # from an execution reset since
        view = self.view = message.view
        self._busy = False
        if view.error or view.asks is not None:
            self._pending = []   # presses made before a person was asked (or the scenario failed): not answers
        self.show()
        if view.error:
            self.say(f"the simulator failed: {view.error}")
        self.ask_person()
        self._pump()

    def on_screen_resume(self) -> None:
        self.ask_person()   # a person was to be asked while the screen was left (escape, in the TUI)

    def ask_person(self) -> None:
        """The reconcile modal, when the scenario waits for a person's answer and this screen is in front."""
        view = self.view
        if view is None or view.asks is None or self._busy or self._asking or not self.is_current:
            return

        def answered(answer) -> None:
            self._asking = False
            self.send(answer[0] if answer and answer[0] in PERSON_CHOICES else LEAVE)

        assert self.stepper is not None   # a view comes from self.stepper (on_scenario_advanced)
        self._asking = True
        self.app.push_screen(ReconcileModal(view.asks, clock=self.stepper.scenario.clock, allowed=PERSON_CHOICES,
                                            scenario=True), answered)

    # -- keys --------------------------------------------------------------------------------------

    def action_press(self, what: str) -> None:
        """step | run | crash | worker_two | back: acted on at the stop the presses before it reach."""
        self._pending.append(what)
        self._pump()

    def _pump(self) -> None:
        while self._pending and not self._busy and self.view is not None and self.view.asks is None \
                and not self.view.error:
            self._act(self.view, self._pending.pop(0))

    def _act(self, view: View, what: str) -> None:
        if what == "back":
            if not view.presses:
                self.say("this is where every execution starts: nothing to step back to")
            else:
                self.begin(view.presses[:-1])
            return
        if view.outcome is not None:
            self.say("this execution has ended: ← steps back, a lesson's key or a setting's starts another")
        elif what == "crash" and not view.can_crash:
            self.say("only worker 1 crashes, at one of its boundaries (▸ marks where it stands)")
        elif what == "worker_two" and view.can_crash:
            self.say("worker 2 starts once worker 1 has crashed or finished: ! crashes it, space goes on")
        else:
            self.send({"step": STEP, "run": RUN, "crash": CRASH, "worker_two": STEP}[what])

    def action_predict(self) -> None:
        if self.view is not None and self.view.outcome is not None:
            self.say("this execution has ended: predict before the next one (← steps back into this one)")
            return

        def predicted(said: tuple[int, int] | None) -> None:
            if said is not None:
                self.prediction = Prediction(*said)
                self.show()

        self.app.push_screen(PredictModal(), predicted)

    def action_reset(self) -> None:
        self.settings = Settings()
        self.start_over()

    def action_lesson(self, number: int) -> None:
        lesson, current, phase = BY_NUMBER[number], self.lesson, 0
        if current and current[0] == number and self.view and self.view.outcome is not None:
            phase = (current[1] + 1) % len(lesson.phases)
        self.settings = lesson.phases[phase].settings
        self.start_over()

    def action_cycle(self, name: str) -> None:
        self.settings = self.settings.cycled(name)
        self.say(f"{LABELS[name]}: {getattr(self.settings, name)} ({self.settings.describe(name)}); started again")
        self.start_over()

    def action_why(self, direction: int) -> None:
        why_pane = self.query_one("#sim-why", VerticalScroll)
        why_pane.scroll_to(y=why_pane.scroll_y + direction * max(1, why_pane.size.height - 1), animate=False)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Escape leaves only inside the TUI: `tui-agent simulate` has nothing behind it (q quits)."""
        return action != "leave" or not isinstance(self.app, SimulatorApp)

    def action_leave(self) -> None:
        self.app.pop_screen()

    def say(self, notice: str) -> None:
        """A notice on the title's line for a few seconds, in place of any before it."""
        if self._notice_timer is not None:
            self._notice_timer.stop()
        self._notice = notice
        self._notice_timer = self.set_timer(NOTICE_S, self._unsay)
        self._show_title()

    def _unsay(self) -> None:
        self._notice, self._notice_timer = None, None
        self._show_title()

    # -- painting ------------------------------------------------------------------------------------

    def show(self) -> None:
        colours, view, settings = palette(self.app), self.view, self.settings
        self._show_title()
        self.query_one("#sim-settings", Static).update(settings_strip(settings, colours))
        outcome = view.outcome if view is not None else None
        finished = outcome is not None
        stop = view.stop if view is not None and outcome is None else None
        rows = view.workers if view is not None else ((), ())
        later = settings.restart_after
        self.query_one("#sim-worker-2").border_title = ("Worker 2 (starts now)" if later == "now"
                                                        else f"Worker 2 ({later} later)")
        idle = "found the run finished: nothing to do" if finished else "starts once worker 1 has crashed or finished"
        for worker, waiting in ((1, ""), (2, idle)):
            pane = self.query_one(f"#sim-worker-{worker}", VerticalScroll)
            pane.query_one(".rows", Static).update(
                timeline_text(rows[worker - 1], stop if stop and stop.worker == worker else None, colours, waiting))
            self.call_after_refresh(pane.scroll_end, animate=False)   # the newest row, once laid out
        counts = self.query_one("#sim-outcome", Static)
        counts.update(outcome_text(view.counts if view is not None else NO_COUNTS, colours, finished, self.prediction))
        counts.border_subtitle = ("" if outcome is None else "waits for a person" if outcome.waiting
                                  else outcome.status)
        self.query_one("#sim-why-text", Static).update(Text(self._why()))
        self.call_after_refresh(self.query_one("#sim-why", VerticalScroll).scroll_home, animate=False)
        self.query_one("#sim-keys", Static).update(keys_line(self._keys(), colours))

    def _keys(self) -> list[tuple[str, str]]:
        keys = [("0", "defaults"), ("1-4", "the document's steps"), (f"{FURTHER[0]}-{FURTHER[-1]}", "further"),
                ("r", "reset")]
        return keys + ([] if isinstance(self.app, SimulatorApp) else [("esc", "runs")])

    def _show_title(self) -> None:
        caption = self.query_one("#sim-title", Caption)
        if self._notice is None:
            caption.text = self._title()
        else:
            caption.text = Text(f"⚠ {self._notice}", style=style(palette(self.app), "text-warning", bold=True))

    def _title(self) -> str:
        current = self.lesson
        if current is None:
            return "Crash it yourself · your own settings"
        lesson = BY_NUMBER[current[0]]
        return f"Crash it yourself · {_name(lesson, current[1])}: {lesson.title}"

    def _why(self) -> str:
        view = self.view
        if view is None:
            return "Starting…"
        if view.error:
            return f"The simulator failed (a bug, not the lesson): {view.error}. r starts again."
        if view.outcome is not None:
            return f"{why(view.outcome, self.prediction)} {self._next()}".rstrip()
        if view.asks is not None:
            return "Worker 2 cannot tell whether the email went out, so a person decides."
        if not view.presses:
            return self._invitation()
        stop = view.stop
        assert stop is not None   # a view without an error, an outcome or a question is made at a stop
        if stop.boundary is not None:
            where = f"Worker {stop.worker} stands {CRASH_STORY[stop.boundary]}."
            crash = " ! crashes it here." if stop.worker == 1 else ""
            return f"{where} space runs the real runtime to its next boundary, enter to the end.{crash}"
        if stop.worker == 1:
            return f"{stop.label[0].upper()}{stop.label[1:]}. space or n starts worker 2 " \
                   f"({self.settings.describe('restart_after')})."
        return f"Worker 2: {stop.label}. space goes on."

    def _invitation(self) -> str:
        """Before the first step: what this lesson asks (in the document's words), and predict first."""
        current = self.lesson
        says = BY_NUMBER[current[0]].phases[current[1]].says if current else "Your own settings."
        if self.prediction is None:
            return (f"{says} Predict first: p, how many emails will the team get and how many fetches in all? "
                    "Then space steps, enter runs to the end, ← steps back.")
        said = self.prediction
        return (f"{says} You predict {said.emails} email{'s' * (said.emails != 1)} and {said.fetches} "
                f"fetch{'es' * (said.fetches != 1)}: space steps through it, enter runs to the end.")

    def _next(self) -> str:
        """At the end of a lesson: the next part, or the next step of the walk."""
        current = self.lesson
        if current is None:
            return ""
        lesson, phase = BY_NUMBER[current[0]], current[1]
        if phase + 1 < len(lesson.phases):
            return f"Press {lesson.number} again for part {phase + 2}."
        if lesson.number < STEPS:
            return f"Next: step {lesson.number + 1}, press {lesson.number + 1}."
        if lesson.number == STEPS:
            return f"That is the document's walk; {FURTHER[0]}-{FURTHER[-1]} go further."
        return f"Next further lesson: press {lesson.number + 1}." if lesson.number + 1 in BY_NUMBER else ""


def _name(lesson: Lesson, phase: int) -> str:
    """`the defaults`, `step 3.2 of 4`, `further lesson 6.1`: a lesson's part as the title names it."""
    part = f".{phase + 1}" if len(lesson.phases) > 1 else ""
    if lesson.further:
        return f"further lesson {lesson.number}{part}"
    return f"step {lesson.number}{part} of {STEPS}" if lesson.number else "lesson 0"


class SimulatorApp(App):
    """`tui-agent simulate`: the Simulator alone, on its throw-away store; the user's database is never opened."""

    CSS_PATH = "../app.tcss"
    TITLE = "tui-agent simulator"
    BINDINGS = [Binding("q", "quit", "Quit"), Binding("question_mark", "help", "Help")]

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.settings = settings

    def on_mount(self) -> None:
        self.push_screen(SimulatorScreen(self.settings))

    def action_help(self) -> None:
        from .help import HelpScreen

        self.push_screen(HelpScreen(SimulatorScreen))
