"""outbox: the local email service the nightly-report agent sends through.

It behaves like a real provider with idempotency keys, so the effect ledger has something honest to reconcile
against: in `dedupe` mode a key seen inside the window is not sent again, in `every` mode it is; `lookup(key)`
answers while the service remembers the key. Both modes refuse an attempt token older than the run's newest (a
worker paused past its lease). Mail lands in a Maildir; keys and counters are its own JSON file, not the store."""

from __future__ import annotations

import email
import email.policy
import hashlib
import json
import mailbox
import mimetypes
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path

from ..runtime.clock import CLOCK, Clock
from ..runtime.effects import AttemptToken, StaleAttempt
from .state_file import locked, write_whole

MODES = ("dedupe", "every")
DEFAULT_SENDER = "tui-agent <tui-agent@localhost>"


class Outbox:
    """A Maildir plus a key memory; safe for several processes at once (flock)."""

    def __init__(self, maildir: Path, mode: str = "dedupe", window_s: float = 24 * 3600, clock: Clock = CLOCK) -> None:
        """`clock` is the service's time: the process's, or a scenario's own (the simulator's key window)."""
        self.clock = clock
        if mode not in MODES:
            raise ValueError(f"outbox mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.maildir = Path(maildir)
        self.mode = mode
        self.window_s = window_s
        self._keys_path = self.maildir.with_name(self.maildir.name + ".keys.json")
        self._lock_path = self.maildir.with_name(self.maildir.name + ".lock")
        self.maildir.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():  # two processes creating the Maildir at once would collide
            self._box = mailbox.Maildir(self.maildir, factory=None, create=True)

    def send(self, key: str, *, to: str, subject: str, body: str, sender: str = DEFAULT_SENDER,
             attachments: Sequence[Path] = (), token: AttemptToken | None = None) -> dict:
        """Deliver one email for `key`, unless it was delivered already or `token` is stale. Nothing is sent when
        `dedupe` mode still remembers the key, or when `token` is older than one this run has already sent with
        (StaleAttempt).

        The service runs in its caller's process, so a kill -9 of a worker is also the service's own crash:
        the delivery it is about to make is written to the memory first (pending), and the next access to the
        key settles it against the Maildir. A kill between delivery and memory leaves an email the service
        still remembers, as a provider that outlives its client would; never a remembered email that was not
        sent.
        """
        with self._locked():
            memory = self._load()
            memory["counters"]["send_requests"] += 1
            if token is not None:
                self._admit(memory, key, token)
            seen = self._settled(memory, key)
            if seen is not None and self.mode == "dedupe":
                self._save(memory)
                return {**seen["result"], "deduplicated": True}
            sequence = memory["counters"]["emails_received"] + 1
            message_id = f"<{hashlib.sha256(key.encode()).hexdigest()[:16]}.{sequence}@tui-agent.local>"
            memory["pending"][key] = {"message_id": message_id, "sequence": sequence, "at": self.clock.now()}
            self._save(memory)
            result = self._deliver(key, message_id, to=to, subject=subject, body=body, sender=sender,
                                   attachments=attachments)
            del memory["pending"][key]
            self._remember(memory, key, sequence, result)
            self._save(memory)
            return result

    @staticmethod
    def _remember(memory: dict, key: str, sequence: int, result: dict) -> None:
        memory["counters"]["emails_received"] = max(memory["counters"]["emails_received"], sequence)
        memory["keys"].setdefault(key, {"first_seen": result["delivered_at"], "result": result})

    def _settled(self, memory: dict, key: str) -> dict | None:
        """The key's memory, after settling a delivery a crash left pending. The key is remembered if its message is in
        the Maildir, found by its Message-ID, and forgotten if not; only after a crash is the Maildir read."""
        pending = memory["pending"].pop(key, None)
        if pending is not None:
            for name in self._box.keys():
                found = email.message_from_bytes(self._box.get_bytes(name), policy=email.policy.default)
                if found["Message-ID"] == pending["message_id"]:
                    self._remember(memory, key, pending["sequence"], {
                        "message_id": pending["message_id"], "path": str(self.maildir / "new" / name),
                        "delivered_at": pending["at"], "deduplicated": False})
                    break
        return memory["keys"].get(key)

    def _admit(self, memory: dict, key: str, token: AttemptToken) -> None:
        """Keep the newest attempt token per run; refuse an older one: a worker that woke up after another
        took its run over. Another run (a fork) never compares, so its sends go out."""
        newest = memory["tokens"].get(token.run_id)
        if newest is not None and (token.generation, token.fence) < (newest["generation"], newest["fence"]):
            memory["counters"]["stale_refused"] = memory["counters"].get("stale_refused", 0) + 1
            self._save(memory)
            raise StaleAttempt(f"the outbox refused attempt {token} of {key}: it has seen attempt "
                               f"g{newest['generation']}/f{newest['fence']} of this run; nothing was sent")
        memory["tokens"][token.run_id] = {"generation": token.generation, "fence": token.fence,
                                          "seen_at": self.clock.now()}

    def lookup(self, key: str) -> dict | None:
        """The first result for `key` while the service remembers it, else None."""
        with self._locked():
            memory = self._load()
            memory["counters"]["lookups"] += 1
            seen = self._settled(memory, key)
            self._save(memory)
            return None if seen is None else seen["result"]

    def stats(self) -> dict:
        """Counters for a simulator: send_requests, emails_received, lookups."""
        with self._locked():
            return dict(self._load()["counters"])

    def messages(self) -> list[EmailMessage]:
        """Every delivered message, parsed, oldest first (by delivery number)."""
        parsed = []
        for name in self._box.keys():
            parsed.append(email.message_from_bytes(self._box.get_bytes(name), policy=email.policy.default))
        return sorted(parsed, key=_sequence)

    def _deliver(self, key: str, message_id: str, *, to: str, subject: str, body: str, sender: str,
                 attachments: Sequence[Path]) -> dict:
        delivered_at = self.clock.now()
        msg = EmailMessage()
        msg["From"] = sender
        msg["To"] = to
        msg["Subject"] = subject
        msg["Date"] = formatdate(delivered_at, usegmt=True)
        msg["Message-ID"] = message_id
        msg["X-Idempotency-Key"] = key
        msg.set_content(body, charset="utf-8")
        for attachment in map(Path, attachments):
            kind, _ = mimetypes.guess_type(attachment.name)
            maintype, subtype = (kind or "application/octet-stream").split("/", 1)
            msg.add_attachment(attachment.read_bytes(), maintype=maintype, subtype=subtype,
                               filename=attachment.name)
        name = self._box.add(msg)  # Maildir delivery is atomic: written in tmp/, renamed into new/
        return {"message_id": message_id, "path": str(self.maildir / "new" / name),
                "delivered_at": delivered_at, "deduplicated": False}

    def _locked(self):
        return locked(self._lock_path)

    def _load(self) -> dict:
        """The memory with keys past the window forgotten (expiry happens on every access)."""
        try:
            memory = json.loads(self._keys_path.read_text())
        except FileNotFoundError:
            memory = {"counters": {"send_requests": 0, "emails_received": 0, "lookups": 0}, "keys": {}}
        cutoff = self.clock.now() - self.window_s
        memory["keys"] = {k: v for k, v in memory["keys"].items() if v["first_seen"] > cutoff}
        memory["tokens"] = {k: v for k, v in memory.get("tokens", {}).items() if v["seen_at"] > cutoff}
        memory.setdefault("pending", {})
        return memory

    def _save(self, memory: dict) -> None:
        write_whole(self._keys_path, memory)


def _sequence(msg: EmailMessage) -> int:
    """The delivery number inside a Message-ID such as <KEYHASH.N@tui-agent.local>."""
    return int(msg["Message-ID"].strip("<>").split("@")[0].rsplit(".", 1)[1])
