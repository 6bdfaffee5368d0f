"""`tui-agent diff A B` and the domain behind it (tui_agent/services/diff.py): a fork against its parent (the entries
before the fork point once, the first divergence where the fork's own path starts), a rerun of the same request
with another scripted model reply, edited entries, runs of different lengths, bad input, and paging: what a diff
reads is bounded by pages, not by the runs' length (rows and statements counted, not timed)."""

from __future__ import annotations

import json

import pytest
from diff_agents import COUNTING, asker
from helpers import registry_of, start_and_work, work

from tui_agent.operate import fork, start
from tui_agent.paging import Window
from tui_agent.services import diff
from tui_agent.services.diff import (
    aligned_page,
    candidates,
    first_divergence,
    pair,
    rows_of,
    same_result,
    totals,
)
from tui_agent.store import artifacts
from tui_agent.store.journal import checkpoint_for


@pytest.fixture
def parent_and_fork(store):
    """A finished run, and a fork of it at position 2 (keeping settings and fetch) whose model now replies
    otherwise: the fork's path starts at #2."""
    parent = start_and_work(store, registry_of(asker("all quiet")), "asker", {"team": "ops"}).run_id
    child = fork(store, parent, 2)
    assert work(store, registry_of(asker("three incidents")), child).status == "succeeded"
    return parent, child


# -- a fork against its parent --------------------------------------------------------------------


def test_a_fork_against_its_parent_shows_the_kept_entries_once_and_diverges_at_the_fork_point(store, parent_and_fork):
    parent, child = parent_and_fork
    p = pair(store, parent, child)
    assert p.fork == {"parent": parent, "child": child, "fork_step": 2}
    rows = list(rows_of(store, p))
    assert [r["position"] for r in rows] == [0, 1, 2, 3]
    assert [r["shared"] for r in rows] == [True, True, False, False]
    assert [r["why"] for r in rows] == [None, None, "result", "result"]
    assert rows[2]["differs"]["cost"]            # another reply, other tokens: another cost
    assert first_divergence(store, p) == {"position": 2, "why": "result",
                                          "message": "'summarize' returned another result"}
    # the other way round is the same relation
    assert pair(store, child, parent).fork == p.fork


def test_diff_prints_the_kept_entries_once_and_exits_1(invoke, store, parent_and_fork):
    parent, child = parent_and_fork
    done = invoke("diff", parent, child)
    assert done.exit_code == 1, done.output
    out = done.output.splitlines()
    assert out[1].endswith("fork of A at #2")
    assert any(line.startswith("cost") and line.endswith("differs") for line in out)
    assert "first divergence: #2 (the results differ): 'summarize' returned another result" in out
    rows = {int(line[1:7]): line for line in out if line[1:7].strip().isdigit()}
    assert list(rows) == [0, 1, 2, 3]
    for kept, name in ((0, "settings"), (1, "fetch")):
        assert rows[kept].count(name) == 1 and rows[kept].rstrip().endswith("= shared")
    assert rows[2].startswith(">") and rows[2].count("summarize") == 2 and "result cost" in rows[2]
    assert not rows[3].startswith(">") and rows[3].count("write") == 2 and rows[3].endswith("result")


def test_diff_json_of_a_fork(invoke, store, parent_and_fork):
    parent, child = parent_and_fork
    done = invoke("diff", parent, child, "--json")
    assert done.exit_code == 1
    shown = json.loads(done.output)
    assert list(shown) == ["a", "b", "fork", "same", "totals", "first_divergence", "window", "entries"]
    assert shown["same"] is False
    assert shown["fork"] == {"parent": parent, "child": child, "fork_step": 2}
    assert shown["a"]["id"] == parent and shown["b"]["parent_id"] == parent and shown["b"]["entries"] == 4
    found = shown["first_divergence"]
    assert (found["position"], found["why"]) == (2, "result")
    assert found["a"]["result"]["content"][0]["text"] == "all quiet"
    assert found["b"]["result"]["content"][0]["text"] == "three incidents"
    # the totals are checkpoints_now's (a fork counts what it ran itself: the two steps after the fork point)
    for side, run_id in (("a", parent), ("b", child)):
        assert shown["totals"][side]["steps"] == checkpoint_for(store, run_id)["used_steps"]
    assert (shown["totals"]["a"]["steps"], shown["totals"]["b"]["steps"]) == (4, 2)
    assert "steps" in shown["totals"]["differ"]
    entries = {e["position"]: e for e in shown["entries"]}
    assert list(entries) == [0, 1, 2, 3]
    assert entries[0]["shared"] and entries[0]["a"]["name"] == "settings" and not entries[0]["why"]
    assert entries[2]["differs"] == {"name": False, "result": True, "cost": True,
                                     "duration": entries[2]["differs"]["duration"]}
    assert entries[2]["a"]["kind"] == "model" and entries[2]["a"]["cost_usd"] != entries[2]["b"]["cost_usd"]


