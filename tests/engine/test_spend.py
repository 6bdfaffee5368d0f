"""What did I spend (issue 40, item 1): runs made by the real runtime with known usage (cache reads and writes, a
call in flight when its worker died, a model without a price, a fork that keeps its parent's reply); `spend`'s
totals are that usage priced by the table, grouped by local (or UTC) day, agent and model, each call counted once;
`ls --json` and the runs list say what each run spent, "cost unknown" for an unpriced one; `--reprice` prices the
stored usage by today's table; the TUI's spend view at 80x24; and the migration that fills in what calls answered
before it used, from the journal, on both stores."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import datetime

import pytest
from helpers import database_at_version, key, ok, registry_of, screen_of, tui, work

from tui_agent import Agent
from tui_agent.format import usd
from tui_agent.models import pricing
from tui_agent.models.pricing import Price, cost_usd
from tui_agent.models.tokens import estimate_prompt_tokens
from tui_agent.operate import fork, start
from tui_agent.runtime.faults import SimulatedCrash
from tui_agent.screens.spend import SpendScreen, bars
from tui_agent.spend import report
from tui_agent.store import open_store

SONNET, HAIKU, LOCAL = "claude-sonnet-4-5", "claude-haiku-4-5", "local-llama-3"
MAX_TOKENS = 1000
# each call's usage as the API reports it (the scripted provider gives what the script says)
ALPHA = [{"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 8000,
          "cache_creation_input_tokens": 500},
         {"input_tokens": 150, "output_tokens": 90, "cache_read_input_tokens": 8500}]
BETA = [{"input_tokens": 400, "output_tokens": 50}]
UNPRICED = [{"input_tokens": 70, "output_tokens": 20}]


def question(i: int) -> list[dict]:
    return [{"role": "user", "content": f"question {i}"}]


def asking(name: str, model: str, usages: list[dict], crashes: int = 0) -> Agent:
    """An agent that asks `model` once per usage; the first `crashes` attempts die in flight (as kill -9 would,
    after the attempt is committed)."""
    dying = [SimulatedCrash("in flight")] * crashes

    def script(messages, max_tokens, call_index):
        if dying:
            raise dying.pop()
        return {"content": [{"type": "text", "text": f"answer {call_index}"}], "usage": usages[call_index]}

    def run(ctx, request):
        for i in range(len(usages)):
            ctx.model(f"ask{i}", messages=question(i), max_tokens=MAX_TOKENS, model=model)
        return {}

    return Agent(name=name, run=run, script=script)


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


ALPHA_AT, BETA_AT, LOCAL_AT, FORK_AT = (at("2026-11-27T15:00Z"), at("2026-11-29T03:00Z"), at("2026-11-30T12:00Z"),
                                        at("2026-11-30T13:00Z"))


@pytest.fixture
def spent(database, clock, local_zone) -> dict:
    """The runs, each made at its own instant: alpha (2 Sonnet calls with cache reads and a cache write), beta (a
    Haiku call whose first attempt died in flight, then answered), local (a model without a price), and a fork of
    alpha from position 1 (it keeps alpha's first reply and asks the second again). Their ids."""
    agents = [asking("alpha", SONNET, ALPHA), asking("beta", HAIKU, BETA, crashes=1),
              asking("local", LOCAL, UNPRICED)]
    registry = registry_of(*agents)
    store = open_store(database)
    ids = {}
    try:
        for agent, instant in zip(agents, (ALPHA_AT, BETA_AT, LOCAL_AT)):
            clock.set(instant)
            ids[agent.name], _ = start(store, registry, agent_name=agent.name, request={}, model="scripted")
            if agent.name == "beta":
                with pytest.raises(SimulatedCrash):
                    work(store, registry, ids["beta"], worker="w-dies", lease_s=0.2)
                store.close()
                time.sleep(0.25)                     # its lease runs out: the call in flight died with it
                store = open_store(database)
            assert work(store, registry, ids[agent.name]).status == "succeeded"
        clock.set(FORK_AT)
        ids["fork"] = fork(store, ids["alpha"], 1)
        assert work(store, registry, ids["fork"]).status == "succeeded"
    finally:
        store.close()
    return ids


def tokens(usages: list[dict]) -> dict:
    def total(name: str) -> int:
        return sum(u.get(name, 0) for u in usages)

    return {"input_tokens": total("input_tokens") + total("cache_read_input_tokens")
            + total("cache_creation_input_tokens"), "output_tokens": total("output_tokens"),
            "cache_read_tokens": total("cache_read_input_tokens"),
            "cache_write_tokens": total("cache_creation_input_tokens")}


def figures(model_usages: list[tuple[str, dict]], runs: int, billed: float = 0.0) -> dict:
    """What a row of the report must say for these calls (each (model, usage)), priced by the table here."""
    prices = [cost_usd(model, usage) for model, usage in model_usages]
    return {"cost_usd": pytest.approx(sum(p for p in prices if p is not None)),
            "possibly_billed_usd": pytest.approx(billed), "unpriced_calls": prices.count(None),
            "calls": len(model_usages), "runs": runs, **tokens([usage for _, usage in model_usages])}


# beta's first attempt held its worst case, which may have been billed: the prompt's estimate and max_tokens
BILLED = cost_usd(HAIKU, {"input_tokens": estimate_prompt_tokens(None, question(0)), "output_tokens": MAX_TOKENS})
ALPHA_CALLS = [(SONNET, usage) for usage in ALPHA]
FORK_CALLS = [(SONNET, ALPHA[1])]      # its own: alpha's first reply is alpha's spending, not the fork's
BETA_CALLS = [(HAIKU, usage) for usage in BETA]
LOCAL_CALLS = [(LOCAL, usage) for usage in UNPRICED]


def test_spend_totals_are_the_stored_usage_priced_by_the_table_each_call_once(spent, tui_agent, database):
    total = json.loads(ok(tui_agent("spend", "--json")).stdout)["total"]
    assert total == figures(ALPHA_CALLS + FORK_CALLS + BETA_CALLS + LOCAL_CALLS, runs=4, billed=BILLED)
    assert total["cache_read_tokens"] == 8000 + 8500 + 8500 and BILLED > 0 and total["unpriced_calls"] == 1


@pytest.mark.parametrize(("by", "utc", "expected"), [
    ("day", False, {"2026-11-27": figures(ALPHA_CALLS, 1), "2026-11-28": figures(BETA_CALLS, 1, BILLED),
                    "2026-11-30": figures(LOCAL_CALLS + FORK_CALLS, 2)}),
    ("day", True, {"2026-11-27": figures(ALPHA_CALLS, 1), "2026-11-29": figures(BETA_CALLS, 1, BILLED),
                   "2026-11-30": figures(LOCAL_CALLS + FORK_CALLS, 2)}),
    ("agent", False, {"alpha": figures(ALPHA_CALLS + FORK_CALLS, 2), "beta": figures(BETA_CALLS, 1, BILLED),
                      "local": figures(LOCAL_CALLS, 1)}),
    ("model", False, {SONNET: figures(ALPHA_CALLS + FORK_CALLS, 2), HAIKU: figures(BETA_CALLS, 1, BILLED),
                      LOCAL: figures(LOCAL_CALLS, 1)}),
], ids=["local-days", "utc-days", "agent", "model"])
def test_by_groups_the_calls_by_local_or_utc_day_agent_or_model(spent, database, by, utc, expected):
    store = open_store(database)
    try:
        done = report(store, time.time(), by=by, utc=utc)
    finally:
        store.close()
    assert {row[by]: {k: v for k, v in row.items() if k != by} for row in done["rows"]} == expected
    if by == "day":       # oldest first; the others costliest first
        assert [row["day"] for row in done["rows"]] == sorted(expected)
    else:
        assert [row["cost_usd"] for row in done["rows"]] == sorted((r["cost_usd"] for r in done["rows"]), reverse=True)


def test_since_counts_the_calls_sent_from_then_on(spent, database):
    store = open_store(database)
    try:
        done = report(store, time.time(), by="agent", since=at("2026-11-30T00:00Z"))
    finally:
        store.close()
    assert {row["agent"]: row["calls"] for row in done["rows"]} == {"alpha": 1, "local": 1}   # the fork's, local's
    assert done["since"] == "2026-11-30T00:00:00.000Z"


def test_ls_says_what_each_run_spent_and_the_runs_add_up_to_spend(spent, tui_agent, database):
    rows = {row["id"]: row for row in json.loads(ok(tui_agent("ls", "--json")).stdout)}
    fields = ("cost_usd", "possibly_billed_usd", "unpriced_calls", "input_tokens", "output_tokens",
              "cache_read_tokens", "cache_write_tokens")
    for name, calls, billed in (("alpha", ALPHA_CALLS, 0.0), ("fork", FORK_CALLS, 0.0), ("beta", BETA_CALLS, BILLED),
                                ("local", LOCAL_CALLS, 0.0)):
        expected = {k: v for k, v in figures(calls, 1, billed).items() if k in fields}
        assert {k: rows[spent[name]][k] for k in fields} == expected, name
    total = json.loads(ok(tui_agent("spend", "--json")).stdout)["total"]
    assert {k: pytest.approx(sum(row[k] for row in rows.values())) for k in fields} == {k: total[k] for k in fields}
    table = ok(tui_agent("ls")).stdout
    line = {run_id: next(line for line in table.splitlines() if line.startswith(run_id)) for run_id in rows}
    assert "cost unknown" in line[spent["local"]]
    assert usd(rows[spent["alpha"]]["cost_usd"]) in line[spent["alpha"]]
    assert f"+{usd(BILLED)}?" in line[spent["beta"]]


def test_the_spend_table_says_each_day_and_the_total(spent, tui_agent):
    lines = ok(tui_agent("spend", "--utc")).stdout.splitlines()
    assert lines[0] == "spend by day (UTC days; as charged)"
    assert [line.split()[0] for line in lines[2:]] == ["2026-11-27", "2026-11-29", "2026-11-30", "total"]
    total = figures(ALPHA_CALLS + FORK_CALLS + BETA_CALLS + LOCAL_CALLS, 4, BILLED)
    assert lines[-1].split()[1:5] == [usd(total["cost_usd"].expected), "+1", "unpriced", usd(BILLED)]
    assert ok(tui_agent("spend", "--since", "1d")).stdout.splitlines()[1] == "no model calls since 1d"
    refused = tui_agent("spend", "--by", "week")
    assert refused.returncode == 2 and "'week' is not one of 'day', 'agent', 'model'" in refused.stderr
    refused = tui_agent("spend", "--since", "soon")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == ("tui-agent: --since soon is not a time: give an age back from now (30m, 2h, 3d, 2w) or "
                              "an ISO date or instant (2026-11-29, 2026-11-29T14:00)\n")


def test_reprice_prices_the_stored_usage_by_todays_table(spent, database, monkeypatch):
    """Today's table says other prices than the day's (Sonnet dearer, the local model priced): as charged keeps
    what each budget counted, repriced is the stored usage, cache reads and writes included, at today's prices."""
    dearer, local = Price(6, 7.5, 12, 0.6, 30), Price(0.5, 0.6, 1, 0.05, 1)
    charged = figures(ALPHA_CALLS + FORK_CALLS, 2)
    monkeypatch.setitem(pricing.PRICES, SONNET, dearer)
    monkeypatch.setitem(pricing.PRICES, LOCAL, local)
    store = open_store(database)
    try:
        as_charged = {row["model"]: row for row in report(store, time.time(), by="model")["rows"]}
        today = {row["model"]: row for row in report(store, time.time(), by="model", reprice=True)["rows"]}
    finally:
        store.close()
    assert as_charged[SONNET]["cost_usd"] == charged["cost_usd"]
    assert {k: v for k, v in today[SONNET].items() if k != "model"} == figures(ALPHA_CALLS + FORK_CALLS, 2)
    assert today[SONNET]["cost_usd"] > as_charged[SONNET]["cost_usd"]
    assert (as_charged[LOCAL]["unpriced_calls"], today[LOCAL]["unpriced_calls"]) == (1, 0)
    assert today[LOCAL]["cost_usd"] == pytest.approx(cost_usd(LOCAL, UNPRICED[0]))
    assert today[LOCAL]["cost_usd"] > 0
    assert today[HAIKU]["possibly_billed_usd"] == pytest.approx(BILLED)   # its reservation, at today's price


async def test_the_runs_list_shows_the_cost_or_cost_unknown(spent, database):
    async with tui(database, size=(140, 30)) as (app, pilot):
        await pilot.pause()
        table = screen_of(app).query_one("DataTable")
        assert str(table.get_cell(spent["local"], "cost")) == "cost unknown"
        assert str(table.get_cell(spent["alpha"], "cost")) == usd(figures(ALPHA_CALLS, 1)["cost_usd"].expected)
        assert str(table.get_cell(spent["beta"], "cost")) == \
            f"{usd(figures(BETA_CALLS, 1)['cost_usd'].expected)} +{usd(BILLED)}?"
        assert str(table.get_cell(spent["alpha"], "tokens")) == "18.4k/390"


async def test_the_spend_view_fits_80x24_with_a_bar_a_day_and_the_same_table(spent, database, clock):
    clock.set(at("2026-12-01T17:00Z"))          # the last 30 days hold every call
    async with tui(database, size=(80, 24)) as (app, pilot):
        await key(pilot, "dollar_sign")
        screen = app.screen
        assert isinstance(screen, SpendScreen)
        table = screen.query_one("DataTable")
        assert [key.value for key in table.rows] == ["2026-11-27", "2026-11-28", "2026-11-30"]
        assert [str(table.get_cell("2026-11-28", c)) for c in ("cost", "billed", "calls", "runs")] == \
            [usd(figures(BETA_CALLS, 1)["cost_usd"].expected), usd(BILLED), "1", "1"]
        assert str(table.get_cell("2026-11-30", "cost")).endswith("+1 unpriced")
        for widget in (screen.query_one("#chart"), table, screen.query_one("#spend-strip")):
            assert screen.region.contains_region(widget.region), widget
        assert sum(column.get_render_width(table) for column in table.columns.values()) <= 80
        chart = str(screen.query_one("#chart").render()).splitlines()
        assert chart[-1].strip().startswith("Nov 02") and chart[-1].endswith("Dec 01")
        assert "2026-11-27" in str(screen.query_one("#spend-strip").content)
        await key(pilot, "g")
        assert [key.value for key in table.rows] == ["alpha", "beta", "local"]
        await key(pilot, "r")
        assert "today's prices" in str(screen.query_one("#summary").content)
        await key(pilot, "escape")
        assert not isinstance(app.screen, SpendScreen)


def test_a_bar_a_day_scaled_to_the_largest_and_a_spending_day_never_blank():
    assert bars([0, 1, 4, 0.001], rows=2) == ["    █  ", "  ▄ █ ▁"]
    assert bars([], rows=1) == [""]


# -- the migration: what earlier calls used, from the journal ------------------------------------------------

USAGE = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}
REPLIES = {   # position -> the journal's result (None: kept as an artifact)
    0: json.dumps({"model": SONNET, "content": [], "usage": USAGE}),
    1: "[" * 1500 + "]" * 1500,                                  # nested too deeply to be read
    2: json.dumps({"model": SONNET, "usage": "not an object"}),
    3: None,
}


