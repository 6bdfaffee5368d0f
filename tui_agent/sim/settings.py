"""The simulator's settings, their choices in order, the crash points of worker 1 and the five lessons."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

DAY_S = 24 * 3600
SOURCES = ("sales", "incidents", "deploys")

# Each setting: its choices in the order a key cycles them, with the words the screen shows.
SAVING = {"nothing": "nothing", "steps": "after each step", "journal": "every reply as it comes"}
KEY = {"none": "none", "at-send": "made at send time", "saved": "saved before send", "meaning": "built from meaning"}
SERVICE = {"dedupe": "dedupes for 24h", "every": "delivers every one"}
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
    saving: str = "steps"
    key: str = "saved"
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


@dataclass(frozen=True)
class Lesson:
    number: int
    title: str
    phases: tuple[Settings, ...]   # a second phase is shown after the first has run


def _lessons() -> tuple[Lesson, ...]:
    one = Settings(saving="nothing", key="none", service="every", after_crash="resend", crash_at="after-send",
                   restart_after="now")
    two = replace(one, saving="steps")
    three = replace(two, key="saved", service="dedupe")
    return (
        Lesson(1, "nothing saved", (one,)),
        Lesson(2, "saved after each step", (two,)),
        Lesson(3, "a key saved before sending", (three,)),
        Lesson(4, "a service that delivers every request",
               (replace(three, service="every"), replace(three, service="every", after_crash="ask-service"))),
        Lesson(5, "a key's window", (replace(three, restart_after="30h"),
                                     replace(three, saving="nothing", key="meaning", restart_after="now"))),
    )


LESSONS = _lessons()
