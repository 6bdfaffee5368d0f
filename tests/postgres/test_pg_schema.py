"""schema_postgres.py makes the same schema as SQLite's migrations: the two catalogs are read and compared (tables,
views, columns in order with their types, NOT NULL and defaults, primary keys, identity columns, foreign keys,
indexes with their columns, uniqueness and WHERE clauses, the meta rows), both as created and as migrated from
version 9 (PostgreSQL's first), and checkpoints_now returns the same rows with the same Python types on both. And the pg_url fixture gives each test an empty database of its own."""

import re
import sqlite3

import psycopg
import pytest
from helpers import database_at_version
from old_schemas import V9, pg_v9

from tui_agent.store import open_store
from tui_agent.store.schema import SCHEMA_VERSION
from tui_agent.store.schema_postgres import (
    MIGRATIONS,
    PG_SCHEMA_VERSION,
    create_schema,
    statements,
)

SQLITE_TYPES = {"TEXT": "text", "INTEGER": "bigint", "REAL": "double precision", "FLOAT": "double precision",
                "BLOB": "bytea"}
PG_ACTIONS = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


@pytest.fixture(params=["created", "migrated"])
def sqlite_db(tmp_path, request):
    """A new SQLite store, or one made at version 9 and opened (migrated) by this code."""
    path = tmp_path / "schema.db"
    if request.param == "migrated":
        database_at_version(path, V9)
    open_store(path).close()
    conn = sqlite3.connect(path)
    yield conn
    conn.close()


@pytest.fixture(params=["created", "migrated"])
def pg(pg_url, request):
    """A new PostgreSQL schema, or one made at version 9 and opened (migrated) by this code."""
    if request.param == "migrated":
        pg_v9(pg_url)
        open_store(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        if request.param == "created":
            create_schema(conn)
            conn.commit()
        yield conn


# --- the SQLite catalog -----------------------------------------------------------------------------------------

def sqlite_relations(conn):
    rows = conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')"
                        " AND name NOT LIKE 'sqlite_%'").fetchall()
    return dict(rows)


def sqlite_columns(conn, table):
    """(name, pg type or None for a view's computed column, not null, default), in order."""
    return [(name, SQLITE_TYPES.get(decl.upper()) if decl else None, bool(notnull), default)
            for _, name, decl, notnull, default, _ in conn.execute(f"PRAGMA table_info({table})")]


def sqlite_primary_key(conn, table):
    info = conn.execute(f"PRAGMA table_info({table})").fetchall()
    return [name for _, name, *_, pk in sorted((r for r in info if r[5]), key=lambda r: r[5])]


def sqlite_identity(conn, table):
    """An INTEGER PRIMARY KEY of a rowid table is the rowid: filled in when an insert leaves it out."""
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    pk = [r for r in conn.execute(f"PRAGMA table_info({table})") if r[5]]
    if len(pk) == 1 and pk[0][2].upper() == "INTEGER" and "WITHOUT ROWID" not in sql.upper():
        return {pk[0][1]}
    return set()


def sqlite_foreign_keys(conn, table):
    keys = {}
    for fk_id, _, other, column, other_column, on_update, on_delete, _ in conn.execute(
            f"PRAGMA foreign_key_list({table})"):
        cols, other_cols, *_ = keys.setdefault(fk_id, ([], [], other, on_update, on_delete))
        cols.append(column)
        other_cols.append(other_column)
    return sorted((tuple(c), other, tuple(oc), upd, dele) for c, oc, other, upd, dele in keys.values())


def sqlite_indexes(conn, table):
    """{name: (columns, unique, WHERE text or None)} of the indexes that are not the primary key."""
    out = {}
    for _, name, unique, origin, partial in conn.execute(f"PRAGMA index_list({table})"):
        if origin == "pk":
            continue
        columns = [r[2] for r in sorted(conn.execute(f"PRAGMA index_info({name})"))]
        where = None
        if partial:
            sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
            where = re.search(r"\bWHERE\b(.*)$", sql, re.S | re.I).group(1).strip()
        out[name] = (columns, bool(unique), where)
    return out


# --- the PostgreSQL catalog -------------------------------------------------------------------------------------

def pg_relations(conn):
    rows = conn.execute("SELECT table_name, table_type FROM information_schema.tables"
                        " WHERE table_schema = 'public'").fetchall()
    return {name: {"BASE TABLE": "table", "VIEW": "view"}[kind] for name, kind in rows}


def pg_columns(conn, table):
    return conn.execute("SELECT column_name, data_type, is_nullable = 'NO', column_default, is_identity = 'YES'"
                        " FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s"
                        " ORDER BY ordinal_position", (table,)).fetchall()


_INDEX_COLUMNS = ("array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)"
                  " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord)")


