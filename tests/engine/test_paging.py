"""paging.Window and the keyset pages it reads: a stretch of a long list, moved a page at a time, never more
than `keep` pages held, and each page read by a cursor (so a page costs the same anywhere in the list)."""


from helpers import open_run, registry_of, tui, work

from tui_agent import Agent, Budget
from tui_agent.errors import PermanentError
from tui_agent.messages import DataChanged
from tui_agent.operate import resume, start
from tui_agent.paging import Window, every
from tui_agent.report import effects_of, events_of, run_report
from tui_agent.store import artifacts
from tui_agent.store.approvals import approvals_page
from tui_agent.store.effects import effects_page
from tui_agent.store.events import add_event, events_page
from tui_agent.widgets.events import EventsLog
from tui_agent.widgets.journal import JournalViewer
from tui_agent.widgets.ledger import EffectLedger
from tui_agent.widgets.timeline import Timeline


def listed(n: int):
    """A fetch over the numbers 0..n-1 (the row is its own cursor), recording the size of each read."""
    reads: list[int] = []

    def fetch(after, limit, newest_first):
        if newest_first:
            rows = [i for i in range(n - 1, -1, -1) if after is None or i < after][:limit]
        else:
            rows = [i for i in range(n) if after is None or i > after][:limit]
        reads.append(len(rows))
        return rows

    return fetch, reads


def window(n: int, page: int = 10, keep: int = 3) -> tuple[Window, list[int]]:
    fetch, reads = listed(n)
    return Window(fetch, key=lambda row: row, page=page, keep=keep), reads


def test_first_and_last_read_one_page_and_know_their_ends():
    w, reads = window(1000)
    w.last()
    assert (w.rows, w.at_start, w.at_end) == (list(range(990, 1000)), False, True)
    w.first()
    assert (w.rows, w.at_start, w.at_end) == (list(range(10)), True, False)
    assert reads == [10, 10]


def test_a_short_list_is_whole_in_one_page():
    w, _ = window(4)
    w.last()
    assert (w.rows, w.at_start, w.at_end) == ([0, 1, 2, 3], True, True)
    assert w.forward() == 0 and w.backward() == 0


def test_moving_forward_reads_a_page_at_a_time_and_drops_the_far_end_past_keep_pages():
    w, reads = window(1000)
    w.first()
    for _ in range(4):
        assert w.forward() == 10
    assert w.rows == list(range(20, 50))            # three pages held: the first two dropped
    assert (w.at_start, w.at_end) == (False, False)
    assert w.backward() == 10
    assert w.rows == list(range(10, 40))
    assert reads == [10] * 6


def test_forward_to_the_end_stops_there():
    w, _ = window(25)
    w.first()
    assert w.forward() == 10
    assert w.forward() == 5
    assert w.at_end and w.forward() == 0
    assert w.rows == list(range(25))


def test_around_puts_the_key_a_third_of_the_way_down_in_one_page():
    w, reads = window(1000, page=30)
    w.around(500)
    assert (w.rows[0], w.rows[-1], w.index_of(500)) == (490, 519, 10)
    assert sum(reads) == 30
    w.around(3)                                      # near the start: the page begins at the start
    assert (w.rows[0], w.at_start, w.index_of(3)) == (0, True, 3)
    w.around(998)
    assert (w.rows[-1], w.at_end) == (999, True)


def test_refresh_rereads_the_same_stretch_and_at_the_end_what_came_since():
    rows = list(range(100))

    def fetch(after, limit, newest_first):
        seq = rows[::-1] if newest_first else rows
        return [i for i in seq if after is None or (i < after if newest_first else i > after)][:limit]

    w = Window(fetch, key=lambda r: r, page=10)
    w.around(50)
    held = list(w.rows)
    rows.extend(range(100, 105))
    w.refresh()
    assert w.rows == held                             # the middle stretch stays put
    w.last()
    rows.extend(range(105, 112))
    w.refresh()
    assert (w.rows[-1], w.at_end) == (111, True)      # at the end: the new rows came in
    assert len(w.rows) <= 30


def test_every_reads_the_whole_list_a_page_at_a_time():
    fetch, reads = listed(1234)
    assert list(every(fetch, key=lambda r: r, page=500)) == list(range(1234))
    assert reads == [500, 500, 234]


FAIL_ONCE = {"left": 1}


def _effects_agent(ctx, request):
    for i in range(request["n"]):
        ctx.effect(f"e{i}", key=f"k-{request['tag']}-{i}", do=lambda key: {"sent": key})
    if FAIL_ONCE["left"]:
        FAIL_ONCE["left"] -= 1
        raise PermanentError("the first generation fails after its effects")
    return None


