"""tui_agent/format.py: every figure the TUI shows reads the same wherever it shows."""

import time
from datetime import datetime

import pytest

from tui_agent.format import (
    COST_UNKNOWN,
    age,
    ago,
    amount,
    bar,
    clock,
    column_span,
    cost,
    count,
    countdown,
    duration_ms,
    file_size,
    in_zone,
    minutes_ago,
    pace,
    span,
    stamp,
    stopwatch,
    usd,
    usd_exact,
    usd_narrow,
    wall_s,
    zoned,
)


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def at(text: str) -> float:
    return datetime.fromisoformat(text + "+00:00").timestamp()


@pytest.mark.parametrize(("ms", "shown"), [(None, ""), (4.24, "4.2ms"), (120.4, "120ms"), (1234, "1.2s"),
                                           (12_500, "12.5s"), (185_000, "3m 05s"), (3_720_000, "1h 02m")])
def test_duration_ms_is_precise_where_short(ms, shown):
    assert duration_ms(ms) == shown


@pytest.mark.parametrize(("seconds", "shown"), [(1.24, "1.2s"), (14.4, "14s"), (185, "3m 05s"), (3720, "1h 02m")])
def test_wall_s_drops_the_tenth_from_ten_seconds(seconds, shown):
    assert wall_s(seconds) == shown


@pytest.mark.parametrize(("seconds", "shown"), [(-5, "0s"), (45, "45s"), (720, "12m"), (7200, "2h"),
                                                (85_020, "23h 37m"), (273_600, "3d 4h")])
def test_span(seconds, shown):
    assert span(seconds) == shown


@pytest.mark.parametrize(("seconds", "shown"), [(-1, "0s"), (45, "45s"), (873, "14m 33s"), (7500, "2h 05m"),
                                                (273_600, "3d 4h")])
def test_countdown_ticks_in_seconds_below_an_hour(seconds, shown):
    assert countdown(seconds) == shown


@pytest.mark.parametrize(("seconds", "shown"), [(45, "0m 45s"), (873, "14m 33s"), (93_900, "26h 05m")])
def test_stopwatch_always_shows_two_units(seconds, shown):
    assert stopwatch(seconds) == shown


@pytest.mark.parametrize(("seconds", "shown"), [(-3, "0s"), (12.9, "12s"), (300, "5m"), (7200, "2h"),
                                                (3 * 86400, "3d")])
def test_age_is_one_unit(seconds, shown):
    assert age(seconds) == shown


def test_minutes_ago():
    assert minutes_ago(100, 100 + 59) == "0 min ago"
    assert minutes_ago(100, 100 + 180) == "3 min ago"
    assert minutes_ago(100, 100 + 3900) == "1h 05m ago"
    assert minutes_ago(100, 50) == "0 min ago"          # a clock ahead is never a negative age


def test_clock_adds_the_date_when_not_today(utc):
    now = at("2026-11-29T14:00:00")
    assert clock(at("2026-11-29T09:03:12"), now) == "09:03:12"
    assert clock(at("2026-11-28T09:03:12"), now) == "11-28 09:03"
    assert clock(None, now) == "–"


def test_stamp_reads_a_stored_instant_as_it_is():
    assert stamp("2026-11-29T14:00:00.000Z") == "2026-11-29 14:00:00.000" and stamp(None) == "–"


def test_zoned_shows_the_year_only_when_not_this_one():
    now = at("2026-11-29T14:00:00")
    assert zoned(at("2026-11-30T01:00:00"), "Europe/Berlin", now) == "Nov 30 02:00"
    assert zoned(at("2027-01-01T01:00:00"), "Europe/Berlin", now) == "2027-01-01 02:00"
    assert in_zone(now, "Not/AZone").utcoffset() is not None      # an unknown zone reads as local


@pytest.mark.parametrize(("value", "shown"), [(None, "–"), (0, "$0"), (0.19, "$0.19"), (12.345, "$12.35"),
                                              (0.0005, "$0.0005"), (0.00123, "$0.0012"), (0.0100, "$0.01")])