def pg_primary_key(conn, table):
    row = conn.execute(f"SELECT {_INDEX_COLUMNS} FROM pg_index i WHERE i.indrelid = %s::regclass"
                       " AND i.indisprimary", (f"public.{table}",)).fetchone()
    return list(row[0]) if row else []


def pg_indexes(conn, table):
    rows = conn.execute(f"SELECT c.relname, {_INDEX_COLUMNS}, i.indisunique, pg_get_expr(i.indpred, i.indrelid)"
                        " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                        " WHERE i.indrelid = %s::regclass AND NOT i.indisprimary",
                        (f"public.{table}",)).fetchall()
    return {name: (list(columns), unique, where) for name, columns, unique, where in rows}


def pg_foreign_keys(conn, table):
    rows = conn.execute(
        "SELECT array(SELECT a.attname FROM unnest(f.conkey) WITH ORDINALITY AS k(attnum, ord)"
        "             JOIN pg_attribute a ON a.attrelid = f.conrelid AND a.attnum = k.attnum ORDER BY k.ord),"
        "       r.relname,"
        "       array(SELECT a.attname FROM unnest(f.confkey) WITH ORDINALITY AS k(attnum, ord)"
        "             JOIN pg_attribute a ON a.attrelid = f.confrelid AND a.attnum = k.attnum ORDER BY k.ord),"
        "       f.confupdtype, f.confdeltype"
        " FROM pg_constraint f JOIN pg_class r ON r.oid = f.confrelid"
        " WHERE f.contype = 'f' AND f.conrelid = %s::regclass", (f"public.{table}",)).fetchall()
    return sorted((tuple(c), other, tuple(oc), PG_ACTIONS[upd], PG_ACTIONS[dele])
                  for c, other, oc, upd, dele in rows)


def pg_normalized_where(conn, table, columns, where):
    """SQLite's WHERE text as PostgreSQL prints it back: put on an index of a scratch copy of the table, so the
    two predicates are compared after the same parsing, not as strings written differently."""
    with conn.transaction(force_rollback=True):
        conn.execute(f"CREATE TEMP TABLE scratch (LIKE public.{table})")
        conn.execute(f"CREATE INDEX scratch_where ON scratch ({', '.join(columns)}) WHERE {where}")
        return conn.execute("SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
                            " WHERE i.indexrelid = 'scratch_where'::regclass").fetchone()[0]


# --- the tests --------------------------------------------------------------------------------------------------

def test_the_version_is_sqlites():
    assert PG_SCHEMA_VERSION == SCHEMA_VERSION


def test_same_tables_and_views(sqlite_db, pg):
    assert pg_relations(pg) == sqlite_relations(sqlite_db)


def test_same_columns_in_the_same_order(sqlite_db, pg):
    for table, kind in sorted(sqlite_relations(sqlite_db).items()):
        lite = sqlite_columns(sqlite_db, table)
        post = pg_columns(pg, table)
        assert [c[0] for c in post] == [c[0] for c in lite], table
        if kind == "view":
            # a view's directly selected columns keep their table's type
            for (name, lite_type, *_), (_, pg_type, *_) in zip(lite, post):
                assert lite_type in (None, pg_type), f"{table}.{name}"
            continue
        primary = set(sqlite_primary_key(sqlite_db, table))
        identity = sqlite_identity(sqlite_db, table)
        for (name, lite_type, lite_notnull, lite_default), (_, pg_type, pg_notnull, pg_default, pg_identity) in zip(
                lite, post):
            where = f"{table}.{name}"
            assert pg_type == lite_type, where
            # PostgreSQL's primary keys are NOT NULL; SQLite's are too, but for its old quirk on rowid tables
            assert pg_notnull == (lite_notnull or name in primary), where
            assert pg_identity == (name in identity), where
            assert (pg_default is None) == (lite_default is None), where
            if lite_default is not None:
                assert float(pg_default) == float(lite_default), where


def test_same_primary_and_foreign_keys(sqlite_db, pg):
    for table, kind in sorted(sqlite_relations(sqlite_db).items()):
        if kind == "table":
            assert pg_primary_key(pg, table) == sqlite_primary_key(sqlite_db, table), table
            assert pg_foreign_keys(pg, table) == sqlite_foreign_keys(sqlite_db, table), table


def test_same_indexes(sqlite_db, pg):
    seen = 0
    for table, kind in sorted(sqlite_relations(sqlite_db).items()):
        if kind != "table":
            continue
        lite = sqlite_indexes(sqlite_db, table)
        post = pg_indexes(pg, table)
        assert sorted(post) == sorted(lite), table
        for name, (columns, unique, where) in lite.items():
            pg_columns_, pg_unique, pg_where = post[name]
            assert (pg_columns_, pg_unique) == (columns, unique), name
            assert (pg_where is None) == (where is None), name
            if where is not None:
                assert pg_where == pg_normalized_where(pg, table, columns, where), name
            seen += 1
    assert seen >= 13, "fewer indexes than the schema has: did the catalogs read?"


