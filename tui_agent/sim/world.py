"""The world the scenario's workers act on: sources, the model, the report folder and the email service,
each counting what it sees on the scenario's clock. In memory, so a whole matrix runs in seconds."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..agents.nightly_report import SOURCES as SOURCE_ROWS
from ..agents.nightly_report import script as summary_script
from ..runtime.clock import Clock
from .settings import DAY_S


@dataclass
class Request:
    """One request that reached the email service, and what the service did with it."""

    worker: int
    key: str | None
    delivered: bool


@dataclass
class EmailService:
    """`dedupe` ignores a key it has seen inside its window and answers with the first result; `every`
    delivers every request. Both remember keys for lookups for the same window, then forget them."""

    mode: str
    clock: Clock
    window_s: float = DAY_S
    requests: list[Request] = field(default_factory=list)
    lookups: list[tuple[int, str, bool]] = field(default_factory=list)   # (worker, key, found)
    _seen: dict[str, tuple[float, dict]] = field(default_factory=dict)

    def _remembered(self, key: str | None) -> dict | None:
        seen = self._seen.get(key) if key else None
        if seen is None or self.clock.now() - seen[0] >= self.window_s:
            return None
        return seen[1]

    def send(self, worker: int, key: str | None) -> dict:
        first = self._remembered(key)
        if first is not None and self.mode == "dedupe":
            self.requests.append(Request(worker, key, delivered=False))
            return {**first, "deduplicated": True}
        self.requests.append(Request(worker, key, delivered=True))
        result = {"email": sum(r.delivered for r in self.requests), "key": key}
        if key and first is None:
            self._seen[key] = (self.clock.now(), result)
        return result

    def lookup(self, worker: int, key: str) -> dict | None:
        found = self._remembered(key)
        self.lookups.append((worker, key, found is not None))
        return found


class World:
    """Everything outside the runtime that a worker touches, with `worker` naming who touches it now."""

    def __init__(self, service: str, clock: Clock, seed: int = 0) -> None:
        self.worker = 1
        self.fetches: Counter[str] = Counter()
        self.model_calls = 0
        self.reports_written = 0
        self.email = EmailService(service, clock)
        self._random = random.Random(seed)   # keys look random, yet a scenario is the same every time it runs
        self.on_touch: Callable[[str, str], None] = lambda what, detail: None

    def fetch(self, source: str) -> dict:
        self.fetches[source] += 1
        header, *rows = SOURCE_ROWS[source]
        return {"source": source, "rows": [dict(zip(header, row)) for row in rows]}

    def answer(self, messages: list[dict], max_tokens: int, call_index: int) -> str:
        """The scripted model: the nightly report's own script, counted."""
        self.model_calls += 1
        return summary_script(messages, max_tokens, call_index)

    def write_report(self, summary: str, fetched: list[dict]) -> dict:
        self.reports_written += 1
        return {"report": f"report {self.reports_written}", "lines": len(summary.splitlines()) + len(fetched)}

    def new_key(self) -> str:
        """A random key, as short as the document's op-8c41 (a screen's narrow timeline shows it whole)."""
        return f"k-{self._random.getrandbits(16):04x}"

    def send(self, key: str | None) -> dict:
        sent = self.email.send(self.worker, key)
        self.on_touch("deduplicated" if sent.get("deduplicated") else "sent", key or "")
        return sent

    def lookup(self, key: str) -> dict | None:
        found = self.email.lookup(self.worker, key)
        self.on_touch("looked-up", "found" if found else "not found")
        return found

    def counts(self) -> dict[str, int]:
        return {
            "fetches": sum(self.fetches.values()),
            "model_calls": self.model_calls,
            "reports_written": self.reports_written,
            "send_requests": len(self.email.requests),
            "emails_received": sum(r.delivered for r in self.email.requests),
            "lookups": len(self.email.lookups),
        }
