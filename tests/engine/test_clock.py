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


def test_a_run_worked_on_a_clock_of_its_own_never_moves_the_process_clock(store):
    """The simulator's need: a scenario 30 hours ahead sleeps, wakes and sends on its own clock, while every
    timestamp the process clock gives (the user's runs, leases) stays where it was."""
    from helpers import registry_of

    from tui_agent import Agent
    from tui_agent.operate import start
    from tui_agent.runtime.clock import CLOCK
    from tui_agent.runtime.worker import execute
    from tui_agent.store.runs import claim_run, events_for, get_run

    def nap(ctx, request):
        ctx.step("before", lambda: 1)
        ctx.sleep("nap", 3600)
        return ctx.step("after", lambda: 2)

    registry = registry_of(Agent(name="napper", run=nap))
    run_id, _ = start(store, registry, agent_name="napper", request={})
    real = CLOCK.now()
    scenario = Clock(start=real + 30 * 3600)
    scenario.freeze(real + 30 * 3600)
    first = execute(store, registry, claim=claim_run(store, run_id, "w-sim", 60.0, scenario.now), clock=scenario)
    assert (first.status, first.reason) == ("waiting", "sleep")
    assert get_run(store, run_id)["wake_at"] == real + 31 * 3600       # an hour after the scenario's now
    assert claim_run(store, run_id, "w-real", 60.0, CLOCK.now) is None      # not due on the process clock
    scenario.advance(2 * 3600)
    second = execute(store, registry, claim=claim_run(store, run_id, "w-sim", 60.0, scenario.now), clock=scenario)
    assert second.status == "succeeded"
    assert get_run(store, run_id)["finished_at"] == real + 32 * 3600
    stamps = [e["at"] for e in events_for(store, run_id)][1:]           # the first is start's, on the process clock
    assert min(stamps) >= real + 30 * 3600
    assert abs(CLOCK.now() - real) < 60                                  # the process clock never moved
