"""The simulator's trace of the effects ledger: every state a row moves to, kept by triggers in a throw-away store.

Each state is written in the same transaction as the ledger's own write, so a crash that rolls the write back
rolls the trace back too. Only the simulator's scratch stores have the table (sim/scenario.py)."""

from __future__ import annotations

import sqlite3

from .base import Connection

_TRACE = """
CREATE TABLE sim_ledger (seq INTEGER PRIMARY KEY, name TEXT, state TEXT, key TEXT);
CREATE TRIGGER sim_ledger_added AFTER INSERT ON effects BEGIN
    INSERT INTO sim_ledger (name, state, key) VALUES (NEW.name, NEW.state, NEW.key); END;
CREATE TRIGGER sim_ledger_moved AFTER UPDATE OF state, attempts ON effects
    WHEN NEW.state IS NOT OLD.state OR NEW.attempts IS NOT OLD.attempts BEGIN
    INSERT INTO sim_ledger (name, state, key) VALUES (NEW.name, NEW.state, NEW.key); END;
"""


def trace_ledger(conn: sqlite3.Connection) -> None:
    """Make a SQLite store keep the trace from now on: the table and its two triggers on `effects`."""
    conn.executescript(_TRACE)


def ledger_moves(conn: Connection, after: int, name: str) -> list[tuple[int, str, str | None]]:
    """The states the ledger rows of effect `name` moved to since trace row `after`: (seq, state, key), in order."""
    return conn.execute("SELECT seq, state, key FROM sim_ledger WHERE seq > ? AND name = ? ORDER BY seq",
                        (after, name)).fetchall()