def _v13_rows(mark: str) -> list[tuple[str, tuple]]:
    """A run with four answered calls, as a tui-agent at schema version 13 recorded them."""
    rows = [("INSERT INTO runs (id, agent, request, status, attempt, fence, generation, created_at, updated_at)"
             " VALUES ({0}, 'old', '{{}}', 'succeeded', 1, 1, 1, 1.0, 1.0)", ("r-old",))]
    for position, result in REPLIES.items():
        rows.append(("INSERT INTO journal_rows (run_id, generation, position, name, kind, result, artifact, attempts,"
                     " fence) VALUES ({0}, 1, {0}, 'ask', 'model', {0}, {0}, 1, 1)",
                     ("r-old", position, result, None if result else "artifacts/r-old/reply.json")))
        rows.append(("INSERT INTO model_calls (run_id, generation, position, call, name, fence, provider, model, state,"
                     " request, reserved_input, reserved_output, tokens, cost_usd, started_at, updated_at)"
                     " VALUES ({0}, 1, {0}, 1, 'ask', 1, 'anthropic', {0}, 'answered', '{{}}', 0, 0, 5, 0.001, 2.0, 2.0)",
                     ("r-old", position, SONNET)))
    return [(sql.format(mark), params) for sql, params in rows]


def _migrated(store) -> dict[int, tuple]:
    return {row[0]: tuple(row[1:]) for row in store.conn.execute(
        "SELECT position, input_tokens, cache_read_tokens, cache_write_tokens, usage FROM model_calls"
        " ORDER BY position")}