def test_a_fork_that_ran_the_same_way_is_the_same_entry_for_entry(invoke, store):
    parent = start_and_work(store, registry_of(asker("all quiet")), "asker", {"team": "ops"}).run_id
    child = fork(store, parent, 2)
    work(store, registry_of(asker("all quiet")), child)
    done = invoke("diff", child, parent)
    assert done.exit_code == 0, done.output
    assert "the same entry for entry (4 entries: names and results)" in done.output
    assert "POS" not in done.output                    # no window to show without --all
    every = invoke("diff", child, parent, "--all")
    assert every.exit_code == 0
    assert sum(line.rstrip().endswith("= shared") for line in every.output.splitlines()) == 2


# -- a rerun with another model reply -------------------------------------------------------------


def test_a_rerun_of_the_same_request_with_another_reply(invoke, store):
    first = start_and_work(store, registry_of(asker("all quiet")), "asker", {"team": "ops"}).run_id
    again = start_and_work(store, registry_of(asker("the database was down for an hour")), "asker",
                           {"team": "ops"}).run_id
    p = pair(store, first, again)
    assert p.fork is None and p.shared_until == 0
    rows = list(rows_of(store, p))
    assert [r["why"] for r in rows] == [None, None, "result", "result"]
    assert not any(r["shared"] for r in rows)          # equal, but not one copied entry
    assert [r["differs"]["name"] for r in rows] == [False] * 4
    assert first_divergence(store, p)["position"] == 2
    a, b = totals(store, first), totals(store, again)
    assert b["output_tokens"] > a["output_tokens"] and b["cost_usd"] > a["cost_usd"]
    done = invoke("diff", first[:6], again[:6], "--json")  # prefixes go through resolve_run
    assert done.exit_code == 1
    shown = json.loads(done.output)
    assert shown["fork"] is None and shown["first_divergence"]["position"] == 2
    assert {"output_tokens", "cost_usd"} <= set(shown["totals"]["differ"])
    assert shown["window"] == {"first": 0, "last": 2 + diff.AFTER - 1}


def test_the_same_request_and_reply_twice_is_the_same(invoke, store):
    first = start_and_work(store, registry_of(asker("all quiet")), "asker", {"team": "ops"}).run_id
    again = start_and_work(store, registry_of(asker("all quiet")), "asker", {"team": "ops"}).run_id
    assert first_divergence(store, pair(store, first, again)) is None
    assert invoke("diff", first, again).exit_code == 0
    assert json.loads(invoke("diff", first, again, "--json").output)["same"] is True


def test_a_model_reply_that_differs_only_by_its_id_is_the_same_result():
    reply = {"id": "msg_1", "type": "message", "content": [{"type": "text", "text": "hi"}]}
    row = {"kind": "model", "artifact": None, "result": json.dumps(reply)}
    other = {**row, "result": json.dumps({**reply, "id": "msg_2"})}
    assert same_result(row, other, None)
    assert not same_result(row, {**other, "result": json.dumps({**reply, "content": []})}, None)
    assert not same_result({**row, "kind": "step"}, {**other, "kind": "step"}, None)   # only a model's id


def test_results_in_artifacts_are_compared_by_content(store):
    for name, text in (("a.json", '"x"' * 10), ("b.json", '"x"' * 10), ("c.json", '"y"' * 10)):
        artifacts.save(store, f"artifacts/r-1/{name}", text.encode())
    row = {"kind": "step", "result": None, "artifact": "artifacts/r-1/a.json"}
    assert same_result(row, {**row, "artifact": "artifacts/r-1/b.json"}, store)
    assert not same_result(row, {**row, "artifact": "artifacts/r-1/c.json"}, store)
    assert not same_result(row, {**row, "artifact": None, "result": '"x"'}, store)
    assert not same_result(row, {**row, "artifact": "artifacts/r-1/missing.json"}, store)
    assert not same_result(row, {**row, "artifact": "../a.json"}, store)   # a row naming a file elsewhere: unread