def test_the_ledger_events_and_questions_page_across_generations_in_order(store):
    registry = registry_of(Agent(name="fx", run=_effects_agent, budget=Budget(steps=100)))
    FAIL_ONCE["left"] = 1                              # each store's variant fails its first generation
    run_id, _ = start(store, registry, agent_name="fx", request={"n": 7, "tag": "a"})
    assert work(store, registry, run_id).status == "failed"
    resume(store, run_id, restart=True)               # generation 2 does the same again (each key once)
    assert work(store, registry, run_id).status == "succeeded"

    whole = run_report(store, run_id)
    order = [(e["generation"], e["position"]) for e in whole["effects"]]
    assert order == [(1, p) for p in range(7)] + [(2, p) for p in range(7)]
    paged, after = [], None
    while page := effects_page(store, run_id, after, limit=3):
        paged += [(e["generation"], e["position"]) for e in page]
        after = paged[-1]
    assert paged == order                             # pages of 3 cross from generation 1 into 2
    backwards = effects_page(store, run_id, (2, 1), limit=4, newest_first=True)
    assert [(e["generation"], e["position"]) for e in backwards] == [(2, 0), (1, 6), (1, 5), (1, 4)]
    assert list(effects_of(store, run_id)) == whole["effects"]

    ids = [e["id"] for e in events_page(store, run_id, limit=1000)]
    assert ids == sorted(ids) and len(ids) == len(whole["events"])
    assert [e["id"] for e in events_page(store, run_id, after=ids[3], limit=2)] == ids[4:6]
    assert [e["id"] for e in events_page(store, run_id, after=ids[3], limit=2, newest_first=True)] == ids[2:0:-1]
    assert list(events_of(store, run_id)) == whole["events"]
    assert approvals_page(store, run_id, None, 10) == []


async def test_the_run_screen_reads_older_effects_and_events_as_they_are_reached(store):
    registry = registry_of(Agent(name="fx", run=_effects_agent, budget=Budget(steps=1000)))
    FAIL_ONCE["left"] = 0
    run_id, _ = start(store, registry, agent_name="fx", request={"n": 250, "tag": "many"})
    assert work(store, registry, run_id).status == "succeeded"
    with store.write() as conn:                        # a long life's worth of events, through the store's own call
        for i in range(300):
            add_event(conn, run_id, at=1_800_000_000.0 + i, kind="progress", message=f"event number {i}")

    async with tui(store.path) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        ledger = screen.query_one(EffectLedger)
        assert [int(key.split(":")[1]) for _, key in ledger.rows_shown] == list(range(100))
        ledger.focus()
        ledger.move_cursor(row=99)                     # the bottom of the stretch held: the next page is read
        await pilot.pause()
        assert [int(key.split(":")[1]) for _, key in ledger.rows_shown] == list(range(200))
        assert ledger.rows_shown[ledger.cursor_row][1] == "1:99"      # the cursor stays on its effect
        ledger.move_cursor(row=199)
        await pilot.pause()
        assert [int(key.split(":")[1]) for _, key in ledger.rows_shown] == list(range(250))

        log = screen.query_one(EventsLog)
        assert "event number 299" in log.plain and "event number 199" not in log.plain
        log.scroll_home(animate=False)
        await pilot.pause()
        assert "event number 199" in log.plain and "event number 99" not in log.plain
        assert screen.events.rows[0]["message"] == "event number 100"     # two pages: the newest 200


def _large_results(ctx, request):
    for i in range(request["n"]):
        ctx.step(f"big{i}", lambda i=i: {"i": i, "text": f"row {i} " + "x" * 40_000})   # over 32 KB: an artifact
    return None


async def test_the_timeline_reads_no_large_result_until_one_is_selected(store, monkeypatch):
    registry = registry_of(Agent(name="big", run=_large_results, budget=Budget(steps=100)))
    run_id, _ = start(store, registry, agent_name="big", request={"n": 30})
    assert work(store, registry, run_id).status == "succeeded"
    reads: list[str] = []
    real = artifacts.read

    def read(store, named):   # how a display reads an artifact, a file's or a server's row
        reads.append(named)
        return real(store, named)

    monkeypatch.setattr(artifacts, "read", read)

    async with tui(store.path) as (app, pilot):
        screen = await open_run(app, pilot, run_id)
        timeline = screen.query_one(Timeline)
        results = [item.entry["result"] for item in timeline.items]
        assert results[:-1] == [None] * 29 and results[-1]["i"] == 29     # only the selected one was read
        assert len(reads) == 1
        await pilot.press("g", *"12", "enter")
        await pilot.pause()
        assert "row 12 xxxx" in screen.query_one(JournalViewer).plain
        assert len(reads) == 2
        app.post_message(DataChanged())                 # a refresh keeps it, read once
        screen.reload()
        await pilot.pause()
        assert len(reads) == 2 and "row 12 xxxx" in screen.query_one(JournalViewer).plain
