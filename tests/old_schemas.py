"""Databases as an older tui-agent left them on PostgreSQL, for the tests that migrate them."""

from __future__ import annotations

import psycopg

from tui_agent.store.schema_postgres import FIRST, statements

V9 = 9   # the version PostgreSQL's schema began at


def pg_v9(url):
    """A PostgreSQL database as tui-agent 9 made it (schema_postgres.FIRST is that version, frozen)."""
    with psycopg.connect(url) as conn:
        for statement in statements(FIRST):
            conn.execute(statement)
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', %s)", (str(V9),))
