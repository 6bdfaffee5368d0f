"""The worker's loop between runs (runtime/serve.py): what it asks the database while it claims back to back.

A busy worker claims the next run without asking first whether one is due, and looks at schedules and at runs
held back for a paused sender once a poll, as an idle one does, not once a run: on a server each of those is a
round trip, and a one-step run is about ten."""

from __future__ import annotations

import time

from helpers import registry_of

from tui_agent import Agent
from tui_agent.operate import schedule_add, start
from tui_agent.runtime import serve as loop
from tui_agent.store import open_store

RUNS = 40


def _counted(monkeypatch, name: str) -> list[float]:
    """Each call of serve's `name` (when it was made), the call itself unchanged."""
    calls: list[float] = []
    real = getattr(loop, name)

    def counted(*args, **kwargs):
        calls.append(time.monotonic())
        return real(*args, **kwargs)
    monkeypatch.setattr(loop, name, counted)
    return calls


def test_a_worker_claiming_back_to_back_asks_whats_due_only_once_a_claim_found_nothing(database, monkeypatch):
    registry = registry_of(Agent(name="one", run=lambda ctx, request: ctx.step("s", lambda: request["i"])))
    store = open_store(database)
    try:
        for i in range(RUNS):
            start(store, registry, agent_name="one", request={"i": i})
        asked, ticked, requeued = (_counted(monkeypatch, name) for name in ("any_due", "tick", "requeue_released"))
        began = time.monotonic()
        served = loop.serve(database, "normal", registry=registry, name="w-busy", once=True)
        took = time.monotonic() - began
        assert sorted(o.result for o in served.outcomes) == list(range(RUNS))
        assert {o.status for o in served.outcomes} == {"succeeded"}
        assert len(asked) <= 2, "before the first claim, and after the claim that found the queue empty"
        polls = int(took / 0.5) + 2   # once a poll of 0.5 s, and once as the queue runs dry
        assert 1 <= len(ticked) <= polls and 1 <= len(requeued) <= polls, (len(ticked), took)
        assert all(b - a >= 0.5 for a, b in zip(ticked, ticked[1:-1])), ticked
    finally:
        store.close()


def test_a_schedule_due_while_the_worker_is_busy_fires_within_a_poll(database, clock):
    """The once-a-poll look at schedules still happens while queued runs keep the worker busy: a fire that falls
    due partway through (each run moves the clock on 2 s) is started then, not once the queue is empty."""
    def run(ctx, request):
        return ctx.step("s", lambda: (time.sleep(0.03), clock.advance(2.0))[1])
    registry = registry_of(Agent(name="one", run=run))
    store = open_store(database)
    try:
        minute = (int(clock.now()) // 60 + 2) * 60
        clock.set(minute - 30.0)   # the fire at `minute` falls due once 15 runs have moved the clock on
        schedule_add(store, registry, name="soon", agent="one", cron="* * * * *")
        queued = [start(store, registry, agent_name="one", request={"i": i})[0] for i in range(RUNS)]
        served = loop.serve(database, "normal", registry=registry, name="w-busy", once=True)
        assert {o.status for o in served.outcomes} == {"succeeded"}
        worked = [o.run_id for o in served.outcomes]
        (fired,) = set(worked) - set(queued)   # queued runs are claimed first, so it is worked last
        made = store.conn.execute("SELECT created_at FROM runs WHERE id = ?", (fired,)).fetchone()[0]
        ended = [row[0] for row in store.conn.execute("SELECT finished_at FROM runs WHERE id != ?", (fired,))]
        assert sum(at > made for at in ended) >= 10, "started while at least ten queued runs were still to end"
    finally:
        store.close()