def test_usd_keeps_cents_from_a_cent_and_four_places_below(value, shown):
    assert usd(value) == shown


@pytest.mark.parametrize(("size", "shown"), [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (16_234_567, "16.2 MB"),
                                            (3_000_000_000, "3.0 GB")])
def test_file_size_counts_in_powers_of_a_thousand(size, shown):
    assert file_size(size) == shown


def test_usd_narrow_and_cost():
    assert usd_narrow(0.0005) == "$.0005" and usd_narrow(0.19) == "$.19" and usd_narrow(2.5) == "$2.50"
    assert cost(None) == COST_UNKNOWN == "cost unknown" and cost(0.0005) == "$0.0005"


@pytest.mark.parametrize(("dimension", "value", "shown"), [
    ("cost_usd", 0.19, "$0.19"), ("wall_s", 200, "3m 20s"), ("input_tokens", 2100, "2.1k"),
    ("input_tokens", 2000, "2k"), ("steps", 6, "6"), ("output_tokens", 1_300_000, "1.3M"), ("steps", None, "–")])
def test_amount_says_a_budget_figure_in_its_unit(dimension, value, shown):
    assert amount(dimension, value) == shown
    if dimension not in ("cost_usd", "wall_s") and value is not None:
        assert count(value) == shown


def test_column_span_is_exact_below_ten_seconds_and_one_unit_past_a_hundred():
    assert [column_span(s) for s in (0.84, 14.7, 75, 100, 7200, -3)] == ["0.8s", "14s", "75s", "1m", "2h", "0.0s"]


def test_ago_never_reads_negative():
    assert ago(100.0, 112.0) == "12s ago"
    assert ago(100.0 + 23 * 3600, 100.0) == "clock ahead 23h"
    assert ago(100.5, 100.0) == "0.0s ago"   # within the slack: an NTP step, not a clock ahead


def test_the_cli_prints_dollars_to_four_places():
    assert [usd_exact(v) for v in (0.0033, 1.25, 0)] == ["$0.0033", "$1.2500", "$0.0000"]


def test_a_bar_is_full_only_when_everything_is_done():
    assert bar(0, 300, 10) == "░" * 10
    assert bar(150, 300, 10) == "█" * 5 + "░" * 5
    assert bar(299, 300, 10) == "█" * 9 + "░"
    assert bar(300, 300, 10) == "█" * 10


def test_pace_says_the_rate_and_the_time_left():
    assert pace(0, 300, 1.0) == ""
    assert pace(100, 300, 2.0) == "50/s · 4s left"
    assert pace(3, 10, 2.0) == "1.5/s · 4s left"
    assert pace(10, 10, 2.0) == "5.0/s"


def test_the_run_progress_line_counts_the_pace_from_the_first_step_it_ran():
    from tui_agent.cli.text import ProgressLine

    line = ProgressLine()
    assert line.line(None, 4, "ask", False, 0.0) == "step 5 ask"
    assert line.line(303, 0, "settings", True, 0.0) == f"{bar(1, 303)} 1/303 settings (recorded)"
    assert line.line(303, 3, "file:a.py", False, 10.0) == f"{bar(4, 303)} 4/303 file:a.py"
    # 100 files in 2 seconds since the first step this process ran: 50 a second, 199 to go
    assert line.line(303, 103, "file:b.py", False, 12.0) == f"{bar(104, 303)} 104/303 file:b.py · 50/s · 3s left"


def test_a_skew_is_said_only_when_it_explains_something_and_says_which_way():
    from tui_agent.format import skew

    assert skew(None) is None and skew(4.9) is None and skew(-4.9) is None
    assert skew(5) == "5s ahead" and skew(-5) == "5s behind"
    assert skew(86_399) == "23h 59m ahead" and skew(-3600) == "1h behind"
