"""The torture run's short form (bench/torture.py --short) inside the suite: real workers killed at random, one
paused past its lease, an operator parking, resuming and approving; nothing lost, nothing done twice, the
paused worker's late write refused and on record."""

import os
import re
import signal
import subprocess
import sys

import pytest
from helpers import ROOT

LINE = re.compile(r"kills=(\d+) runs=30 duplicates=0 lost=0 refused_stale_writes=(\d+) integrity=ok")

pytestmark = pytest.mark.xdist_group("torture")   # its processes and kills stay on one xdist worker


def test_the_short_torture_run_loses_nothing_and_repeats_nothing():
    harness = subprocess.Popen([sys.executable, "bench/torture.py", "--short", "--seed", "7"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = harness.communicate(timeout=120)
    finally:
        if harness.poll() is None:   # hung: its workers share its process group, so none outlives the test
            os.killpg(harness.pid, signal.SIGKILL)
            harness.communicate()
    lines = out.splitlines()
    assert harness.returncode == 0 and lines, (harness.returncode, out, err[-3000:])
    found = LINE.fullmatch(lines[-1])
    assert found, (out, err[-3000:])
    kills, refused = map(int, found.groups())
    assert kills >= 10, out
    assert refused >= 1, "the paused worker's late write must be refused and recorded"