def test_the_duration_and_cost_rules():
    assert not diff._duration_differs(0.100, 0.108)      # under 10 %
    assert diff._duration_differs(0.100, 0.120)          # 20 % and 20 ms
    assert not diff._duration_differs(0.001, 0.004)      # 4x, but 3 ms
    assert diff._cost_differs(None, 0.001) and not diff._cost_differs(None, None)
    assert not diff._cost_differs(0.0005, 0.0005 + 1e-12) and diff._cost_differs(0.0005, 0.0006)


# -- edited entries, lengths, bad input ------------------------------------------------------------


def test_an_edited_entry_before_the_fork_point_is_marked_and_diverges(invoke, store):
    parent = start_and_work(store, registry_of(asker("all quiet")), "asker", {"team": "ops"}).run_id
    child = fork(store, parent, 3)
    # what the edit-and-fork feature writes: the fork's copy of entry 1 (in journal_rows, as a fork writes it) with a
    # person's result, marked
    store.conn.execute("UPDATE journal_rows SET result = '[9]', edited = 1 WHERE run_id = ? AND position = 1", (child,))
    work(store, registry_of(asker("all quiet")), child)
    p = pair(store, parent, child)
    rows = list(rows_of(store, p))
    assert [r["shared"] for r in rows] == [True, False, True, False]
    assert rows[1]["b"]["edited"] and not rows[1]["a"]["edited"]
    assert first_divergence(store, p)["position"] == 1
    done = invoke("diff", parent, child)
    assert done.exit_code == 1
    line = next(line for line in done.output.splitlines() if line[1:7].strip() == "1")
    assert line.count("fetch ✎") == 1 and line.count("fetch") == 2
    shown = json.loads(invoke("diff", parent, child, "--json").output)
    assert shown["entries"][1]["b"]["edited"] is True and shown["entries"][1]["a"]["edited"] is False


def test_runs_of_different_lengths_diverge_where_the_shorter_one_ends(invoke, store):
    registry = registry_of(COUNTING)
    short = start_and_work(store, registry, "counting", {"steps": 5}).run_id
    longer = start_and_work(store, registry, "counting", {"steps": 7}).run_id
    p = pair(store, short, longer)
    assert first_divergence(store, p) == {"position": 5, "why": "only_b",
                                          "message": "only B has an entry here ('s5'); A has none from here on"}
    last = aligned_page(store, p, newest_first=True, limit=3)
    assert [(r["position"], r["a"] is None, r["b"] is None) for r in last] == [(6, True, False), (5, True, False),
                                                                              (4, False, False)]
    done = invoke("diff", short, longer)
    assert done.exit_code == 1
    assert "first divergence: #5 (only B has an entry)" in done.output


def test_bad_input_is_one_line_and_exit_2(invoke, store):
    registry = registry_of(COUNTING)
    one = start_and_work(store, registry, "counting", {"steps": 1}).run_id
    start_and_work(store, registry, "counting", {"steps": 1})
    for args, said in (((one, "r-nothing"), "no run has an id starting with 'r-nothing'"),
                       ((one, "r-"), "is ambiguous"),
                       ((one, one), "are the same run")):
        done = invoke("diff", *args)
        assert done.exit_code == 2, done.output
        assert said in done.output and len(done.output.strip().splitlines()) == 1


# -- paging ---------------------------------------------------------------------------------------

STEPS = 3000


@pytest.fixture
def long_pair(db_path):
    """Two runs of STEPS steps whose results differ at #10 only."""
    from tui_agent.store import open_store

    store = open_store(db_path, durability="normal")
    registry = registry_of(COUNTING)
    a = start_and_work(store, registry, "counting", {"steps": STEPS}).run_id
    b = start_and_work(store, registry, "counting", {"steps": STEPS, "odd_at": 10}).run_id
    yield store, a, b
    store.close()


@pytest.fixture
def rows_read(monkeypatch):
    """The journal rows diff.py reads, page by page (it reads the journal only through journal_page)."""
    pages: list[int] = []
    read = diff.journal_page

    def counted(*args, **kwargs):
        rows = read(*args, **kwargs)
        pages.append(len(rows))
        return rows

    monkeypatch.setattr(diff, "journal_page", counted)
    return pages