def _expect(found: dict[int, tuple]) -> None:
    *counts, usage = found[0]
    assert counts == [117, 100, 7] and json.loads(usage) == USAGE
    assert found[1] == found[2] == found[3] == (None, None, None, None)


def test_the_migration_fills_in_what_earlier_calls_used_from_the_journal_on_sqlite(db_path):
    database_at_version(db_path, 13)
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("PRAGMA foreign_keys = ON")
        for sql, params in _v13_rows("?"):
            conn.execute(sql, params)
    conn.close()
    store = open_store(db_path)
    try:
        _expect(_migrated(store))
        assert report(store, time.time())["total"]["input_tokens"] == 117
    finally:
        store.close()


@pytest.mark.postgres
def test_the_migration_fills_in_what_earlier_calls_used_from_the_journal_on_postgresql(pg_url):
    import psycopg

    from tui_agent.store.schema_postgres import FIRST, MIGRATIONS, statements

    with psycopg.connect(pg_url) as conn:
        for statement in statements(FIRST + [block for version in range(10, 14) for block in MIGRATIONS[version]]):
            conn.execute(statement)
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '13')")
        for sql, params in _v13_rows("%s"):
            conn.execute(sql, params)
    store = open_store(pg_url)
    try:
        _expect(_migrated(store))
        assert report(store, time.time())["total"]["input_tokens"] == 117
    finally:
        store.close()


def test_a_new_calls_usage_is_kept_beside_its_cost(spent, database):
    store = open_store(database)
    try:
        kept = [json.loads(usage) for (usage,) in store.conn.execute(
            "SELECT usage FROM model_calls WHERE run_id = ? AND state = 'answered' ORDER BY position", (spent["alpha"],))]
    finally:
        store.close()
    assert [{k: u[k] for k in usage} for u, usage in zip(kept, ALPHA)] == ALPHA

