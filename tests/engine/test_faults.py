"""Fault points armed from the environment: a pause that a test resumes, and the in-process crash."""

import json
import signal

import pytest
from helpers import paused_worker

from tui_agent.runtime import faults


def test_pause_at_stops_the_worker_there_until_it_is_continued(tui_agent):
    run_id = tui_agent("start", "hello", "--input", '{"delay_s": 0}').stdout.strip()
    with paused_worker("worker", "--once", pause_at="after-step-commit:2") as worker:
        report = json.loads(tui_agent("show", run_id, "--json").stdout)
        assert [s["name"] for s in report["steps"]] == ["greet", "count-letters"]
        worker.send_signal(signal.SIGCONT)
        assert worker.wait(timeout=30) == 0
    assert json.loads(tui_agent("show", run_id, "--json").stdout)["run"]["status"] == "succeeded"


def test_an_in_process_crash_is_a_base_exception_raised_on_the_nth_pass():
    faults.arm("after-step", 2)
    try:
        faults.crash_point("after-step")
        faults.crash_point("before-step")
        with pytest.raises(faults.SimulatedCrash) as crash:
            faults.crash_point("after-step")
        assert not isinstance(crash.value, Exception)
        assert crash.value.point == "after-step"
        faults.crash_point("after-step")    # the third pass: it fires once
    finally:
        faults.disarm()


def test_an_unknown_point_cannot_be_armed():
    with pytest.raises(ValueError):
        faults.arm("after-lunch")