def test_same_meta_rows(sqlite_db, pg):
    lite = sqlite_db.execute("SELECT key, value FROM meta ORDER BY key").fetchall()
    assert lite == [("schema_version", str(SCHEMA_VERSION))]
    assert pg.execute("SELECT key, value FROM meta ORDER BY key").fetchall() == lite


def test_create_schema_is_the_callers_transaction(pg_url):
    with psycopg.connect(pg_url) as conn:
        create_schema(conn)
        assert pg_relations(conn)
        conn.rollback()
        assert pg_relations(conn) == {}


def test_identity_ids_are_filled_in(pg):
    pg.execute("INSERT INTO runs (id, agent, request, status, created_at, updated_at)"
               " VALUES ('r1', 'a', '{}', 'queued', 1.0, 1.0)")
    ids = [pg.execute("INSERT INTO events (run_id, at, kind, message) VALUES ('r1', 1.0, 'k', 'm') RETURNING id")
           .fetchone()[0] for _ in range(3)]
    assert ids == [1, 2, 3]


# One run with no journal tail, one with a tail (and folded rows, and rows of another generation), one whose
# checkpoint has no updated_at (SQLite's scalar max of NULL is NULL), one with a tail of NULL wall_s only.
RUNS = ["r-empty", "r-tail", "r-null", "r-nullwall"]
CHECKPOINTS = [
    # run_id, generation, schema_version, current_step, total_steps, used_steps, used_cost_usd, used_wall_s,
    # soft_dimensions, updated_at
    ("r-empty", 1, 1, 0, None, 0, 0.0, 0.0, None, 100.0),
    ("r-tail", 2, 1, 2, 10, 2, 0.5, 1.5, '["steps"]', 100.0),
    ("r-null", 1, 1, 0, 3, 0, 0.0, 0.0, None, None),
    ("r-nullwall", 1, 1, 1, None, 1, 0.0, 2.0, None, 300.0),
]
JOURNAL = [
    # run_id, generation, position, started_at, duration_s, wall_s
    ("r-tail", 1, 5, 900.0, 1.0, 7.0),  # another generation: not part of the tail
    ("r-tail", 2, 0, 10.0, 1.0, None),  # folded into the checkpoint already
    ("r-tail", 2, 1, 20.0, 1.0, None),
    ("r-tail", 2, 2, 200.0, 5.0, 0.25),
    ("r-tail", 2, 3, 210.0, 1.0, 0.5),
    ("r-null", 1, 0, 50.0, 2.0, 1.0),
    ("r-nullwall", 1, 1, 10.0, 1.0, None),
]


def _fill(conn, mark):
    def run(sql, rows):
        conn.executemany(sql.replace("?", mark), rows)

    run("INSERT INTO runs (id, agent, request, status, created_at, updated_at) VALUES (?, 'a', '{}', 'running', 1.0,"
        " 1.0)", [(r,) for r in RUNS])
    run("INSERT INTO checkpoints (run_id, generation, schema_version, current_step, total_steps, used_steps,"
        " used_cost_usd, used_wall_s, soft_dimensions, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", CHECKPOINTS)
    # the rows past a run's checkpoint (its generation's, from current_step on) are its tail, in journal_tail
    past = {(c[0], c[1]): c[3] for c in CHECKPOINTS}
    for table in ("journal_rows", "journal_tail"):
        run(f"INSERT INTO {table} (run_id, generation, position, name, kind, attempts, fence, started_at, duration_s,"
            " wall_s) VALUES (?, ?, ?, 'step', 'step', 1, 1, ?, ?, ?)",
            [r for r in JOURNAL if (r[2] >= past.get(r[:2], r[2] + 1)) == (table == "journal_tail")])


def test_checkpoints_now_returns_the_same_rows_and_types(sqlite_db, pg):
    _fill(sqlite_db, "?")
    sqlite_db.commit()
    with pg.cursor() as cur:
        _fill(cur, "%s")
    pg.commit()
    lite = sqlite_db.execute("SELECT * FROM checkpoints_now ORDER BY run_id").fetchall()
    post = pg.execute("SELECT * FROM checkpoints_now ORDER BY run_id").fetchall()
    assert post == lite
    assert [[type(v) for v in row] for row in post] == [[type(v) for v in row] for row in lite]
    by_run = {row[0]: row for row in lite}
    columns = [c[0] for c in sqlite_columns(sqlite_db, "checkpoints_now")]
    current, used_steps, wall, updated = (columns.index(c) for c in ("current_step", "used_steps", "used_wall_s",
                                                                       "updated_at"))
    assert [by_run["r-tail"][i] for i in (current, used_steps, wall, updated)] == [4, 4, 2.25, 211.0]
    assert by_run["r-null"][updated] is None
    assert by_run["r-nullwall"][wall] == 2.0