def test_the_cli_reads_pages_up_to_the_divergence_not_the_runs(invoke, long_pair, rows_read):
    store, a, b = long_pair
    done = invoke("diff", a, b)
    assert done.exit_code == 1
    assert "first divergence: #10 (the results differ)" in done.output
    # the search's first page of each run, the divergence's row for its results, the window's page
    assert sum(rows_read) <= 2 * (diff.PAGE + 1 + diff.BEFORE + diff.AFTER)
    assert sum(rows_read) < STEPS
    rows_read.clear()
    assert invoke("diff", a, b, "--json").exit_code == 1
    assert sum(rows_read) <= 2 * (diff.PAGE + 1 + diff.BEFORE + diff.AFTER)


def test_all_streams_every_entry_a_page_at_a_time(invoke, long_pair, rows_read):
    store, a, b = long_pair
    done = invoke("diff", a, b, "--all", "--json")
    assert done.exit_code == 1
    shown = json.loads(done.output)
    assert [e["position"] for e in shown["entries"]] == list(range(STEPS))
    assert [e["position"] for e in shown["entries"] if e["why"]] == [10]
    assert max(rows_read) <= diff.PAGE                  # never more than a page at a time


def test_a_page_of_the_diff_costs_the_same_statements_anywhere_in_the_runs(long_pair):
    store, a, b = long_pair
    p = pair(store, a, b)
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        fetches = []

        def fetch(after, limit, newest):
            rows = aligned_page(store, p, after, limit, newest)
            fetches.append(len(rows))
            assert len(rows) <= limit
            return rows

        window = Window(fetch, key=lambda row: row["position"], page=100)
        for move in (window.first, window.last, lambda: window.around(1500), window.forward, window.backward):
            statements.clear()
            fetches.clear()
            move()
            journal = [s for s in statements if "FROM journal" in s]
            assert len(fetches) <= 2 and sum(fetches) <= 100
            # per run and fetch: its page (LIMIT), its edited marks (a range), and where it ends (one seek)
            assert len(journal) <= 3 * 2 * len(fetches), journal
            assert all("LIMIT" in s or "max(position)" in s or "BETWEEN" in s for s in journal)
        assert [r["position"] for r in window.rows] == list(range(window.rows[0]["position"],
                                                                  window.rows[-1]["position"] + 1))
        assert len(window.rows) <= 300
    finally:
        store.conn.set_trace_callback(None)
    window.around(1500)
    assert window.rows[window.index_of(1500)]["a"]["name"] == "s1500"
    assert all(r["a"] is not None and r["b"] is not None for r in window.rows)


def test_the_first_divergence_is_found_a_page_at_a_time_and_can_be_stopped(long_pair, rows_read):
    store, a, b = long_pair
    p = pair(store, a, b)
    assert first_divergence(store, p)["position"] == 10
    assert rows_read == [diff.PAGE, diff.PAGE]
    rows_read.clear()
    calls = []
    assert first_divergence(store, p, cancelled=lambda: calls.append(1) or len(calls) > 3) is None
    assert len(calls) == 4 and sum(rows_read) == 2 * diff.PAGE


# -- the picker's candidates, and the layering rule --------------------------------------------------


def test_the_other_runs_offered_put_a_forks_parent_first(store, parent_and_fork):
    parent, child = parent_and_fork
    registry = registry_of(asker("x"), COUNTING)
    other = start_and_work(store, registry, "asker", {"team": "ops"}).run_id
    start_and_work(store, registry, "counting", {"steps": 1})      # another agent: not offered
    offered = candidates(store, child)
    assert [c["id"] for c in offered] == [parent, other]
    assert offered[0]["kind"] == "parent" and "forked at #2" in offered[0]["relation"]
    from_parent = candidates(store, parent)
    assert [c["id"] for c in from_parent] == [child, other]
    assert from_parent[0]["kind"] == "fork"


def test_a_queued_fork_diverges_at_its_fork_point(store, parent_and_fork):
    parent, _ = parent_and_fork
    queued = fork(store, parent, 3)
    p = pair(store, parent, queued)
    assert first_divergence(store, p)["position"] == 3 and first_divergence(store, p)["why"] == "only_a"
    assert start(store, registry_of(COUNTING), agent_name="counting",
                 request={"steps": 1})    # (unrelated runs change nothing)
    assert first_divergence(store, p)["position"] == 3
