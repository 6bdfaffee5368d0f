"""`tui-agent run` on a terminal shows a live `step i/n name` line."""

import os
import pty
import subprocess
import sys

from helpers import ROOT


def test_run_shows_a_live_step_line_on_a_terminal():
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "tui_agent", "run", "hello", "--input", '{"delay_s": 0.05}'],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=follower, text=True, timeout=60)
        os.close(follower)
        follower = None
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if follower is not None:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0
    text = shown.decode()
    for line in ("░ 1/3 greet", " 2/3 count-letters · ", "█ 3/3 shout · "):   # a bar, then the pace once known
        assert line in text
    assert "/s" in text and "left" in text
    assert text.endswith("\r\x1b[2K"), "the line is cleared before the result is printed"
    assert "succeeded" in done.stdout
    assert "1/3" not in done.stdout
