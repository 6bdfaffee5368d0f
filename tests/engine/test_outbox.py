"""The outbox service: dedupe window, every mode, lookup, Maildir output, concurrent senders."""

import email
import email.policy
import mailbox
import multiprocessing
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tui_agent.agents.outbox import Outbox

HOUR = 3600.0


def _send(box: Outbox, key: str, subject: str = "nightly report") -> dict:
    return box.send(key, to="team@example.com", subject=subject, body="All green.")


def _maildir_files(path: Path) -> list[Path]:
    return sorted((path / "new").iterdir()) + sorted((path / "cur").iterdir())


def test_unknown_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="dedupe, every"):
        Outbox(tmp_path / "mail", mode="sometimes")


def test_dedupe_inside_the_window_returns_the_first_result(tmp_path, clock):
    box = Outbox(tmp_path / "mail", window_s=HOUR)
    first = _send(box, "nightly-report:2026-10-19:team")
    clock.advance(HOUR - 1)
    again = _send(box, "nightly-report:2026-10-19:team", subject="a different subject")

    assert first["deduplicated"] is False
    assert Path(first["path"]).is_file()
    assert again == {**first, "deduplicated": True}
    assert [m["Subject"] for m in box.messages()] == ["nightly report"]
    assert box.stats() == {"send_requests": 2, "emails_received": 1, "lookups": 0}


def test_dedupe_past_the_window_delivers_again(tmp_path, clock):
    box = Outbox(tmp_path / "mail", window_s=HOUR)
    first = _send(box, "k")
    clock.advance(HOUR + 1)
    second = _send(box, "k")

    assert second["deduplicated"] is False
    assert second["message_id"] != first["message_id"]
    assert second["path"] != first["path"]
    assert second["delivered_at"] >= first["delivered_at"] + HOUR
    assert len(box.messages()) == 2
    assert box.lookup("k") == second


def test_every_mode_delivers_each_time_but_lookup_returns_the_first(tmp_path):
    box = Outbox(tmp_path / "mail", mode="every")
    results = [_send(box, "k", subject=f"try {n}") for n in range(12)]

    assert not any(r["deduplicated"] for r in results)
    assert len({r["message_id"] for r in results}) == 12
    assert [m["Subject"] for m in box.messages()] == [f"try {n}" for n in range(12)]
    assert box.lookup("k") == results[0]


def test_lookup_forgets_after_the_window(tmp_path, clock):
    box = Outbox(tmp_path / "mail", window_s=HOUR)
    assert box.lookup("k") is None
    sent = _send(box, "k")
    clock.advance(HOUR - 1)
    assert box.lookup("k") == sent
    clock.advance(2)
    assert box.lookup("k") is None
    assert box.stats()["lookups"] == 3


def test_memory_is_shared_through_its_file(tmp_path):
    sent = _send(Outbox(tmp_path / "mail"), "k")
    other = Outbox(tmp_path / "mail")
    assert other.lookup("k") == sent
    assert _send(other, "k")["deduplicated"] is True
    assert (tmp_path / "mail.keys.json").is_file()
    assert (tmp_path / "mail.lock").is_file()


