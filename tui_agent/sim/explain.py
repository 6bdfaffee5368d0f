"""Why it came out that way: a few sentences computed from one execution's timelines and counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .settings import CRASH_STORY

if TYPE_CHECKING:   # the scenario puts the Why into its JSON, so it imports this module
    from .scenario import Outcome, Row


@dataclass(frozen=True)
class Prediction:
    """What a learner expects before running: the emails the team gets and the fetches made."""

    emails: int
    fetches: int


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _sends(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.fate in ("sent", "deduplicated")]


def found(outcome: Outcome) -> str:
    """What worker 2 found of the email on disk: its ledger row's state and key, or that there was none."""
    row = outcome.found
    if row is None:
        return "found no record of the email"
    state = {"attempted": "marked attempted", "unknown": "marked outcome unknown"}.get(row.detail,
                                                                                     f"marked {row.detail}")
    if row.key is not None:
        return f"found the email {state} with key {row.key}"
    kept = "no saved key (it is made at send time)" if outcome.settings.key == "at-send" else "no key"
    return f"found the email {state}, with {kept}"


def _work(outcome: Outcome) -> str:
    """What worker 2 repeated or skipped, what it found of the email, and why."""
    second = outcome.workers[1]
    if outcome.crashed_at is None:
        return "Nothing crashed: worker 1 did the job once and worker 2 found it finished."
    again = list(dict.fromkeys(r.step for r in second if r.fate == "again"))
    skipped = [r.step for r in second if r.fate == "recorded"]
    crash = f"Worker 1 crashed {CRASH_STORY[outcome.crashed_at]}"
    if outcome.settings.saving == "nothing":
        done = [r for r in second if r.fate in ("done", "again")]
        redo = "every step" if again and len(again) == len(done) else _listed(again) if again else ""
        return (f"{crash}. Nothing was saved, so worker 2 started from zero: it {found(outcome)}"
                + (f" and did {redo} again." if redo else "."))
    parts = [f"{crash}."]
    parts.append(f"Worker 2 skipped {_plural(len(skipped), 'saved step')} and {found(outcome)}." if skipped
                 else f"Worker 2 {found(outcome)}.")
    if outcome.counts["model_calls"] > 1:
        parts.append("The model had answered, but its answer is saved only when the summary step ends, so worker 2 "
                     "asked the model again.")
    if again:
        parts.append(f"It did {_listed(again)} again: worker 1 had not saved it.")
    return " ".join(parts)


def _email(outcome: Outcome) -> str:
    first, second = outcome.workers
    emails = outcome.counts["emails_received"]
    sent_first = [r for r in _sends(first) if r.fate == "sent"]
    lookups = [r for r in second if r.fate == "looked-up"]
    again = _sends(second)
    if outcome.waiting:
        got = "got the email once" if emails == 1 else "got no email" if emails == 0 else f"got {emails} emails"
        return f"The team {got} so far; worker 2 cannot tell whether it went out ({outcome.waits_because}), so it " \
               "waits for a person."
    if outcome.person == "happened":
        return ("A person said the email had gone out, so it was recorded as done and not sent again"
                + (": one email." if emails == 1 else f", but the team got {_plural(emails, 'email')}."))
    if outcome.person == "not-done":
        said = "A person said the email had not gone out, so worker 2 sent it again with the same key"
        if any(r.fate == "deduplicated" for r in again):
            return f"{said}; the service remembered the key and ignored the repeat: one email."
        return f"{said}: the team got {_plural(emails, 'email')}."
    if emails == 1 and lookups and lookups[-1].detail == "found":
        return "Worker 2 asked the service, which had the key, so it recorded the send as done without sending again."
    if emails == 1 and any(r.fate == "deduplicated" for r in again):
        if outcome.settings.saving == "nothing":
            return ("Worker 2 built the same key from what the action means and sent it again, and the service "
                    "ignored the repeat: one email.")
        return "Worker 2 sent it again with the same key, and the service ignored the repeat: one email."
    if emails == 1 and lookups:
        return "Worker 2 asked the service, which had no record of the key inside its window: the email had not gone " \
               "out, so it was sent once."
    if emails == 1 and not sent_first:
        return "Worker 1 never sent the email, so worker 2's send was the only one."
    if emails == 1 or not sent_first or not again:
        return f"The team got {_plural(emails, 'email')}."
    key_first, key_second = sent_first[-1].detail, again[-1].detail
    if key_second == "no key":
        how = "worker 2 sent it again without a key, so the service could not tell it was a repeat"
    elif key_second != key_first:
        how = ("worker 2 sent it again with a new key (" + ("made at send time" if outcome.settings.key == "at-send"
               else "the saved one was lost with everything else") + "), so the service saw a new request")
    elif outcome.settings.service == "every":
        how = "worker 2 sent it again with the same key, but this service delivers every request"
    else:
        how = ("worker 2 sent it again with the same key, but past the service's 24-hour window, when it had "
               "forgotten the key")
    return f"The team got the email {'twice' if emails == 2 else f'{emails} times'}: worker 1's went out, and {how}."


def why(outcome: Outcome, prediction: Prediction | None = None) -> str:
    """One or two sentences on the work, one on the email, and the learner's prediction against the result."""
    text = f"{_work(outcome)} {_email(outcome)}"
    if prediction is not None:
        emails, fetches = outcome.counts["emails_received"], outcome.counts["fetches"]
        if (prediction.emails, prediction.fetches) == (emails, fetches):
            text = f"You predicted it: {_plural(emails, 'email')}, {_plural(fetches, 'fetch', 'fetches')}. " + text
        else:
            text = (f"You predicted {_plural(prediction.emails, 'email')} and "
                    f"{_plural(prediction.fetches, 'fetch', 'fetches')}; "
                    f"it came out {emails} and {fetches}. " + text)
    return text
