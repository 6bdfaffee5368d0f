"""Finding runs (issue 40, item 2): the filter's words (tui_agent/filters.py) and `ls`'s options select the runs
they say on a seeded database, alone and combined, a keyset page at a time; each filtered page reads through an
index on both stores (EXPLAIN); the TUI's `/` takes the same words and says the filter in its header; a saved
filter is kept in the database and offered in the palette."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from helpers import Recording, key, ok, screen_of, shown_ids, strip, tui

from tui_agent import operate
from tui_agent.filters import Filter, FilterError, instant, parse
from tui_agent.report import runs_listing, saved_filters_report
from tui_agent.store import open_store
from tui_agent.store.runs import insert_run, runs_page

AGENTS = ("alpha", "beta", "nightly-report")
KINDS = [("succeeded", "check_passed"), ("failed", "error"), ("parked", "person"), ("waiting", "approval"),
         ("queued", "new"), ("cancelled", "person"), ("waiting", "sleep")]
PER_DAY = 15
DAYS = 8


def seed(where, base: float) -> dict[str, dict]:
    """PER_DAY runs a day for DAYS days back from `base`, newest first every 17 minutes of their day: agents,
    statuses and reasons in turn, a cost each (run i spent i cents), a request naming one of five topics and, for
    every seventh run, an outage. {run id: what a filter is about}."""
    store = open_store(where)
    runs = {}
    try:
        with store.write() as conn:
            for i in range(PER_DAY * DAYS):
                day, slot = divmod(i, PER_DAY)
                created = base - day * 86400 - slot * 17 * 60
                agent, (status, reason) = AGENTS[i % 3], KINDS[i % len(KINDS)]
                request = {"topic": f"topic-{i % 5}", **({"note": "Outage in EU-west"} if i % 7 == 0 else {})}
                run_id, _ = insert_run(conn, agent=agent, agent_version="1", code_version="c",
                                       request=json.dumps(request), budget="{}", model="scripted", now=created)
                conn.execute("UPDATE runs SET status = ?, reason = ? WHERE id = ?", (status, reason, run_id))
                conn.execute("UPDATE checkpoints SET used_cost_usd = ? WHERE run_id = ?", (i / 100, run_id))
                runs[run_id] = {"id": run_id, "agent": agent, "status": status, "reason": reason, "created_at": created,
                                "cost": i / 100, "request": json.dumps(request)}
    finally:
        store.close()
    return runs


def selected(runs: dict[str, dict], where: Filter, at: float) -> list[str]:
    """What `where` selects, said again here without SQL, newest first."""
    since, until = where.instants(at)

    def keeps(run: dict) -> bool:
        text = " ".join([run["id"], run["agent"], run["reason"], run["request"]]).lower()
        return ((not where.statuses or run["status"] in where.statuses)
                and (where.agent is None or run["agent"] == where.agent)
                and (since is None or run["created_at"] >= since) and (until is None or run["created_at"] < until)
                and (where.cost_above is None or run["cost"] > where.cost_above)
                and (where.cost_below is None or run["cost"] < where.cost_below)
                and all(word.lower() in text for word in where.words))

    kept = [run for run in runs.values() if keeps(run)]
    return [run["id"] for run in sorted(kept, key=lambda run: (run["created_at"], run["id"]), reverse=True)]


BASE = datetime(2026, 11, 29, 12, 0).timestamp   # noon, local time, once the zone is set
WORDS = [
    "status:failed", "status:waiting,parked", "agent:beta", "since:3d", "until:2026-11-26", "since:2026-11-25",
    "cost>:0.5", "cost<:$0.2", "outage", "TOPIC-3", "eu-west outage", "approval",
    "agent:alpha status:succeeded", "agent:beta since:2d cost>:0.05", "status:waiting since:2026-11-24 until:5d",
    "agent:nightly-report outage since:1w", "status:cancelled,queued agent:alpha topic-1 cost<:1",
]


def test_each_word_and_their_combinations_select_what_they_say(database, local_zone):
    """Every word of WORDS on the same seeded database, each read in pages of 7 (a keyset cursor from each page's
    last row) in every section of the runs list."""
    at = BASE() + 3600
    runs = seed(database, BASE())
    store = open_store(database)
    try:
        for words in WORDS:
            where = parse(words)
            expected = selected(runs, where, at)
            assert expected and len(expected) < len(runs), f"{words}: selects all or nothing, which proves little"
            for needs_person in (None, True, False):
                ids, before = [], None
                while True:
                    page = runs_page(store, limit=7, where=where, at=at, needs_person=needs_person, before=before)
                    ids += [row["id"] for row in page]
                    if len(page) < 7:
                        break
                    before = (page[-1]["created_at"], page[-1]["id"])
                wanted = [run_id for run_id in expected if needs_person is None or
                          (runs[run_id]["status"] == "parked" or runs[run_id]["status"] == "waiting"
                           and runs[run_id]["reason"] == "approval") == needs_person]
                assert ids == wanted, (words, needs_person)
    finally:
        store.close()


def test_a_date_is_its_local_midnight_and_an_age_counts_back_from_now(local_zone):
    assert instant("2026-11-29", 0) == datetime(2026, 11, 29).astimezone().timestamp()
    assert instant("2026-11-29", 0) - datetime.fromisoformat("2026-11-29T00:00Z").timestamp() == 5 * 3600
    assert instant("2026-11-29T14:00+01:00", 0) == datetime.fromisoformat("2026-11-29T13:00Z").timestamp()
    assert instant("90m", 10_000) == 10_000 - 5400
    assert instant("2w", 2e6) == 2e6 - 14 * 86400


@pytest.mark.parametrize(("words", "said"), [
    ("agnet:beta", "agnet: in agnet:beta is not a filter word"),
    ("status:bogus", "bogus is not a status (statuses are: queued, running"),
    ("since:yesterday", "since:yesterday is not a time: give an age"),
    ("cost>:lots", "cost>:lots is not an amount of dollars"),
    ("agent:", "agent: needs a value, such as agent:nightly-report"),
    ("agent:a agent:b", "agent: is given twice"),
])
def test_words_it_cannot_read_are_refused_saying_how_to_write_them(words, said):
    with pytest.raises(FilterError) as refused:
        parse(words)
    assert str(refused.value).startswith(said)
    assert refused.value.exit_code == 2


def test_the_words_read_back_to_the_same_filter_and_quotes_keep_text_with_a_colon():
    where = parse('status:queued,WAITING agent:beta since:3d until:2026-11-29 cost>:$0.10 cost<:2 "error: x" y')
    assert where == Filter(statuses=("queued", "waiting"), agent="beta", since="3d", until="2026-11-29",
                           cost_above=0.10, cost_below=2.0, words=("error: x", "y"))
    assert parse(str(where)) == where
    assert not parse("   ") and parse("x")


def test_ls_takes_the_same_selection_as_options(tui_agent, db_path, local_zone):
    """`ls --status --agent --since --until --text --limit` in a real process: the ids it lists, in order."""
    at = time.time()
    runs = seed(db_path, at)

    def listed(*options: str) -> list[str]:
        return [row["id"] for row in json.loads(ok(tui_agent("ls", *options, "--json")).stdout)]

    both = Filter(statuses=("waiting", "parked"))
    assert listed("--status", "waiting", "--status", "parked") == selected(runs, both, at)
    combined = Filter(agent="beta", since="5d", until="1d", words=("topic-2",))
    assert listed("--agent", "beta", "--since", "5d", "--until", "1d", "--text", "TOPIC-2") == \
        selected(runs, combined, at)
    assert listed("--text", "outage eu-west", "--limit", "4") == selected(runs, Filter(words=("outage", "eu-west")),
                                                                         at)[:4]
    assert listed("--limit", "3") == selected(runs, Filter(), at)[:3]
    refused = tui_agent("ls", "--since", "soon")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith("tui-agent: --since soon is not a time: give an age")
    table = ok(tui_agent("ls", "--agent", "nobody")).stdout
    assert table == 'no run matches "agent:nobody"\n'


# -- every filtered page reads through an index ---------------------------------------------------------------

def _statement(store, monkeypatch, **query) -> tuple[str, tuple]:
    recording = Recording(store.conn)
    with monkeypatch.context() as patch:
        patch.setattr(store, "conn", recording)
        runs_page(store, limit=200, **query)
    (found,) = recording.statements
    return found


PLANNED = {   # words -> the index SQLite reads the runs through
    "status:failed": "runs_status_created", "agent:beta": "runs_agent_created",
    "since:3d": "idx_runs_created_at_id", "until:2026-11-26": "idx_runs_created_at_id",
    "since:2026-11-24 until:2d": "idx_runs_created_at_id", "status:waiting since:3d": "runs_status_created",
    "agent:beta since:3d cost>:0.1": "runs_agent_created", "cost>:0.5 since:1w": "idx_runs_created_at_id",
    "outage": "idx_runs_created_at_id", "agent:alpha outage": "runs_agent_created",
}


@pytest.mark.parametrize("cursor", [False, True])
@pytest.mark.parametrize("needs_person", [None, False])
@pytest.mark.parametrize("words", sorted(PLANNED))
def test_on_sqlite_each_filtered_page_reads_its_runs_through_an_index_in_order(db_path, monkeypatch, local_zone,
                                                                               words, needs_person, cursor):
    at = BASE() + 3600
    seed(db_path, BASE())
    store = open_store(db_path)
    try:
        before = (BASE() - 2 * 86400, "r-z") if cursor else None
        sql, params = _statement(store, monkeypatch, where=parse(words), at=at, needs_person=needs_person,
                                 before=before)
        plan = " | ".join(row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    finally:
        store.close()
    assert f"r USING INDEX {PLANNED[words]}" in plan or f"r USING COVERING INDEX {PLANNED[words]}" in plan, plan
    assert "SCAN r " not in plan.replace("SCAN r USING", ""), plan      # no scan of the table itself
    assert "TEMP B-TREE" not in plan, plan                               # read in order: nothing sorted
    assert "SEARCH c USING INDEX" in plan, plan                          # the checkpoint by its key


@pytest.mark.postgres
def test_on_postgresql_each_filtered_page_reads_through_an_index(pg_url, monkeypatch, local_zone):
    """Beside the seeded runs, 30,000 older ones of another agent, so that the planner weighs a table of the size
    where it matters (on 120 rows any plan is as good): each page reads the runs through the same index as on
    SQLite, in order (no sort). (Text alone selects every run, which PostgreSQL's planner rightly scans.)"""
    at = BASE() + 3600
    seed(pg_url, BASE())
    store = open_store(pg_url)
    plans = {}
    try:
        with store.write() as conn:
            conn.execute("INSERT INTO runs (id, agent, request, status, reason, created_at, updated_at)"
                         " SELECT 'r-old' || n, 'filler', '{}', 'succeeded', 'returned', ? - n * 60, ? - n * 60"
                         " FROM generate_series(1, 30000) AS n", (BASE() - 30 * 86400,) * 2)
            conn.execute("INSERT INTO checkpoints (run_id, generation, schema_version) SELECT id, 1, 1 FROM runs"
                         " WHERE agent = 'filler'")
        store.conn.execute("ANALYZE")
        for words in sorted(set(PLANNED) - {"outage"}):
            sql, params = _statement(store, monkeypatch, where=parse(words), at=at, needs_person=False)
            plans[words] = "\n".join(row[0] for row in store.conn.execute(f"EXPLAIN {sql}", params))
    finally:
        store.close()
    for words, plan in plans.items():
        assert f"Index Scan Backward using {PLANNED[words]} on runs r" in plan, (words, plan)
        assert "Seq Scan on runs" not in plan and "Sort" not in plan, (words, plan)


# -- the TUI: the same words, the filter in the header, saved filters in the palette ------------------------------

async def test_the_tui_filter_takes_the_words_and_says_the_filter_in_its_header(db_path):
    at = time.time()
    runs = seed(db_path, at)
    async with tui(db_path) as (app, pilot):
        await pilot.pause()
        await pilot.press("slash", *"agent:beta since:3d cost>:0.2", "enter")
        await pilot.pause()
        expected = selected(runs, parse("agent:beta since:3d cost>:0.2"), time.time())
        assert sorted(shown_ids(app)) == sorted(expected) and expected
        assert "filter: agent:beta since:3d cost>:0.2" in str(screen_of(app).query_one("#summary").content)
        await key(pilot, "escape")
        await pilot.press("slash", *"agnet:beta", "enter")
        await pilot.pause()
        assert shown_ids(app) == []
        assert strip(app).startswith('no run matches "agnet:beta": agnet: in agnet:beta is not a filter word')


async def test_a_saved_filter_is_kept_in_the_database_and_offered_in_the_palette(db_path):
    from tui_agent.screens.modals import SaveFilterModal
    from tui_agent.screens.palette import RunCommands

    at = time.time()
    runs = seed(db_path, at)
    async with tui(db_path) as (app, pilot):
        await pilot.pause()
        await pilot.press("slash", *"status:failed outage", "enter")
        await pilot.pause()
        (save,) = [hit async for hit in RunCommands(app.screen).search("save the filter")]
        save.command()
        await pilot.pause()
        assert isinstance(app.screen, SaveFilterModal)
        await pilot.press(*"broken", "enter")
        await pilot.pause()
        assert [(row["name"], row["words"]) for row in saved_filters_report(app.reader)] == \
            [("broken", "status:failed outage")]
        await key(pilot, "escape")                              # the filter cleared: every run again
        assert len(shown_ids(app)) == min(len(runs), 200)
        (apply,) = [hit async for hit in RunCommands(app.screen).search("filter: broken")]
        assert str(apply.text).endswith("(status:failed outage)")
        apply.command()
        await pilot.pause()
        assert sorted(shown_ids(app)) == sorted(selected(runs, parse("status:failed outage"), time.time()))
        (forget,) = [hit async for hit in RunCommands(app.screen).search("forget the saved filter broken")]
        forget.command()
        await pilot.pause()
        assert saved_filters_report(app.reader) == []


def test_filter_save_ls_and_rm_on_the_command_line(tui_agent, db_path):
    seed(db_path, time.time())
    assert ok(tui_agent("filter", "save", "late", "status:waiting since:2d")).stdout == \
        "filter late selects: status:waiting since:2d\n"
    assert ok(tui_agent("filter", "save", "late", "status:parked")).stdout == "filter late now selects: status:parked\n"
    assert [(r["name"], r["words"]) for r in json.loads(ok(tui_agent("filter", "ls", "--json")).stdout)] == \
        [("late", "status:parked")]
    for bad, said in ((["filter", "save", "x", "agnet:y"], "tui-agent: agnet: in agnet:y is not a filter word"),
                      (["filter", "save", "a b", "status:parked"], "tui-agent: filter name 'a b': use 1 to 40"),
                      (["filter", "rm", "nope"], "tui-agent: no filter named 'nope'; see tui-agent filter ls")):
        refused = tui_agent(*bad)
        assert refused.returncode == 2 and refused.stderr.startswith(said), refused.stderr
    assert ok(tui_agent("filter", "rm", "late")).stdout == "filter late forgotten\n"
    store = open_store(db_path)
    try:
        assert saved_filters_report(store) == []
        with pytest.raises(FilterError):
            operate.save_filter(store, "x", "since:soon")
    finally:
        store.close()


def test_runs_listing_pages_through_the_filter_and_stops_at_the_limit(db_path, local_zone):
    runs = seed(db_path, time.time())
    store = open_store(db_path)
    try:
        everything = [row["id"] for row in runs_listing(store)]
        assert everything == selected(runs, Filter(), time.time()) and len(everything) == len(runs)
        assert [row["id"] for row in runs_listing(store, Filter(agent="alpha"), 9)] == \
            selected(runs, Filter(agent="alpha"), time.time())[:9]
    finally:
        store.close()