def test_delivered_messages_are_complete_rfc5322(tmp_path, clock):
    clock.set(1_792_000_000.0)  # a fixed instant, so Date is predictable
    attachment = tmp_path / "report.csv"
    attachment.write_text("run,status\n1,ok\n")
    box = Outbox(tmp_path / "mail")
    sent = box.send("nightly-report:2026-10-19:team", to="team@example.com", subject="Nightly: ✓ all green",
                    body="Résumé: 3 runs.\n", attachments=[attachment])
    _send(box, "another-key")

    files = _maildir_files(tmp_path / "mail")
    assert sent["path"] in map(str, files)
    assert len(mailbox.Maildir(tmp_path / "mail", create=False)) == 2
    for path in files:
        msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        for header in ("From", "To", "Subject", "Date", "Message-ID", "X-Idempotency-Key"):
            assert msg[header], header
        assert msg["From"] == "tui-agent <tui-agent@localhost>"
        assert msg["To"] == "team@example.com"
        assert msg["Date"].datetime.timestamp() == 1_792_000_000
        assert msg["Message-ID"].endswith("@tui-agent.local>")

    first = box.messages()[0]
    assert first["Message-ID"] == sent["message_id"]
    assert first["X-Idempotency-Key"] == "nightly-report:2026-10-19:team"
    assert first["Subject"] == "Nightly: ✓ all green"
    text = first.get_body(preferencelist=("plain",))
    assert text.get_content_charset() == "utf-8"
    assert text.get_content() == "Résumé: 3 runs.\n"
    [part] = list(first.iter_attachments())
    assert part.get_filename() == "report.csv"
    assert part.get_content() == "run,status\n1,ok\n"


def _send_many(maildir: str, start, times: int) -> None:
    box = Outbox(Path(maildir))
    start.wait()  # all senders begin together, so they really contend
    for _ in range(times):
        _send(box, "nightly-report:2026-10-19:team")


def test_concurrent_senders_deliver_exactly_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(4)
    workers = [ctx.Process(target=_send_many, args=(str(tmp_path / "mail"), start, 5)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]

    box = Outbox(tmp_path / "mail")
    assert len(box.messages()) == 1
    assert len(_maildir_files(tmp_path / "mail")) == 1
    assert box.stats() == {"send_requests": 20, "emails_received": 1, "lookups": 0}


def test_a_service_on_a_scenario_clock_forgets_on_that_clock_alone(tmp_path):
    """The simulator's 30-hour restart: the outbox's key window runs on the scenario's clock, not the process's."""
    from tui_agent.runtime.clock import CLOCK, Clock

    real = CLOCK.now()
    scenario = Clock()
    scenario.freeze(real)
    box = Outbox(tmp_path / "mail", window_s=24 * HOUR, clock=scenario)
    first = _send(box, "k")
    assert _send(box, "k")["deduplicated"] is True
    scenario.advance(30 * HOUR)
    again = _send(box, "k")
    assert again["deduplicated"] is False
    assert again["delivered_at"] == real + 30 * HOUR and first["delivered_at"] == real
    assert len(box.messages()) == 2
    assert abs(CLOCK.now() - real) < 60


_KILLED_AFTER_DELIVERY = """
import os, signal, sys
from pathlib import Path
from tui_agent.agents.outbox import Outbox
box = Outbox(Path(sys.argv[1]), mode=sys.argv[2])
deliver = box._deliver
def deliver_then_die(*args, **kwargs):
    deliver(*args, **kwargs)              # the message is in new/ ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before the memory says so
box._deliver = deliver_then_die
box.send("k1", to="t@localhost", subject="s", body="b")
"""


@pytest.mark.parametrize("mode", ["dedupe", "every"])
def test_a_kill_between_delivery_and_memory_leaves_an_email_the_service_remembers(tmp_path, mode):
    """The outbox runs in the worker's process, so the worker's kill -9 is the service's crash too: the message
    it delivered must still be found by lookup, and dedupe must not send it again."""
    done = subprocess.run([sys.executable, "-c", _KILLED_AFTER_DELIVERY, str(tmp_path / "outbox"), mode],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == -signal.SIGKILL, done.stderr
    box = Outbox(tmp_path / "outbox", mode=mode)
    assert len(box.messages()) == 1
    found = box.lookup("k1")
    assert found is not None and found["message_id"] == box.messages()[0]["Message-ID"]
    if mode == "dedupe":
        assert box.send("k1", to="t@localhost", subject="s", body="b")["deduplicated"] is True
        assert len(box.messages()) == 1
    else:   # every mode sends each time, numbered after the one the crash left
        second = box.send("k1", to="t@localhost", subject="s", body="b")
        assert second["message_id"].endswith(".2@tui-agent.local>") and len(box.messages()) == 2
