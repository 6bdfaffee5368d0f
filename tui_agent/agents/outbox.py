"""outbox: the local email service the nightly-report agent sends through.

It behaves like a real provider with idempotency keys, so the effect ledger has
something honest to reconcile against: in `dedupe` mode a key seen inside the
window is not sent again, in `every` mode it is; `lookup(key)` answers while the
service still remembers the key. Mail lands in a Maildir; the service's memory
(keys and counters) is its own JSON file, never the runner's database.
"""

from __future__ import annotations

import email
import email.policy
import fcntl
import hashlib
import json
import mailbox
import mimetypes
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path

from ..runtime.clock import now

MODES = ("dedupe", "every")
DEFAULT_SENDER = "tui-agent <tui-agent@localhost>"


class Outbox:
    """A Maildir plus a key memory; safe for several processes at once (flock)."""

    def __init__(self, maildir: Path, mode: str = "dedupe", window_s: float = 24 * 3600) -> None:
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
             attachments: Sequence[Path] = ()) -> dict:
        """Deliver one email for `key`, unless `dedupe` mode still remembers the key.

        The message is delivered before the memory is written: a crash between the
        two leaves an email the service does not remember (at-least-once, like a
        provider that sent before it committed), never a remembered email that
        was not sent.
        """
        with self._locked():
            memory = self._load()
            memory["counters"]["send_requests"] += 1
            seen = memory["keys"].get(key)
            if seen is not None and self.mode == "dedupe":
                self._save(memory)
                return {**seen["result"], "deduplicated": True}
            sequence = memory["counters"]["emails_received"] + 1
            result = self._deliver(key, sequence, to=to, subject=subject, body=body, sender=sender,
                                   attachments=attachments)
            memory["counters"]["emails_received"] = sequence
            if seen is None:
                memory["keys"][key] = {"first_seen": result["delivered_at"], "result": result}
            self._save(memory)
            return result

    def lookup(self, key: str) -> dict | None:
        """The first result for `key` while the service remembers it, else None."""
        with self._locked():
            memory = self._load()
            memory["counters"]["lookups"] += 1
            self._save(memory)
            seen = memory["keys"].get(key)
            return None if seen is None else seen["result"]

    def stats(self) -> dict:
        """Counters for a simulator: send_requests, emails_received, lookups."""
        with self._locked():
            return dict(self._load()["counters"])

    def messages(self) -> list[EmailMessage]:
        """Every delivered message, parsed, oldest first (by delivery number)."""
        parsed = []
        for name in self._box.keys():
            with self._box.get_file(name) as handle:
                parsed.append(email.message_from_binary_file(handle, policy=email.policy.default))
        return sorted(parsed, key=_sequence)

    def _deliver(self, key: str, sequence: int, *, to: str, subject: str, body: str, sender: str,
                 attachments: Sequence[Path]) -> dict:
        delivered_at = now()
        message_id = f"<{hashlib.sha256(key.encode()).hexdigest()[:16]}.{sequence}@tui-agent.local>"
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

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _load(self) -> dict:
        """The memory with keys past the window forgotten (expiry happens on every access)."""
        try:
            memory = json.loads(self._keys_path.read_text())
        except FileNotFoundError:
            memory = {"counters": {"send_requests": 0, "emails_received": 0, "lookups": 0}, "keys": {}}
        cutoff = now() - self.window_s
        memory["keys"] = {k: v for k, v in memory["keys"].items() if v["first_seen"] > cutoff}
        return memory

    def _save(self, memory: dict) -> None:
        """Write the memory whole or not at all: a crash leaves the old file or the new one."""
        fd, tmp = tempfile.mkstemp(dir=self._keys_path.parent, prefix=self._keys_path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(memory, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self._keys_path)
        except BaseException:
            os.unlink(tmp)
            raise


def _sequence(msg: EmailMessage) -> int:
    """The delivery number inside a Message-ID such as <KEYHASH.N@tui-agent.local>."""
    return int(msg["Message-ID"].strip("<>").split("@")[0].rsplit(".", 1)[1])
