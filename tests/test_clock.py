import json

from tui_agent.runtime.clock import Clock, iso, parse_instant


def test_clock_moves_only_when_told():
    clock = Clock(start=parse_instant("2026-11-29T02:00:00Z"))
    t = clock.now()
    assert abs(t - parse_instant("2026-11-29T02:00:00Z")) < 5
    clock.advance(3600)
    assert abs(clock.now() - t - 3600) < 5
    clock.set(0)
    assert clock.now() < 5


def test_restored_puts_the_clock_back_as_it_was():
    clock = Clock(start=parse_instant("2026-11-29T02:00:00Z"))
    with clock.restored() as moved:
        assert moved is clock
        moved.advance(86400)
        moved.freeze(parse_instant("2030-01-01T00:00:00Z"))
    assert abs(clock.now() - parse_instant("2026-11-29T02:00:00Z")) < 5
    clock.freeze(100.0)
    with clock.restored():
        clock.freeze(None)
        clock.set(5000.0)
    assert clock.now() == 100.0


def test_iso_round_trips():
    ts = parse_instant("2026-11-29T02:00:00.250+00:00")
    assert iso(ts) == "2026-11-29T02:00:00.250Z"
    assert parse_instant("2026-11-29T02:00:00") == parse_instant("2026-11-29T02:00:00Z")


def test_tui_agent_now_starts_a_subprocess_clock(tui_agent):
    run_id = tui_agent("start", "hello", env={"TUI_AGENT_NOW": "2031-03-04T05:06:07Z"}).stdout.strip()
    created = json.loads(tui_agent("show", run_id, "--json").stdout)["run"]["created_at"]
    assert created.startswith("2031-03-04T05:06:0")


def test_a_bad_tui_agent_now_is_one_line_exit_2(tui_agent):
    done = tui_agent("ls", env={"TUI_AGENT_NOW": "next tuesday"})
    assert done.returncode == 2
    assert "TUI_AGENT_NOW" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_crash_point_is_one_line_exit_2(tui_agent):
    done = tui_agent("ls", env={"TUI_AGENT_CRASH_AT": "after-lunch"})
    assert done.returncode == 2
    assert "known points" in done.stderr
    assert "Traceback" not in done.stderr
