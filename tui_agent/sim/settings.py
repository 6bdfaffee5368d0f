"""The simulator's settings, their choices in order, the crash points of worker 1, and the lessons: the
walk of seed 003's "Crash it yourself" step by step, then the simulator's own further lessons."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

DAY_S = 24 * 3600
SOURCES = ("sales", "incidents", "deploys")

# Each setting: its choices in the order a key cycles them, with the words the screen shows.
SAVING = {"nothing": "nothing saved", "steps": "after each step", "journal": "every reply as it comes"}
KEY = {"none": "no key", "at-send": "made at send time", "saved": "saved before sending",
       "meaning": "built from meaning"}
SERVICE = {"dedupe": "dedupes for 24h", "every": "sends every request"}
AFTER_CRASH = {"resend": "send again", "ask-service": "ask the service", "ask-person": "ask a person"}
RESTART_AFTER = {"now": "now", "1m": "1 minute later", "30h": "30 hours later"}
RESTART_S = {"now": 0.0, "1m": 60.0, "30h": 30 * 3600.0}


def _crash_points() -> dict[str, str]:
    points = {"none": "no crash"}
    for i, source in enumerate(SOURCES, 1):
        points[f"before-fetch-{i}"] = f"before fetch {source}"
        points[f"after-fetch-{i}"] = f"after fetch {source}"
    points.update({
        "before-summary": "before the summary",
        "mid-summary": "mid-summary",
        "after-summary": "after the summary",
        "before-report": "before the report",
        "after-report": "after the report",
        "after-attempted": "marked attempted",
        "after-send": "after the send",
    })
    return points


CRASH_AT = _crash_points()
# What a crash at the points whose short name does not say it all left behind, for sentences.
CRASH_STORY = {**CRASH_AT, "mid-summary": "after the model answered, before the summary step ended",
               "after-attempted": "after marking the send attempted, before sending it",
               "after-send": "after the email went out, before that was saved"}
BOUNDARIES = tuple(p for p in CRASH_AT if p != "none")   # worker 1's stops, in the order it passes them

CHOICES: dict[str, dict[str, str]] = {
    "saving": SAVING, "key": KEY, "service": SERVICE, "after_crash": AFTER_CRASH, "crash_at": CRASH_AT,
    "restart_after": RESTART_AFTER,
}
LABELS = {"saving": "Saving", "key": "Key", "service": "Service", "after_crash": "On doubt", "crash_at": "Crash at",
          "restart_after": "Worker 2"}
FLAGS = {"saving": "--saving", "key": "--key", "service": "--service", "after_crash": "--after-crash",
         "crash_at": "--crash-at", "restart_after": "--restart-after"}


@dataclass(frozen=True)
class Settings:
    """One execution's choices. The defaults are the document's: "Start with the defaults: save nothing, and
    crash right after the email goes out", with a service that deduplicates (its step 3 asks you to choose one
    that sends every request) and the naive policy of sending again (its step 2 sends again)."""

    saving: str = "nothing"
    key: str = "none"
    service: str = "dedupe"
    after_crash: str = "resend"
    crash_at: str = "after-send"
    restart_after: str = "now"

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value not in CHOICES[name]:
                raise ValueError(f"{FLAGS[name]} {value!r}: choose one of {', '.join(CHOICES[name])}")

    def cycled(self, name: str) -> Settings:
        """The next choice of one setting, wrapping round (the screen's S K V A C W keys)."""
        choices = list(CHOICES[name])
        return replace(self, **{name: choices[(choices.index(getattr(self, name)) + 1) % len(choices)]})

    def describe(self, name: str) -> str:
        return CHOICES[name][getattr(self, name)]

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


SETTING_NAMES = tuple(f.name for f in fields(Settings))
# What the document calls "More settings": the email service, what to do when the send is in doubt, when
# worker 2 starts. The screen groups them under that name; the others come first.
MORE_SETTINGS = ("service", "after_crash", "restart_after")
MAIN_SETTINGS = tuple(name for name in SETTING_NAMES if name not in MORE_SETTINGS)


@dataclass(frozen=True)
class Phase:
    """One part of a lesson: what to do, in the document's words (or the simulator's), and the settings it gives."""

    says: str
    settings: Settings


@dataclass(frozen=True)
class Lesson:
    """Key `number` loads it; pressed again once a part has run, its next part. A `further` lesson is the
    simulator's own, beyond the document's walk."""

    number: int
    title: str
    phases: tuple[Phase, ...]
    further: bool = False


def _lessons() -> tuple[Lesson, ...]:
    """The document's walk, each step changing exactly the setting it names from the step before, then the
    simulator's further lessons. The document's words:

    Start with the defaults: save nothing, and crash right after the email goes out. Step to the end, then
    change one setting at a time:
    1. Save a checkpoint after each step. The fetches stop repeating, but the email still goes out twice.
    2. Add the key saved before sending. When the new worker finds the email marked attempted, send again with
       the same key.
    3. Under More settings, choose a service that sends every request, and send again. Then try asking the
       service instead.
    4. Switch back, and start the new worker 30 hours later."""
    defaults = Settings()
    checkpoint = replace(defaults, saving="steps")
    keyed = replace(checkpoint, key="saved")
    every = replace(keyed, service="every")
    ask = replace(every, after_crash="ask-service")
    later = replace(ask, service="dedupe", after_crash="resend", restart_after="30h")
    mid = replace(keyed, crash_at="mid-summary")
    return (
        Lesson(0, "the defaults", (Phase(
            "Start with the defaults: save nothing, and crash right after the email goes out. Step to the end.",
            defaults),)),
        Lesson(1, "save a checkpoint after each step", (Phase("Save a checkpoint after each step.", checkpoint),)),
        Lesson(2, "add the key saved before sending", (Phase(
            "Add the key saved before sending. When the new worker finds the email marked attempted, send again "
            "with the same key.", keyed),)),
        Lesson(3, "a service that sends every request", (
            Phase("Under More settings, choose a service that sends every request, and send again.", every),
            Phase("Then try asking the service instead.", ask))),
        Lesson(4, "switch back, worker 2 30 hours later", (Phase(
            "Switch back, and start the new worker 30 hours later.", later),)),
        Lesson(5, "a key built from meaning", (Phase(
            "Save nothing again, but build the key from what the action means (nightly-report:<date>:team), so "
            "it survives even a lost checkpoint.", replace(defaults, key="meaning")),), further=True),
        Lesson(6, "steps or journal, crashing mid-summary", (
            Phase("With the saved key, crash mid-summary: after the model answered, before the step ended.", mid),
            Phase("Now journal every reply the moment it arrives (record and replay).",
                  replace(mid, saving="journal"))), further=True),
        Lesson(7, "a key made at send time", (Phase(
            "Make the key at send time instead of saving it before sending.", replace(keyed, key="at-send")),),
            further=True),
    )


LESSONS = _lessons()
STEPS = sum(not lesson.further for lesson in LESSONS) - 1   # the document's numbered steps (lesson 0: the defaults)


def lesson_of(settings: Settings) -> tuple[int, int] | None:
    """The lesson and part whose settings these are (every part's are its own), or None: your own settings."""
    for lesson in LESSONS:
        for index, phase in enumerate(lesson.phases):
            if phase.settings == settings:
                return lesson.number, index
    return None