# --- the fixture ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_gets_an_empty_database_of_its_own(pg_url, turn):
    """Both turns start empty and leave a table behind: whichever runs second would see the first's."""
    name = pg_url.rsplit("/", 1)[1]
    assert re.fullmatch(r"t_[0-9a-f]{12}", name)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT current_database()").fetchone()[0] == name
        assert conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                            " WHERE n.nspname = 'public'").fetchone()[0] == 0
        conn.execute("CREATE TABLE left_behind (turn bigint)")
        conn.execute("INSERT INTO left_behind VALUES (%s)", (turn,))



def test_four_db_inits_at_once_make_the_schema_once_and_each_says_what_it_found(pg_server):
    """Processes that open an empty database at the same moment: one makes the schema, the others wait for its
    lock and then find it (a name lookup answering from what the session had cached before it waited made them
    create it again: DuplicateTable, about one round in two with the old lookup)."""
    import subprocess
    import sys
    import time

    admin = psycopg.connect(pg_server + "/postgres", autocommit=True)
    try:
        for turn in range(6):
            name = f"race_{turn}_{time.monotonic_ns()}"
            admin.execute(f'CREATE DATABASE "{name}"')
            go = time.time() + 1.5   # every process opens at this instant, its start-up behind it
            code = ("import sys, time; from tui_agent.cli import main; time.sleep(max(0, float(sys.argv[1]) - "
                    "time.time())); sys.argv = ['tui-agent', 'db', 'init', sys.argv[2]]; main()")
            procs = [subprocess.Popen([sys.executable, "-c", code, str(go), f"{pg_server}/{name}"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
            done = [(p.wait(60), *p.communicate()) for p in procs]
            assert [rc for rc, _, _ in done] == [0] * 4, done
            said = [out.splitlines()[0] for _, out, _ in done]
            assert sum(line.startswith("created") for line in said) == 1, said
            assert sum("already" in line for line in said) == 3, said
    finally:
        admin.close()


def test_version_11_moves_the_rows_past_each_checkpoint_into_the_tail_on_both(tmp_path, pg_url):
    """Databases at version 10 (one journal table) whose runs stopped inside their tails: migrated, the rows past
    each checkpoint are in journal_tail and the rest in journal_rows, on both dialects, and checkpoints_now reads
    as it did."""
    lite_path = tmp_path / "v10.db"
    database_at_version(lite_path, 10)
    pg_v9(pg_url)
    with psycopg.connect(pg_url) as conn:
        for statement in statements(MIGRATIONS[10]):
            conn.execute(statement)
        conn.execute("UPDATE meta SET value = '10' WHERE key = 'schema_version'")
    with sqlite3.connect(lite_path) as lite, psycopg.connect(pg_url) as post:
        for conn, mark in ((lite, "?"), (post.cursor(), "%s")):
            conn.executemany("INSERT INTO runs (id, agent, request, status, created_at, updated_at) VALUES"
                             " (?, 'a', '{}', 'running', 1.0, 1.0)".replace("?", mark), [(r,) for r in RUNS])
            conn.executemany("INSERT INTO checkpoints (run_id, generation, schema_version, current_step, total_steps,"
                             " used_steps, used_cost_usd, used_wall_s, soft_dimensions, updated_at) VALUES"
                             " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)".replace("?", mark), CHECKPOINTS)
            conn.executemany("INSERT INTO journal (run_id, generation, position, name, kind, attempts, fence, started_at,"
                             " duration_s, wall_s) VALUES (?, ?, ?, 'step', 'step', 1, 1, ?, ?, ?)".replace("?", mark),
                             JOURNAL)
    lite.close()
    open_store(lite_path).close()
    open_store(pg_url).close()
    lite = sqlite3.connect(lite_path)
    post = psycopg.connect(pg_url)
    try:
        for table in ("journal_rows", "journal_tail"):
            sql = f"SELECT run_id, generation, position FROM {table} ORDER BY 1, 2, 3"
            assert lite.execute(sql).fetchall() == [tuple(r) for r in post.execute(sql).fetchall()]
        assert lite.execute("SELECT run_id, generation, position FROM journal_tail ORDER BY 1, 2, 3").fetchall() == [
            ("r-null", 1, 0), ("r-nullwall", 1, 1), ("r-tail", 2, 2), ("r-tail", 2, 3)]
        now = "SELECT run_id, current_step, used_steps, used_wall_s, updated_at FROM checkpoints_now ORDER BY run_id"
        assert lite.execute(now).fetchall() == post.execute(now).fetchall()
        assert dict((r[0], r[1:]) for r in lite.execute(now))["r-tail"] == (4, 4, 2.25, 211.0)
    finally:
        lite.close()
        post.close()
