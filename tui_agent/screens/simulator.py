"""Crash it yourself: the nightly report on the real runtime, one boundary per key press. The scenario runs in
its own thread and throw-away store (sim/stepper.py); this screen only sends it commands and shows each stop."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Static

from ..messages import ScenarioAdvanced
from ..sim import LESSONS, Settings
from ..sim.explain import Prediction, why
from ..sim.settings import CRASH_STORY, SETTING_NAMES
from ..sim.stepper import CRASH, LEAVE, RUN, STEP, Stepper, View
from ..widgets.caption import Caption
from ..widgets.footer import KeysFooter
from ..widgets.simulation import KEYS, outcome_text, settings_grid, timeline_text
from ..widgets.theme import follow_theme, palette
from .modals import PredictModal, ReconcileModal

PERSON_CHOICES = ("happened", "not-done")


def _bindings() -> list[Binding]:
    keys = [Binding("space", "step", "Step"), Binding("enter", "run", "Run"),
            Binding("exclamation_mark", "crash", "Crash here", key_display="!"),
            Binding("n", "worker_two", "Worker 2"), Binding("p", "predict", "Predict"), Binding("r", "reset", "Reset")]
    keys += [Binding(str(lesson.number), f"lesson({lesson.number})", f"Lesson {lesson.number}: {lesson.title}",
                     show=lesson.number == 1, key_display="1-5" if lesson.number == 1 else None) for lesson in LESSONS]
    keys += [Binding(KEYS[name], f"cycle('{name}')", f"Next {name.replace('_', ' ')} setting",
                     show=name == "saving", key_display=" ".join(KEYS.values()) if name == "saving" else None)
             for name in SETTING_NAMES]
    return keys + [Binding("escape", "leave", "Back")]


class SimulatorScreen(Screen):
    CSS_PATH = "simulator.tcss"
    BINDINGS = _bindings()
    FOOTER = ("space", "enter", "exclamation_mark", "n", "p", "r", "1", "S", "escape")

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.settings = settings or LESSONS[0].phases[0]
        self.lesson: tuple[int, int] | None = None if settings else (1, 0)   # (number, phase index)
        self.stepper: Stepper | None = None
        self.view: View | None = None
        self.prediction: Prediction | None = None
        self._busy = False

    def compose(self) -> ComposeResult:
        yield Caption(id="sim-title", classes="summary")
        yield Static(id="sim-settings")
        with Horizontal(id="sim-panes"):
            for pane in ("worker-1", "worker-2", "outcome"):
                yield Static(id=f"sim-{pane}", classes="pane")
        yield Static(id="sim-why", classes="pane")
        yield KeysFooter()

    def on_mount(self) -> None:
        for pane, title in (("outcome", "Outcome"), ("why", "Why")):
            self.query_one(f"#sim-{pane}").border_title = title
        follow_theme(self, self.show)
        self.begin()

    def on_unmount(self) -> None:
        if self.stepper is not None:
            self.stepper.close()

    # -- the scenario ----------------------------------------------------------------------------

    def begin(self) -> None:
        """A new execution with the current settings (the old one, if any, is abandoned and removed)."""
        if self.stepper is not None:
            self.stepper.close()
        self.stepper, self.view, self.prediction = Stepper(self.settings), None, None
        self._busy = True
        self._advance(self.stepper, None)
        self.show()

    @work(thread=True, group="simulator")
    def _advance(self, stepper: Stepper, command: str | None) -> None:
        view = stepper.start() if command is None else stepper.command(command)
        if view is not None:   # None: the stepper was closed on the way (a reset)
            self.post_message(ScenarioAdvanced(stepper, view))

    def send(self, command: str) -> None:
        if self._busy or self.stepper is None:
            return
        self._busy = True
        self._advance(self.stepper, command)

    def on_scenario_advanced(self, message: ScenarioAdvanced) -> None:
        if message.stepper is not self.stepper:
            return   # from an execution reset since
        self.view, self._busy = message.view, False
        self.show()
        if message.view.error:
            self.notify(f"the simulator failed: {message.view.error}", severity="error", timeout=10)
        elif message.view.asks is not None:
            self.ask_person(message.view.asks)

    def ask_person(self, effect: dict) -> None:
        def answered(answer) -> None:
            self.send(answer[0] if answer and answer[0] in PERSON_CHOICES else LEAVE)

        modal = ReconcileModal(effect, clock=self.stepper.scenario.clock, allowed=PERSON_CHOICES,
                               scenario=True)
        self.app.push_screen(modal, answered)

    # -- keys --------------------------------------------------------------------------------------

    def _ended(self) -> bool:
        if self.view is not None and self.view.outcome is not None:
            self.notify("this execution has ended: r runs it again; a setting's key or a lesson starts another",
                        timeout=4)
            return True
        return False

    def action_step(self) -> None:
        if not self._ended():
            self.send(STEP)

    def action_run(self) -> None:
        if not self._ended():
            self.send(RUN)

    def action_crash(self) -> None:
        if self._ended() or self.view is None:
            return
        if not self.view.can_crash:
            self.notify("only worker 1 crashes, and only at one of its boundaries: step to one (▸ marks where it "
                        "stands)", severity="warning", timeout=4)
            return
        self.send(CRASH)

    def action_worker_two(self) -> None:
        if self._ended() or self.view is None:
            return
        if self.view.stop is not None and self.view.stop.worker == 1 and self.view.stop.boundary is not None:
            self.notify("worker 2 starts once worker 1 has crashed or finished: ! crashes it here, enter runs on",
                        severity="warning", timeout=4)
            return
        self.send(STEP)

    def action_predict(self) -> None:
        if self._ended():
            return

        def predicted(said: tuple[int, int] | None) -> None:
            if said is not None:
                self.prediction = Prediction(*said)
                self.send(RUN)

        self.app.push_screen(PredictModal(), predicted)

    def action_reset(self) -> None:
        self.begin()

    def action_lesson(self, number: int) -> None:
        lesson = LESSONS[number - 1]
        phase = 0
        if self.lesson and self.lesson[0] == number and self.view and self.view.outcome is not None:
            phase = (self.lesson[1] + 1) % len(lesson.phases)
        self.lesson, self.settings = (number, phase), lesson.phases[phase]
        self.begin()

    def action_cycle(self, name: str) -> None:
        self.settings, self.lesson = self.settings.cycled(name), None
        self.notify(f"{name.replace('_', ' ')}: {getattr(self.settings, name)} ({self.settings.describe(name)}); "
                    "started again", timeout=3)
        self.begin()

    def action_leave(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.exit()

    # -- painting ------------------------------------------------------------------------------------

    def show(self) -> None:
        colours, view, settings = palette(self.app), self.view, self.settings
        self.query_one("#sim-title", Caption).text = self._title()
        self.query_one("#sim-settings", Static).update(settings_grid(settings, colours))
        stop = view.stop if view is not None and view.outcome is None else None
        rows = view.workers if view is not None else ((), ())
        first, second = self.query_one("#sim-worker-1", Static), self.query_one("#sim-worker-2", Static)
        first.border_title = "Worker 1"
        later = settings.restart_after
        second.border_title = "Worker 2 (starts now)" if later == "now" else f"Worker 2 ({later} later)"
        first.update(timeline_text(rows[0], stop if stop and stop.worker == 1 else None, colours))
        idle = ("found the run finished: nothing to do" if view is not None and view.outcome is not None
                else "starts once worker 1 has crashed or finished")
        second.update(timeline_text(rows[1], stop if stop and stop.worker == 2 else None, colours, idle))
        finished = view is not None and view.outcome is not None
        ending = ""
        if finished:
            ending = "ends: waits for a person" if view.outcome.waiting else f"ends: {view.outcome.status}"
        counts = view.counts if view is not None else dict.fromkeys(
            ("fetches", "model_calls", "reports_written", "send_requests", "emails_received", "lookups"), 0)
        self.query_one("#sim-outcome", Static).update(outcome_text(counts, colours, finished, ending,
                                                                   self.prediction))
        self.query_one("#sim-why", Static).update(Text(self._why()))

    def _title(self) -> str:
        if self.lesson is None:
            return "Crash it yourself · the nightly report, your own settings"
        number, phase = self.lesson
        lesson = LESSONS[number - 1]
        part = f", part {phase + 1} of {len(lesson.phases)}" if len(lesson.phases) > 1 else ""
        return f"Crash it yourself · lesson {number} of {len(LESSONS)}{part}: {lesson.title}"

    def _why(self) -> str:
        view = self.view
        if view is None:
            return "Starting…"
        if view.outcome is not None:
            text = why(view.outcome, self.prediction)
            if self.lesson and self.lesson[1] + 1 < len(LESSONS[self.lesson[0] - 1].phases):
                text += f" Press {self.lesson[0]} again for part {self.lesson[1] + 2}."
            return text
        if view.asks is not None:
            return "Worker 2 cannot tell whether the email went out, so a person decides."
        stop = view.stop
        if stop is None:
            return ""
        if stop.boundary is not None:
            where = f"Worker {stop.worker} stands {CRASH_STORY[stop.boundary]}."
            crash = " ! crashes it here." if stop.worker == 1 else ""
            return f"{where} space runs the real runtime to its next boundary, enter to the end.{crash}"
        if stop.worker == 1:
            return f"{stop.label[0].upper()}{stop.label[1:]}. space or n starts worker 2 " \
                   f"({self.settings.describe('restart_after')})."
        return f"Worker 2: {stop.label}. space goes on."


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
